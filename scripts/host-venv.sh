#!/usr/bin/env bash
# The host's virtual environment .venv: the tools in requirements-dev.txt plus
# the one package the host shares with the image, gymnasium, at the matrix's pin
# (the unit tests of ppo_bench run the image's backend). Reinstalls only when
# either input changed. Used by scripts/prepare-host.sh and the CI workflows.
set -euo pipefail
cd "$(dirname "$0")/.."

wanted=$(cat requirements-dev.txt; python3 build.py list --pin gymnasium)
if [[ -x .venv/bin/python ]] && [[ "$wanted" == "$(cat .venv/.requirements 2>/dev/null)" ]]; then
    exit 0
fi
echo "==> creating .venv from requirements-dev.txt and the matrix's gymnasium pin"
python3 -m venv .venv
.venv/bin/pip install -q -r requirements-dev.txt "$(python3 build.py list --pin gymnasium)"
printf '%s\n' "$wanted" > .venv/.requirements
