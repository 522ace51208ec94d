#!/usr/bin/env bash
# The release's signing of one proven digest (.github/workflows/release.yml, job `sign`), in a protected
# environment, after its proof:
#   1. build.py sign: the six statements with the project key (secret SIGN_KEY_PEM, written outside the
#      checkout, mode 600, removed on exit; its passphrase in PROVEN_TORCH_SIGN_KEY_PASSPHRASE), read only
#      by the signer's hash-locked venv; refused unless PROOF passed (and with --require-gpu, on a GPU);
#   2. cosign, keyless: the same predicates (scripts/predicates-from-report.py), unless an earlier attempt
#      attested this digest already (the bundle format cannot replace: attesting again would pile up);
#   3. the held tags, moved to the digest by digest (buildx imagetools, --prefer-index=false), re-read.
# PROOF "-": no later proof; the build's own validation is what is signed (an Arm CPU proof: WARNED).
#   release-sign.sh RELEASE_JSON PROOF_JSON|- [--require-gpu]
set -euo pipefail
release=$1 proof=$2
shift 2
require=("$@")
image=$(jq -r .image "$release")
digest=$(jq -r .digest "$release")
report=$(jq -r .report "$release")
ref="$image@$digest"
with_proof=()
if [[ "$proof" != "-" ]]; then with_proof=(--proof "$proof"); fi

if [[ -n "${SIGN_KEY_PEM:-}" ]]; then
    key="${RUNNER_TEMP:-/tmp}/proven-torch.key"
    trap 'rm -f "$key"' EXIT
    (umask 077 && printf '%s\n' "$SIGN_KEY_PEM" > "$key")
    .venv/bin/python build.py sign "$ref" --report "$report" "${with_proof[@]}" "${require[@]}" \
        --run-id "${RUN_ID:-release}" --sign-key "$key"
else
    echo "no PROVEN_TORCH_SIGN_KEY_PEM secret in the release environment: only cosign signs"
fi

.venv/bin/python scripts/predicates-from-report.py image "$report" predicates --digest "$digest" "${with_proof[@]}"
identity="^https://github\.com/${GITHUB_REPOSITORY:-proven-torch/proven-torch}/\.github/workflows/release\.yml@refs/tags/v.+$"
if cosign verify-attestation "$ref" --type https://in-toto.io/attestation/test-result/v0.1 \
        --certificate-identity-regexp "$identity" \
        --certificate-oidc-issuer https://token.actions.githubusercontent.com >/dev/null 2>&1; then
    echo "$ref: cosign attested it already (an earlier attempt); not again"
else
    cosign sign --yes "$ref"
    while IFS=$'\t' read -r type file; do
        cosign attest --yes --type "$type" --predicate "predicates/$file" "$ref"
    done < predicates/predicates.tsv
fi
echo "$ref: signed" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"

for tag in $(jq -r '.held_tags | join(" ")' "$release"); do
    docker buildx imagetools create --prefer-index=false --tag "$image:$tag" "$ref"
    moved=$(docker buildx imagetools inspect "$image:$tag" --format '{{json .Manifest.Digest}}')
    if [[ "$moved" != "\"$digest\"" ]]; then
        echo "::error::$image:$tag resolves to $moved, not $digest" >&2
        exit 1
    fi
    echo "$image:$tag -> $digest" | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
done
