# /etc/profile.d/proven-torch.sh: login shells (interactive SSH sessions, `bash -l`)
# get the container's environment back after /etc/profile has reset PATH.
# start.sh writes ~/.ssh/environment at start; sshd applies it to every SSH
# session (PermitUserEnvironment), this applies it again after /etc/profile.
if [ -r "$HOME/.ssh/environment" ]; then
    while IFS= read -r proven_torch_line; do
        case "$proven_torch_line" in
            '' | \#*) ;;
            *=*) export "$proven_torch_line" ;;
        esac
    done <"$HOME/.ssh/environment"
    unset proven_torch_line
fi
