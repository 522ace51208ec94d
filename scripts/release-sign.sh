#!/usr/bin/env bash
# The release's signing (.github/workflows/release.yml, job `sign`, environment `release`): the prepared
# statements to the signer process alone, from the signer's hash-locked venv (scripts/signer-venv.sh);
# nothing of the build's venv runs in this job. The key (secret SIGN_KEY_PEM) and its
# passphrase (SIGN_KEY_PASSPHRASE) are written to files readable by this user only, removed on exit, and
# reach only the signer, by path: they are dropped from the environment before any other program starts.
# The signer stamps its own run id and clock; RUN_NAME (the run's URL) is signed as a label.
# Without the key secret nothing is signed here (only cosign signs) and OUT stays empty.
#   release-sign.sh PREPARED_DIR OUT
set -euo pipefail
prepared=$1 out=$2
key_pem=${SIGN_KEY_PEM:-} passphrase=${SIGN_KEY_PASSPHRASE:-}
unset SIGN_KEY_PEM SIGN_KEY_PASSPHRASE
mkdir -p "$out"
if [[ -z "$key_pem" ]]; then
    echo "no PROVEN_TORCH_SIGN_KEY_PEM secret in the release environment: only cosign signs"
    exit 0
fi
secrets=$(mktemp -d "${RUNNER_TEMP:-/tmp}/signer.XXXXXX")
trap 'rm -rf "$secrets"' EXIT
(umask 077 && printf '%s\n' "$key_pem" > "$secrets/key" && printf '%s' "$passphrase" > "$secrets/passphrase")
unset key_pem passphrase
jq -n --arg key "$secrets/key" --arg pass "$secrets/passphrase" --arg name "${RUN_NAME:-}" \
    --slurpfile prepared "$prepared/statements.json" \
    '{op: "sign", key: $key, passphrase_file: $pass, run_name: $name, statements: $prepared[0].statements}' \
    | env -u PROVEN_TORCH_SIGN_KEY_PASSPHRASE .venv-signer/bin/python -s -E -m pipeline.attest > "$out/signed.json"
jq -e '.envelopes | length > 0' "$out/signed.json" >/dev/null
echo "signed $(jq -r '.envelopes | length' "$out/signed.json") statements: run $(jq -r .run "$out/signed.json"), key $(jq -r .keyid "$out/signed.json" | cut -c1-16)…"
