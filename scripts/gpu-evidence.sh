#!/usr/bin/env bash
# GPU evidence from a bare GPU machine (no Docker, no network): the project's
# proof and the PPO throughput configuration, run from a checkout on the host's
# own torch, with everything they print kept as evidence.
#
#   bash scripts/gpu-evidence.sh [OUT_DIR]
#
# Writes OUT_DIR (default docs/evidence/<date>-<GPU>/): the proof (smoke.json,
# proof.json, the gate's result.json and learning curve), throughput-*.json,
# atari-*.json, machine.txt, evidence.log and summary.md. Each step has its own timeout; the
# whole run stays under 10 minutes. The expectations are "as installed" (the
# machine's torch is not the image's); NVIDIA's minimum driver for its CUDA line
# still applies. gymnasium, tensorboard and matplotlib are optional.
#
# 3. The Atari mode of ppo_bench (envpool/Breakout-v5: EnvPool's settings, no sticky actions, as CleanRL's
# and LeanRL's figures and the release's CPU figure; Nature CNN) for a fixed time each: eager,
# --compile, --compile --cuda-graphs at CleanRL's settings (8 environments), and the
# graphed configuration with 64 environments; steps/s, GPU utilisation and memory
# (nvidia-smi sampled every 0.5 s) in atari-*.json and atari-*.gpu.csv. ale-py and
# gymnasium come from the machine, else from the wheels in $GPU_EVIDENCE_WHEELS
# (default .wheels/, which `bash scripts/gpu-evidence.sh --wheels` fills from PyPI
# beforehand, for a GPU machine that reaches no index).
#
# PYTHON picks the interpreter (default python3). GPU_EVIDENCE_CPU=1 runs the
# same steps on the CPU with a small throughput configuration, to test this
# script where no GPU is: its output says so and is never GPU evidence.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

WHEELS=${GPU_EVIDENCE_WHEELS:-.wheels}
PURE=(farama-notifications cloudpickle)  # gymnasium's own pure-Python requirements (numpy and typing-extensions come with torch)
if [[ "${1:-}" == --wheels ]]; then  # ale-py for CPython 3.10-3.13 and gymnasium, at the matrix's pins
    for v in 3.10 3.11 3.12 3.13; do
        python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$v" \
            --platform manylinux_2_28_x86_64 --dest "$WHEELS" "$(python3 build.py list --pin ale-py)" || exit 1
    done
    python3 -m pip download --quiet --no-deps --dest "$WHEELS" "$(python3 build.py list --pin gymnasium)" "${PURE[@]}" || exit 1
    ls "$WHEELS"
    exit 0
fi

PY=${PYTHON:-python3}
CPU_ONLY=${GPU_EVIDENCE_CPU:-0}
SPEC="images/expect/$("$PY" build.py list --default).json"
GPU_NAME=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-GPU")' 2>/dev/null || echo unknown)
SLUG=$(printf '%s' "$GPU_NAME" | tr -cs 'A-Za-z0-9' '-' | sed 's/-$//')
OUT=${1:-docs/evidence/$(date -u +%Y-%m-%d)-$SLUG}
mkdir -p "$OUT"
LOG="$OUT/evidence.log"
: >"$LOG"

say() { printf '==> %s\n' "$*" | tee -a "$LOG"; }
# step NAME SECONDS CMD...: run bounded, keep the output, record the exit status.
step() {
    local name=$1 limit=$2 status
    shift 2
    say "$name: $*"
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    status=${PIPESTATUS[0]}
    say "$name: exit $status"
    printf '%s %s\n' "$name" "$status" >>"$OUT/steps.txt"
}
: >"$OUT/steps.txt"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -a)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    [[ "$CPU_ONLY" == 1 ]] && echo "GPU_EVIDENCE_CPU=1: a CPU test run of this script, NOT GPU evidence"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" | tee -a "$LOG"

if [[ "$CPU_ONLY" == 1 ]]; then
    REQUIRE=() DEVICE=cpu ENVS=256 STEPS=16 TOTAL=200000 GRAPHS=() AMP=bf16
else
    REQUIRE=(--require-gpu) DEVICE=cuda ENVS=16384 STEPS=16 TOTAL=26214400 GRAPHS=(--cuda-graphs) AMP=bf16
fi

# 1. The proof: smoke suite (GPU checks required), the PPO gate on the GPU, the same gate on the CPU for the ratio.
step proof 300 "$PY" -m smoke.proof --as-installed --spec "$SPEC" "${REQUIRE[@]}" --out "$OUT/proof"

# 2. Throughput: many environments, CUDA graphs, without and with AMP.
for amp in off "$AMP"; do
    step "throughput-amp-$amp" 150 "$PY" -m ppo_bench --device "$DEVICE" --num-envs "$ENVS" --num-steps "$STEPS" \
        "${GRAPHS[@]}" --amp "$amp" --total-timesteps "$TOTAL" --no-progress --out-dir "$OUT/throughput-amp-$amp"
    [[ -f "$OUT/throughput-amp-$amp/result.json" ]] && cp "$OUT/throughput-amp-$amp/result.json" "$OUT/throughput-amp-$amp.json"
    rm -f "$OUT"/throughput-amp-"$amp"/checkpoint.pt
done
rm -f "$OUT"/proof/ppo*/checkpoint.pt

# 3. Atari: a fixed time per configuration, with the GPU sampled beside it.
if ! "$PY" -c 'import ale_py.vector_env' 2>/dev/null && [[ -d "$WHEELS" ]]; then
    "$PY" -m pip install --quiet --no-deps --no-index --find-links "$WHEELS" --target "$OUT/.site" ale-py gymnasium "${PURE[@]}" 2>&1 | tee -a "$LOG"
    export PYTHONPATH="$PWD/$OUT/.site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ "$CPU_ONLY" == 1 ]]; then
    ATARI=("eager:--num-envs 8") ATARI_SECONDS=15  # --compile against eager: tests/unit/test_ppo_atari.py
else
    ATARI=("eager:--num-envs 8" "compile:--num-envs 8 --compile" "cudagraphs:--num-envs 8 --compile --cuda-graphs"
        "cudagraphs-64envs:--num-envs 64 --compile --cuda-graphs") ATARI_SECONDS=45
fi
if "$PY" -c 'import ale_py.vector_env' 2>/dev/null; then
    for config in "${ATARI[@]}"; do
        name="atari-${config%%:*}"
        read -r -a opts <<<"${config#*:}"
        sampler=
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 >"$OUT/$name.gpu.csv" &
            sampler=$!
        fi
        step "$name" $((ATARI_SECONDS + 150)) "$PY" -m ppo_bench --env-id envpool/Breakout-v5 --device "$DEVICE" "${opts[@]}" \
            --time-limit "$ATARI_SECONDS" --checkpoint-every 0 --no-progress --out-dir "$OUT/$name"
        [[ -n $sampler ]] && kill "$sampler" 2>/dev/null
        [[ -f "$OUT/$name/result.json" ]] && cp "$OUT/$name/result.json" "$OUT/$name.json"
        rm -f "$OUT/$name/checkpoint.pt"
    done
else
    say "atari: NOT RUN: ale-py does not import with $PY (install ale-py, or bring wheels: bash scripts/gpu-evidence.sh --wheels)"
    printf 'atari 127\n' >>"$OUT/steps.txt"
fi
rm -rf "$OUT/.site"

"$PY" scripts/evidence-summary.py "$OUT" | tee "$OUT/summary.md"
say "evidence in $OUT"
