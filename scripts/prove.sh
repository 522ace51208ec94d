#!/usr/bin/env bash
# Prove a pulled image on this host and record, outside its container, which image the proof ran in:
# OUT/proof.json and OUT/smoke.json are the image's own `proof --out` (written inside the container);
# OUT/ran.json is this host's word: the image ID Docker ran (`docker inspect` of the container, which
# the container cannot know of itself), the reference asked for, and the proof's exit status.
# `build.py sign --proof OUT/proof.json` signs only when ran.json's image is the pushed digest's config.
#   prove.sh IMAGE@DIGEST OUT [proof flags, e.g. --require-gpu]    (GPU hosts: PROVE_GPUS=all, the default)
set -euo pipefail
ref=$1 out=$2
shift 2
[[ "$ref" == *@sha256:* ]] || { echo "prove.sh: give IMAGE@sha256:DIGEST, not a tag (a tag may move)" >&2; exit 2; }
mkdir -p "$out"
gpus=()
if [[ "${PROVE_GPUS-all}" != "" ]]; then gpus=(--gpus "${PROVE_GPUS-all}"); fi
# --user: this host's UID in group 0 (Kubernetes' restricted profile) can write the mounted folder
cid=$(docker create "${gpus[@]}" --shm-size=8g --user "$(id -u):0" -v "$(realpath "$out"):/tmp/proof" "$ref" \
    proof --out /tmp/proof "$@")
trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
image=$(docker inspect --format '{{.Image}}' "$cid")
status=0
docker start --attach "$cid" || status=$?
jq -n --arg image "$image" --arg ref "$ref" --argjson status "$status" \
    '{image_id: $image, ref: $ref, exit_status: $status, recorded_by: "scripts/prove.sh (docker inspect of the container)"}' \
    > "$out/ran.json"
echo "prove.sh: the proof ran in $image (exit $status); $out/ran.json"
exit "$status"
