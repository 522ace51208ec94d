#!/usr/bin/env bash
# The host's virtual environment .venv: the tools in requirements-dev.txt plus
# the packages the host shares with the image, at the image's versions: gymnasium, ale-py,
# matplotlib, tensorboard, tqdm, pygame-ce, opencv-python-headless and imageio at the matrix's pins and
# numpy and mujoco at the default line's lock (the unit tests of ppo_bench and of the display hook
# run what the image runs), and the rlhf
# flavor's stack (the unit tests of rlhf_bench run the flavor's TRL). Reinstalls
# only when an input changed. Used by scripts/prepare-host.sh and the CI workflows.
# Then the signer's venv .venv-signer (scripts/signer-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

shared=(--pin gymnasium --pin ale-py --pin matplotlib --pin tensorboard --pin tqdm --pin rlhf  # a flavor's name: all its packages
        --pin pygame-ce --pin opencv-python-headless --pin imageio)  # tests/unit/test_display_windows.py: windows, MuJoCo envs
# numpy and mujoco are no pins of the matrix: the default line's lock (the image's own) says which
default_lock=images/locks/$(python3 build.py list --default)/amd64
locked=()
for name in numpy mujoco; do
    pin=$(grep -h -o "^$name==[^ ]*" "$default_lock"/*.txt)
    [[ -n $pin ]] || { echo "host-venv: no $name pin in $default_lock" >&2; exit 1; }
    locked+=("$pin")
done
wanted=$(cat requirements-dev.txt; python3 build.py list "${shared[@]}"; printf '%s\n' "${locked[@]}")
if [[ ! -x .venv/bin/python ]] || [[ "$wanted" != "$(cat .venv/.requirements 2>/dev/null)" ]]; then
    echo "==> creating .venv from requirements-dev.txt and the matrix's shared pins"
    python3 -m venv .venv
    mapfile -t pins < <(python3 build.py list "${shared[@]}")
    .venv/bin/pip install -q -r requirements-dev.txt "${pins[@]}" "${locked[@]}"
    printf '%s\n' "$wanted" > .venv/.requirements
fi

bash scripts/signer-venv.sh
