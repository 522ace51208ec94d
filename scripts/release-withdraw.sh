#!/usr/bin/env bash
# The release's answer to a failed proof (.github/workflows/release.yml, job `withdraw`): the digest is
# deleted with every tag naming it (build.py withdraw; registries delete by digest). GHCR refuses the
# registry API's DELETE (405): there the package version whose name is the digest is deleted through
# GitHub's packages API. A proof that passed is left alone: this job only runs when the proof job failed,
# and a failure after a passed proof (an upload, say) is no reason to withdraw the image.
#   release-withdraw.sh RELEASE_JSON PROOF_JSON
set -euo pipefail
release=$1 proof=$2
image=$(jq -r .image "$release")
digest=$(jq -r .digest "$release")
if [[ -f "$proof" ]] && [[ "$(jq -r .ok "$proof")" == "true" ]]; then
    echo "$image@$digest: its proof passed; nothing withdrawn"
    exit 0
fi
status=0
.venv/bin/python build.py withdraw "$image@$digest" || status=$?
if (( status == 6 )) && [[ "$image" == ghcr.io/* ]]; then
    path=${image#ghcr.io/}
    owner=${path%%/*} name=${path#*/}
    kind=$([[ "$(gh api "/users/$owner" --jq .type)" == "Organization" ]] && echo orgs || echo users)
    id=$(gh api --paginate "/$kind/$owner/packages/container/${name//\//%2F}/versions" \
        --jq ".[] | select(.name == \"$digest\") | .id")
    [[ -n "$id" ]] || { echo "::error::no package version $digest of $image" >&2; exit 1; }
    gh api -X DELETE "/$kind/$owner/packages/container/${name//\//%2F}/versions/$id"
    status=0
fi
(( status == 0 )) || exit "$status"
echo "$image@$digest: withdrawn (its proof failed)" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
