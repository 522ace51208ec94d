#!/usr/bin/env bash
# Benchmark: cold build time and size of the default image, then the rebuild and
# re-push after a one-line change in smoke/. Writes docs/evidence/build-benchmark.json.
#
#   bash scripts/bench-build.sh            (needs scripts/prepare-host.sh --test-tools first)
#
# "Cold" means BuildKit's cache and the variant's images are dropped first; the
# base image and the pip download cache mount are dropped too.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
REGISTRY=${REGISTRY:-localhost:5000}
CA=${BUILD_CA_CERT:-/etc/ssl/certs/ca-certificates.crt}
OUT=docs/evidence/build-benchmark.json
DOCKER=/usr/bin/docker
# The default line is the first torch line of its CUDA line: its Dockerfile's TORCH default.
DOCKERFILE=$($PY -c 'from pipeline.render import dockerfile_path; from pipeline.variants import load_matrix, resolve; print(dockerfile_path(resolve(load_matrix(), None)).name)')
export DOCKER_BUILDKIT=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

secret=(); [[ -f "$CA" ]] && secret=(--secret "id=pip_ca,src=$CA")
now() { date +%s.%N; }
step() { echo "bench-build: $*" >&2; }

$DOCKER builder prune -af >/dev/null
t0=$(now)
$DOCKER build -q "${secret[@]}" -f "$DOCKERFILE" --iidfile "$work/iid1" . >/dev/null
t1=$(now)
step "cold build: $(awk "BEGIN{print $t1 - $t0}") s"
iid1=$(cat "$work/iid1")
size=$($DOCKER image inspect "$iid1" --format '{{.Size}}')

$DOCKER tag "$iid1" "$REGISTRY/proven-torch-bench:cold"
t2=$(now)
$DOCKER push "$REGISTRY/proven-torch-bench:cold" >/dev/null
t3=$(now)
step "cold push: $(awk "BEGIN{print $t3 - $t2}") s"
compressed=$(curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY/v2/proven-torch-bench/manifests/cold" | $PY -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')

# One-line change in smoke/, in a copy of the context so the checkout stays clean.
mkdir -p "$work/ctx/images"
cp -r container common smoke ppo_bench rlhf_bench notebooks .dockerignore "$work/ctx/"
cp -r images/locks images/expect "$work/ctx/images/"
echo "# bench $(date +%s)" >>"$work/ctx/smoke/__init__.py"
t4=$(now)
$DOCKER build -q "${secret[@]}" -f "$DOCKERFILE" --iidfile "$work/iid2" "$work/ctx" >/dev/null
t5=$(now)
iid2=$(cat "$work/iid2")
$DOCKER tag "$iid2" "$REGISTRY/proven-torch-bench:changed"
t6=$(now)
$DOCKER push "$REGISTRY/proven-torch-bench:changed" >/dev/null
t7=$(now)
pushed_bytes=$(comm -13 \
    <(curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REGISTRY/v2/proven-torch-bench/manifests/cold" | $PY -c 'import json,sys; [print(l["digest"], l["size"]) for l in json.load(sys.stdin)["layers"]]' | sort) \
    <(curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REGISTRY/v2/proven-torch-bench/manifests/changed" | $PY -c 'import json,sys; [print(l["digest"], l["size"]) for l in json.load(sys.stdin)["layers"]]' | sort) \
    | awk '{s+=$2} END {print s+0}')

$PY - "$OUT" <<PYEOF
import json, platform, subprocess, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
result = {
    "machine": {"cpu": cpu, "cores": __import__("os").cpu_count(), "system": platform.platform()},
    "cold_build_seconds": round($t1 - $t0, 1),
    "image_bytes_uncompressed": $size,
    "image_bytes_compressed": $compressed,
    "cold_push_seconds": round($t3 - $t2, 1),
    "rebuild_after_smoke_change_seconds": round($t5 - $t4, 1),
    "repush_after_smoke_change_seconds": round($t7 - $t6, 1),
    "repush_bytes_after_smoke_change": $pushed_bytes,
}
open(sys.argv[1], "w").write(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
PYEOF
$DOCKER rmi "$REGISTRY/proven-torch-bench:cold" "$REGISTRY/proven-torch-bench:changed" >/dev/null
