#!/usr/bin/env bash
# The release's held tags (.github/workflows/release.yml, job `move-tags`), once the digest is signed: each
# moved to the digest by digest (buildx imagetools, --prefer-index=false) and read back.
#   release-tags.sh RELEASE_JSON
set -euo pipefail
release=$1
image=$(jq -r .image "$release")
digest=$(jq -r .digest "$release")
ref="$image@$digest"
for tag in $(jq -r '.held_tags | join(" ")' "$release"); do
    docker buildx imagetools create --prefer-index=false --tag "$image:$tag" "$ref"
    moved=$(docker buildx imagetools inspect "$image:$tag" --format '{{json .Manifest.Digest}}')
    if [[ "$moved" != "\"$digest\"" ]]; then
        echo "::error::$image:$tag resolves to $moved, not $digest" >&2
        exit 1
    fi
    echo "$image:$tag -> $digest" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
done
