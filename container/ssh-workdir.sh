# shellcheck shell=sh
# Sourced first by /etc/bash.bashrc (the image puts the line there): Debian's bash reads that file for
# the commands sshd runs (`ssh HOST CMD` is `bash -c CMD`, and bash built with SSH_SOURCE_BASHRC reads
# the bashrc files for it, not BASH_ENV). start.sh writes PROVEN_TORCH_SSH_WORKDIR=/workspace into
# ~/.ssh/environment, so only SSH sessions carry it: the command starts in /workspace, where an
# interactive login starts too (profile.sh), where JupyterLab works and where the docs put files.
# Once per session: the variable goes with the first shell, so the scripts the command runs stay
# where they are, and nothing else (a Lab terminal, docker exec) is moved.
if [ -n "${PROVEN_TORCH_SSH_WORKDIR:-}" ]; then
    if [ "$PWD" = "$HOME" ] && [ -d "$PROVEN_TORCH_SSH_WORKDIR" ] && [ -x "$PROVEN_TORCH_SSH_WORKDIR" ]; then
        cd "$PROVEN_TORCH_SSH_WORKDIR" || true
    fi
    unset PROVEN_TORCH_SSH_WORKDIR
fi
