#!/usr/bin/env bash
# SC2174: `mkdir -p -m 700 DIR` sets the mode of DIR only, which is what is meant (as in start.sh).
# shellcheck disable=SC2174
# The desktop behind the Lab's Desktop tile (docs/using-the-image.md, "Watch your agent").
# jupyter-server-proxy runs it on the first visit of the tile, with the socket it proxies to
# (/etc/jupyter/jupyter_server_config.py: the server "desktop-websockify"), and stops it with
# the Lab:
#
#   start-desktop.sh DISPLAY SOCKET XAUTHORITY
#
# TigerVNC's X server on DISPLAY (:1), its VNC side on SOCKET only (a Unix socket of
# jupyter-server-proxy's private folder, mode 0600; no TCP port), the X display behind a
# cookie in the file XAUTHORITY (the Lab's kernels and terminals are given both names), no
# abstract socket (it would reach the host with --network host), then blackbox as the window
# manager. What they print goes to desktop.log beside XAUTHORITY; one line goes to the
# container's log.
set -euo pipefail

readonly USAGE="usage: start-desktop.sh DISPLAY SOCKET XAUTHORITY"
readonly DISPLAY_NAME="${1:?$USAGE}" SOCKET="${2:?$USAGE}" XAUTH_FILE="${3:?$USAGE}"
readonly HERE=/opt/proven-torch/container/desktop
readonly DESKTOP_DIR="${XAUTH_FILE%/*}"
readonly LOG="$DESKTOP_DIR/desktop.log"

log() { printf 'desktop: %s\n' "$*" >&2; }

mkdir -p -m 700 "$DESKTOP_DIR"
: >"$LOG"
# X's socket folder; made here so the server, which runs as the user, need not try (and
# log an ERROR line saying it will not, as non-root).
mkdir -m 1777 /tmp/.X11-unix 2>/dev/null || true

export XAUTHORITY="$XAUTH_FILE"
rm -f "$XAUTHORITY"
xauth -q -f "$XAUTHORITY" add "$DISPLAY_NAME" . "$(mcookie)" 2>>"$LOG"

started=$SECONDS
Xtigervnc "$DISPLAY_NAME" -rfbunixpath "$SOCKET" -rfbunixmode 0600 -rfbport -1 -SecurityTypes None \
    -auth "$XAUTHORITY" -nolisten tcp -nolisten local -geometry 1280x800 -depth 24 \
    -desktop "proven-torch ${PROVEN_TORCH_VARIANT:-}" -AlwaysShared >>"$LOG" 2>&1 &
xserver=$!
wm=""
stop() {
    trap '' TERM INT HUP
    kill -TERM ${wm:+"$wm"} "$xserver" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap 'stop; exit 0' TERM INT HUP

# Up when its X socket answers (bounded: 30 s, jupyter-server-proxy's own timeout).
export DISPLAY="$DISPLAY_NAME"
for _ in $(seq 300); do
    xdpyinfo >/dev/null 2>&1 && break
    kill -0 "$xserver" 2>/dev/null || { log "the X server exited at start; its log: $LOG"; tail -n 5 "$LOG" >&2; exit 1; }
    sleep 0.1
done
xdpyinfo >/dev/null 2>&1 || { log "no answer on $DISPLAY_NAME in 30 s; its log: $LOG"; stop; exit 1; }

# blackbox keeps its settings in a file it may write back: a copy of the image's, per start.
cp "$HERE/blackboxrc" "$DESKTOP_DIR/blackboxrc"
# in /workspace, as every other way in: the desktop's terminals (its menu's xterm) start there
(cd /workspace 2>/dev/null || cd "${HOME:-/}"; exec blackbox -rc "$DESKTOP_DIR/blackboxrc") >>"$LOG" 2>&1 &
wm=$!
log "started on DISPLAY=$DISPLAY_NAME in $((SECONDS - started)) s (TigerVNC's Xtigervnc, blackbox); log: $LOG"

status=0
wait "$xserver" || status=$?
log "the X server exited with status $status"
stop
exit "$status"
