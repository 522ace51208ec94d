#!/usr/bin/env bash
# placeholder, replaced by issue 5's start script
set -euo pipefail
if [[ $# -gt 0 && "$1" != "jupyter-lab" ]]; then exec "$@"; fi
exec jupyter-lab --ip=0.0.0.0 --port=8888 --no-browser
