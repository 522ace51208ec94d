#!/usr/bin/env bash
# SC2174: `mkdir -p -m 700 DIR` sets the mode of DIR only, which is what is meant
# here: its parents exist already (/tmp, $RUN_DIR, the user's home).
# shellcheck disable=SC2174
# The image's entrypoint, under tini (PID 1, `tini -g`: signals go to the whole
# process group, zombies are reaped). Three modes, chosen by the command:
#
#   (no command) | jupyter-lab [ARGS] | jupyter lab [ARGS] | --JupyterFlag ...
#       JupyterLab on 0.0.0.0:8888, token auth always on, plus sshd on 2222 when
#       a public key is given. The container lives as long as JupyterLab does and
#       exits with its status; SIGTERM/SIGINT stop everything and exit 0.
#   sshd
#       sshd only (needs a public key).
#   any other command (python x.py, bash, python -m smoke ...)
#       run directly with exec: its stdout, stderr and exit status are the
#       container's, nothing is printed around it.
#
# Environment (docs/using-the-image.md): JUPYTER_TOKEN, JUPYTER_TOKEN_FILE,
# JUPYTER_PASSWORD_HASH, PUBLIC_KEY, PUBLIC_KEY_FILE, SSH_PORT (2222), SSH_HOST_PORT (the host's port for the log's ssh line),
# SSH_HOST_KEY_DIR (/workspace/.ssh-host-keys), SSH_X11_FORWARDING (yes; no turns off `ssh -X`).
#
# Everything runs as the container's user (any UID): sshd too, so only that user
# can log in, with a key, and no process here can become root.
set -euo pipefail

readonly RUN_DIR=/tmp/proven-torch              # run-time state; healthcheck.py reads it
readonly CONTAINER_DIR=/opt/proven-torch/container
readonly DEFAULT_HOST_KEY_DIR=/workspace/.ssh-host-keys
# sshd's log lines (stderr, \r\n-terminated) lose the \r and the two lines each
# healthcheck probe (connect, read the banner, close) would add every few seconds.
readonly SSHD_LOG_FILTER='s/\r$//; /^kex_exchange_identification: Connection closed by remote host$/d; /^Connection closed by 127\.0\.0\.1 port [0-9]*$/d'
# DISPLAY and XAUTHORITY too: sshd sets them for an `ssh -X` session, and the file would win.
readonly SSH_ENV_SKIP=" JUPYTER_TOKEN JUPYTER_TOKEN_FILE JUPYTER_PASSWORD_HASH PUBLIC_KEY PUBLIC_KEY_FILE HOSTNAME PWD OLDPWD SHLVL TERM _ DISPLAY XAUTHORITY "

log() { printf 'start.sh: %s\n' "$*" >&2; }

# --- identity: HOME and a passwd entry for any UID (all modes, silent) --------

# A writable HOME: Docker sets HOME=/ for a UID that has no passwd entry.
setup_home() {
    if [[ -z "${HOME:-}" || "$HOME" == / || ! -d "$HOME" || ! -w "$HOME" ]]; then
        HOME="$RUN_DIR/home"
        mkdir -p -m 700 "$HOME"
    fi
    export HOME
}

# A UID without a passwd entry gets one through nss_wrapper (no writable
# /etc/passwd): sshd needs it to log the user in, getpass.getuser() (used by
# torch.compile's caches) and whoami need it too.
setup_passwd_entry() {
    local uid gid name lib
    uid="$(id -u)"
    gid="$(id -g)"
    getent passwd "$uid" >/dev/null && return 0
    lib="$(compgen -G '/usr/lib/*/libnss_wrapper.so' | head -n 1 || true)"
    [[ -n "$lib" ]] || return 0
    name="${PROVEN_TORCH_USER:-user}"
    mkdir -p "$RUN_DIR/nss"
    grep -v "^${name}:" /etc/passwd >"$RUN_DIR/nss/passwd"
    printf '%s:x:%s:%s:%s:%s:/bin/bash\n' "$name" "$uid" "$gid" "$name" "$HOME" >>"$RUN_DIR/nss/passwd"
    cp /etc/group "$RUN_DIR/nss/group"
    getent group "$gid" >/dev/null || printf '%s:x:%s:\n' "$name" "$gid" >>"$RUN_DIR/nss/group"
    export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}" \
        NSS_WRAPPER_PASSWD="$RUN_DIR/nss/passwd" NSS_WRAPPER_GROUP="$RUN_DIR/nss/group"
}

make_run_dir() {
    mkdir -p -m 700 "$RUN_DIR" 2>/dev/null && [[ -O "$RUN_DIR" ]] && chmod 700 "$RUN_DIR"
}

# XDG_RUNTIME_DIR (the image sets it under $RUN_DIR): the user's, 0700, as the XDG spec asks.
setup_runtime_dir() {
    [[ "${XDG_RUNTIME_DIR:-}" == "$RUN_DIR"/* ]] || return 0
    mkdir -p -m 700 "$XDG_RUNTIME_DIR" 2>/dev/null || true
}

setup_identity() {
    make_run_dir || return 0
    setup_home
    setup_passwd_entry
    setup_runtime_dir
}

# --- start-up report (informational, never fatal) ------------------------------

startup_report() {
    [[ -f /opt/proven-torch/smoke/startup.py ]] || return 0
    # From / so that a smoke/ folder in /workspace cannot shadow the module.
    (cd / && timeout 15 python -m smoke.startup </dev/null) \
        || log "the start-up report (python -m smoke.startup) exited with status $?; ignored"
}

# --- SSH -------------------------------------------------------------------------

# Install the keys from PUBLIC_KEY / PUBLIC_KEY_FILE into ~/.ssh/authorized_keys
# (rewritten at each start) unless that file is the user's own (mounted); each
# key line is checked with ssh-keygen. Returns 0 when the file holds a valid key;
# logs one line when something is wrong. The vetting is container/ssh_keys.py.
setup_authorized_keys() {
    python3 "$CONTAINER_DIR/ssh_keys.py" "$SSH_HOME"
}

# Host keys (ed25519, ecdsa): made at first start, never in the image; kept in
# SSH_HOST_KEY_DIR so a re-created container with the same volume keeps its identity.
setup_host_keys() {
    local dir="${SSH_HOST_KEY_DIR:-$DEFAULT_HOST_KEY_DIR}" type
    if ! { mkdir -p "$dir" && chmod 00700 "$dir" && [[ -w "$dir" ]]; } 2>/dev/null; then
        if [[ -n "${SSH_HOST_KEY_DIR:-}" ]]; then
            log "SSH: SSH_HOST_KEY_DIR=$dir is not a folder UID $(id -u) can write; SSH stays off."
            return 1
        fi
        dir="$RUN_DIR/ssh-host-keys"
        mkdir -p -m 700 "$dir"
        log "SSH: $DEFAULT_HOST_KEY_DIR is not writable; host keys go to $dir and change when the container is re-created."
    fi
    [[ -e "$dir/.gitignore" ]] || printf '# SSH host keys of proven-torch containers: private, never commit them.\n*\n' >"$dir/.gitignore" 2>/dev/null || true
    for type in ed25519 ecdsa; do
        if [[ ! -f "$dir/ssh_host_${type}_key" ]]; then
            ssh-keygen -q -t "$type" -N '' -C "proven-torch host key" -f "$dir/ssh_host_${type}_key" \
                || { log "SSH: could not make a $type host key in $dir; SSH stays off."; return 1; }
        fi
    done
    HOST_KEY_DIR="$dir"
}

# The container's environment, for SSH sessions: sshd reads ~/.ssh/environment
# (PermitUserEnvironment) for every session, login shells re-read it through
# /etc/profile.d/proven-torch.sh after /etc/profile has reset PATH.
write_ssh_environment() {
    local file="$SSH_HOME/.ssh/environment" kv name
    {
        printf '# The container environment at start, for SSH sessions (written by start.sh).\n'
        while IFS= read -r -d '' kv; do
            name="${kv%%=*}"
            [[ "$SSH_ENV_SKIP" == *" $name "* || "$kv" == *$'\n'* ]] && continue
            printf '%s\n' "$kv"
        done < <(env -0)
        # `ssh HOST CMD` starts CMD in /workspace (container/ssh-workdir.sh), as a login does (profile.sh)
        printf 'PROVEN_TORCH_SSH_WORKDIR=/workspace\n'
    } >"$file.tmp" && chmod 600 "$file.tmp" && mv -f "$file.tmp" "$file"
}

# `ssh -X` is on (the policy file says X11Forwarding yes); SSH_X11_FORWARDING=no (or off, false, 0)
# turns it off: the per-container line comes first, and sshd keeps the first value it reads.
x11_forwarding_line() {
    case "${SSH_X11_FORWARDING:-yes}" in
        [Nn][Oo] | [Oo][Ff][Ff] | [Ff][Aa][Ll][Ss][Ee] | 0) printf 'X11Forwarding no\n' ;;
        *) printf '# X11Forwarding: the policy'"'"'s (SSH_X11_FORWARDING=no turns it off)\n' ;;
    esac
}

SSHD_PID=""
start_sshd() {
    local port="${SSH_PORT:-2222}" config="$RUN_DIR/sshd_config" out fingerprints
    # sshd looks in the home of the passwd entry (which may differ from $HOME).
    SSH_HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
    SSH_HOME="${SSH_HOME:-$HOME}"
    setup_authorized_keys || return 1
    setup_host_keys || return 1
    write_ssh_environment || { log "SSH: cannot write ~/.ssh/environment; SSH stays off."; return 1; }
    # sshd's xauth adds the `ssh -X` session's cookie here; made empty first, so it does not greet
    # the first session on its terminal with "file ~/.Xauthority does not exist".
    [[ -e "$SSH_HOME/.Xauthority" ]] || (umask 077 && : >"$SSH_HOME/.Xauthority") 2>/dev/null || true
    # Per-container paths first (sshd keeps the first value it reads), then the policy.
    cat >"$config" <<EOF
# Written by start.sh at container start. The policy is in $CONTAINER_DIR/sshd_config.
Port $port
HostKey $HOST_KEY_DIR/ssh_host_ed25519_key
HostKey $HOST_KEY_DIR/ssh_host_ecdsa_key
PidFile $RUN_DIR/sshd.pid
AllowUsers $(id -un)
$(x11_forwarding_line)
Include $CONTAINER_DIR/sshd_config
EOF
    if ! out="$(/usr/sbin/sshd -t -f "$config" 2>&1)"; then
        log "SSH: sshd rejects its configuration ($out); SSH stays off."
        return 1
    fi
    # -D: stay in the foreground (start.sh watches it); -e: log to stderr (docker logs).
    /usr/sbin/sshd -D -e -f "$config" 2> >(sed -u -e "$SSHD_LOG_FILTER" >&2) &
    SSHD_PID=$!
    printf 'ssh %s\n' "$port" >>"$RUN_DIR/services"
    fingerprints="$(for f in "$HOST_KEY_DIR"/ssh_host_*_key.pub; do ssh-keygen -l -f "$f" | awk '{print $NF " " $2}'; done | paste -sd ' ' -)"
    log "SSH: sshd on port $port for user '$(id -un)' (key only); host keys in $HOST_KEY_DIR: $fingerprints"
    log "SSH: $(ssh_line "$port" "$(id -un)")"
}

# The line a user copies to log in: the host's port when SSH_HOST_PORT says it (as JUPYTER_HOST_PORT does
# for the Lab's URL), else the command on the host that finds it (a container's hostname is its ID).
ssh_line() {
    local port=$1 user=$2
    if [[ "${SSH_HOST_PORT:-}" =~ ^[1-9][0-9]{0,4}$ ]] && (( SSH_HOST_PORT <= 65535 )); then
        printf 'ssh -p %s %s@127.0.0.1\n' "$SSH_HOST_PORT" "$user"
    else
        # shellcheck disable=SC2016  # the backticks are words for the user, not a command here
        printf 'ssh -p PORT %s@127.0.0.1, PORT being what `docker port %s %s` prints on the host (or start with -e SSH_HOST_PORT=PORT)\n' \
            "$user" "$(hostname)" "$port"
    fi
}

# --- JupyterLab --------------------------------------------------------------------

TOKEN_GENERATED=false
setup_token() {
    if [[ -z "${JUPYTER_TOKEN:-}" && -n "${JUPYTER_TOKEN_FILE:-}" ]]; then
        if [[ -r "$JUPYTER_TOKEN_FILE" && -f "$JUPYTER_TOKEN_FILE" ]]; then
            JUPYTER_TOKEN="$(tr -d '[:space:]' <"$JUPYTER_TOKEN_FILE")"
        else
            log "JUPYTER_TOKEN_FILE=$JUPYTER_TOKEN_FILE cannot be read by UID $(id -u); a token is generated instead."
        fi
    fi
    # An empty or unset token never means "no auth": make one.
    if [[ -z "${JUPYTER_TOKEN:-}" ]]; then
        JUPYTER_TOKEN="$(python -c 'import secrets; print(secrets.token_hex(24))')"
        TOKEN_GENERATED=true
    fi
    export JUPYTER_TOKEN
    unset JUPYTER_TOKEN_FILE
}

# Refuse a configuration that switches token auth off, before any socket opens:
# Jupyter resolves its config files and the flags (--show-config-json starts no
# server) and container/jupyter_token.py holds the rule.
refuse_disabled_token() {
    local config problem
    # Flags Jupyter cannot parse: the real start below reports them itself.
    config="$(jupyter-lab --show-config-json "$@" 2>/dev/null)" || return 0
    if ! problem="$(python3 "$CONTAINER_DIR/jupyter_token.py" <<<"$config")"; then
        log "refusing to start JupyterLab without a token ($problem); set JUPYTER_TOKEN or JUPYTER_PASSWORD_HASH instead."
        exit 2
    fi
}

# The example notebooks (/opt/proven-torch/notebooks) in the Lab's file browser: copied into
# WORKSPACE/examples when the workspace is empty (a new volume), never written into one that
# holds anything, where the log line says how to copy them.
EXAMPLES_SRC=/opt/proven-torch/notebooks
offer_examples() {
    local workspace="${1:-/workspace}"
    [[ -d "$EXAMPLES_SRC" && -d "$workspace" && -w "$workspace" ]] || return 0
    if [[ -n "$(ls -A "$workspace" 2>/dev/null)" ]]; then
        log "examples: $workspace is not empty, so nothing was copied into it; to get them: cp -r $EXAMPLES_SRC $workspace/examples"
        return 0
    fi
    if cp -r "$EXAMPLES_SRC" "$workspace/examples"; then
        log "examples: the example notebooks are in $workspace/examples (copied into the empty workspace)"
    else
        log "examples: could not copy $EXAMPLES_SRC into $workspace; they stay in $EXAMPLES_SRC"
    fi
}

JUPYTER_PID=""
start_jupyter() {
    setup_token
    refuse_disabled_token "$@"
    # Defaults (0.0.0.0:8888, /workspace, no browser) are in /etc/jupyter/jupyter_server_config.py.
    jupyter-lab "$@" &
    JUPYTER_PID=$!
    printf 'jupyter %s\n' "$JUPYTER_PID" >>"$RUN_DIR/services"
    local url shown="$JUPYTER_TOKEN"
    [[ "$TOKEN_GENERATED" == true ]] || shown="<your JUPYTER_TOKEN>"
    # Not ready: it died (the supervisor reports it) or is slow (the healthcheck says so).
    # The URL names the port the host published when JUPYTER_HOST_PORT says it.
    if url="$(healthcheck --wait-ready 120 --pid "$JUPYTER_PID")"; then
        log "JupyterLab is ready: ${url}lab?token=$shown"
        [[ -n "${JUPYTER_HOST_PORT:-}" ]] ||
            log "(the port inside the container: open the host port you published it on, e.g. -p 127.0.0.1:8888:8888; \`docker exec CONTAINER lab-url\` prints the URL again)"
    fi
}

# --- supervision -------------------------------------------------------------------

stop_services() {
    local pid
    for pid in $JUPYTER_PID $SSHD_PID; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in $JUPYTER_PID $SSHD_PID; do wait "$pid" 2>/dev/null || true; done
}

on_signal() {
    trap '' TERM INT HUP
    log "got SIG$1; stopping JupyterLab${SSHD_PID:+ and sshd}"
    stop_services
    exit 0
}

# Wait until JupyterLab ends; its status is the container's. sshd ending alone
# is logged (the healthcheck turns unhealthy) and JupyterLab keeps serving.
supervise() {
    local done_pid status
    while true; do
        status=0
        wait -n -p done_pid "$JUPYTER_PID" ${SSHD_PID:+"$SSHD_PID"} || status=$?
        if [[ "$done_pid" == "$JUPYTER_PID" ]]; then
            log "JupyterLab exited with status $status; stopping the container"
            JUPYTER_PID=""
            stop_services
            exit "$status"
        elif [[ -n "$SSHD_PID" && "$done_pid" == "$SSHD_PID" ]]; then
            log "sshd exited with status $status: SSH is down, the healthcheck reports unhealthy; JupyterLab keeps running"
            SSHD_PID=""
        fi
    done
}

main() {
    local mode=command
    case "${1-}" in
        "" | jupyter-lab) mode=jupyter; shift || true ;;
        jupyter) if [[ "${2-}" == lab ]]; then mode=jupyter; shift 2; fi ;;
        -*) mode=jupyter ;;
        sshd) mode=sshd; shift ;;
    esac

    if [[ "$mode" == command ]]; then
        setup_identity 2>/dev/null || true
        exec "$@"
    fi

    make_run_dir || { log "cannot create $RUN_DIR as UID $(id -u) (does it belong to another UID?)"; exit 2; }
    setup_home
    setup_passwd_entry
    setup_runtime_dir
    rm -f "$RUN_DIR/services" "$RUN_DIR/sshd.pid" "${JUPYTER_RUNTIME_DIR:-$RUN_DIR/jupyter}"/jpserver-*
    : >"$RUN_DIR/services"
    trap 'on_signal TERM' TERM
    trap 'on_signal INT' INT
    trap 'on_signal HUP' HUP
    startup_report

    if [[ "$mode" == sshd ]]; then
        start_sshd || { log "nothing to serve: the sshd command needs a public key"; exit 2; }
        local status=0
        wait "$SSHD_PID" || status=$?
        log "sshd exited with status $status"
        exit "$status"
    fi
    offer_examples /workspace # before sshd writes its host keys there
    start_sshd || true
    start_jupyter "$@"
    supervise
}

# Sourcing the file (the unit tests do) defines the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
