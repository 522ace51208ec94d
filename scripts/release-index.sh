#!/usr/bin/env bash
# A multi-arch line's plain tags (.github/workflows/release.yml): one index over the signed amd64 and arm64
# digests, each tag read back (exactly those two digests).
#   release-index.sh AMD64_RELEASE_JSON ARM64_RELEASE_JSON immutable OUT
#       the immutable tag only (job `publish-multi-arch`), and OUT/index.json: the image, the index's
#       digest and the moving tags still to write; the index is then prepared, signed and attested
#   release-index.sh AMD64_RELEASE_JSON ARM64_RELEASE_JSON moving OUT
#       the moving tags (job `index-tags`), once the index is signed
set -euo pipefail
amd64_release=$1 arm64_release=$2 step=$3 out=$4
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
mkdir -p "$out"
if [[ "$step" == immutable ]]; then
    publish "$immutable"
    index=$(docker buildx imagetools inspect "$image:$immutable" --format '{{json .Manifest.Digest}}' | jq -r .)
    jq -n --arg image "$image" --arg digest "$index" --arg moving "$moving" \
        '{image: $image, digest: $digest, moving: ($moving | split(" ") | map(select(. != "")))}' > "$out/index.json"
else
    for tag in $moving; do
        publish "$tag"
    done
fi
