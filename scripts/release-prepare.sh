#!/usr/bin/env bash
# The release's preparation of one pushed digest (.github/workflows/release.yml, job `prepare`; no secret):
# `build.py sign --prepare` binds the proof to the digest (the digest's config in the registry is the
# report's stamped image and the image the proof ran in, ran.json; the report's line; every check listed;
# with --require-gpu every GPU check passed) and writes OUT/statements.json for the signer and cosign's
# predicates of the same statements. PROOF_DIR without proof.json: no GPU proof ran; an arm64 image is
# then prepared with its build's own Arm CPU proof (WARNED), an amd64 one is refused.
#   release-prepare.sh RELEASE_JSON PROOF_DIR OUT ARCH
set -euo pipefail
release=$1 proof_dir=$2 out=$3 arch=$4
ref="$(jq -r '.image + "@" + .digest' "$release")"
report=$(jq -r .report "$release")
if [[ -f "$proof_dir/proof.json" ]]; then
    .venv/bin/python build.py sign "$ref" --report "$report" --proof "$proof_dir/proof.json" --require-gpu --prepare "$out"
elif [[ "$arch" == arm64 ]]; then
    echo "$ref: no GPU proof (no GH200 runner): prepared with its Arm CPU proof, WARNED"
    .venv/bin/python build.py sign "$ref" --report "$report" --prepare "$out"
else
    echo "::error::$ref: no GPU proof in $proof_dir; nothing is prepared" >&2
    exit 1
fi
