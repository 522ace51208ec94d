#!/usr/bin/env bash
# The host's virtual environment .venv: the tools in requirements-dev.txt plus
# the packages the host shares with the image, at the matrix's pins: gymnasium
# (the unit tests of ppo_bench run the image's backend) and the rlhf flavor's
# stack (the unit tests of rlhf_bench run the flavor's TRL). Reinstalls only
# when an input changed. Used by scripts/prepare-host.sh and the CI workflows.
set -euo pipefail
cd "$(dirname "$0")/.."

shared=(--pin gymnasium --pin rlhf)  # a flavor's name stands for all its packages
wanted=$(cat requirements-dev.txt; python3 build.py list "${shared[@]}")
if [[ -x .venv/bin/python ]] && [[ "$wanted" == "$(cat .venv/.requirements 2>/dev/null)" ]]; then
    exit 0
fi
echo "==> creating .venv from requirements-dev.txt and the matrix's shared pins"
python3 -m venv .venv
mapfile -t pins < <(python3 build.py list "${shared[@]}")
.venv/bin/pip install -q -r requirements-dev.txt "${pins[@]}"
printf '%s\n' "$wanted" > .venv/.requirements
