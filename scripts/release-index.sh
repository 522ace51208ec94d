#!/usr/bin/env bash
# A multi-arch line's plain tags (.github/workflows/release.yml, job `publish-multi-arch`): one index over
# the signed amd64 and arm64 digests, under the immutable tag first; read back (exactly those two
# digests); its children's combined test result written into index/ (from the predicates their prepare
# jobs wrote: amd64-predicates/, arm64-predicates/) for the keyless job attest-index; then the moving tags.
#   release-index.sh AMD64_RELEASE_JSON ARM64_RELEASE_JSON
set -euo pipefail
amd64_release=$1 arm64_release=$2
image=$(jq -r .image "$amd64_release")
[[ "$(jq -r .image "$arm64_release")" == "$image" ]] || { echo "::error::the two sides name different images" >&2; exit 1; }
amd64=$(jq -r .digest "$amd64_release")
arm64=$(jq -r .digest "$arm64_release")
# TAG-amd64 -> TAG: both sides must name the same tags (runners that built on different days would give
# the index a date one child lacks)
tags=$(jq -r '[.tag] + .held_tags | map(sub("-amd64$"; "")) | join(" ")' "$amd64_release")
arm64_tags=$(jq -r '[.tag] + .held_tags | map(sub("-arm64$"; "")) | join(" ")' "$arm64_release")
if [[ "$tags" != "$arm64_tags" ]]; then
    echo "::error::amd64 tags ($tags) and arm64 tags ($arm64_tags) differ; rebuild both from one commit on one day" >&2
    exit 1
fi
publish() {
    docker buildx imagetools create --tag "$image:$1" "$image@$amd64" "$image@$arm64"
    listed=$(docker buildx imagetools inspect "$image:$1" --raw | jq -c '[.manifests[].digest] | sort')
    want=$(jq -nc --arg a "$amd64" --arg b "$arm64" '[$a, $b] | sort')
    [[ "$listed" == "$want" ]] || { echo "::error::$image:$1 lists $listed, not $want" >&2; exit 1; }
    echo "$image:$1 -> amd64 $amd64 + arm64 $arm64" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
}
read -r immutable moving <<< "$tags"
publish "$immutable"
index=$(docker buildx imagetools inspect "$image:$immutable" --format '{{json .Manifest.Digest}}' | jq -r .)
.venv/bin/python scripts/predicates-from-report.py index index --ref "$image" --digest "$index" \
    amd64-predicates arm64-predicates
for tag in $moving; do
    publish "$tag"
done
