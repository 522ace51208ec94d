# shellcheck shell=sh
# BASH_ENV of SSH sessions (start.sh writes it into ~/.ssh/environment): `ssh HOST CMD` runs CMD
# through `bash -c`, which reads this file first, so the command starts in /workspace, where an
# interactive SSH login starts too (profile.sh), where JupyterLab works and where the docs put files.
# Once per session: it takes BASH_ENV away again, so the scripts the command runs stay where they are.
unset BASH_ENV
if [ "$PWD" = "$HOME" ] && [ -d /workspace ] && [ -x /workspace ]; then
    cd /workspace || true
fi
