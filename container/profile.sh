# shellcheck shell=sh
# /etc/profile.d/proven-torch.sh: every login shell (SSH sessions, `bash -l`,
# `bash -lc CMD` in Slurm and Kubernetes, `docker exec -it CID bash -l`, Jupyter
# terminals) gets the container's environment back after /etc/profile has
# reset PATH to Debian's default.
#
# 1. SSH sessions: start.sh writes the container's environment to
#    ~/.ssh/environment at start; sshd applies it to every session
#    (PermitUserEnvironment), this applies it again after /etc/profile.
if [ -r "$HOME/.ssh/environment" ]; then
    while IFS= read -r proven_torch_line; do
        # shellcheck disable=SC2163 # the line is NAME=VALUE: export that variable
        case "$proven_torch_line" in
            '' | \#* | PROVEN_TORCH_SSH_WORKDIR=*) ;; # for `ssh HOST CMD` only (container/ssh-workdir.sh)
            *=*) export "$proven_torch_line" ;;
        esac
    done <"$HOME/.ssh/environment"
    unset proven_torch_line
    # An SSH login starts in /workspace, where JupyterLab works and `ssh HOST CMD` runs too; once.
    # shellcheck source=/dev/null # the image's own file, beside this one
    . /opt/proven-torch/container/ssh-workdir.sh
fi

# 2. Every login shell: the PATH the container started with (PID 1's, which
#    holds the user's own `-e PATH=...` too) when it can be read and is this
#    image's; else the venv in front of Debian's PATH, with the sbin folders
#    the image's PATH has (sshd, ss).
proven_torch_venv="${VIRTUAL_ENV:-/opt/venv}/bin"
case ":$PATH:" in
    *":$proven_torch_venv:"*) ;;
    *)
        proven_torch_path="$({ tr '\0' '\n' </proc/1/environ; } 2>/dev/null | sed -n 's/^PATH=//p')"
        case ":$proven_torch_path:" in
            *":$proven_torch_venv:"*) PATH="$proven_torch_path" ;;
            *)
                PATH="$proven_torch_venv:$PATH"
                for proven_torch_dir in /usr/local/sbin /usr/sbin /sbin; do
                    case ":$PATH:" in *":$proven_torch_dir:"*) ;; *) PATH="$PATH:$proven_torch_dir" ;; esac
                done
                ;;
        esac
        export PATH
        unset proven_torch_path proven_torch_dir
        ;;
esac
unset proven_torch_venv
