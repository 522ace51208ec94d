#!/usr/bin/env bash
# Write requirements-signer.lock: the packages requirements-signer.txt names, at requirements-dev.txt's
# versions, and all they need, each file by sha256, for any platform and Python 3.11+ (uv's universal
# resolution), with the sha256 of those pins on its first line so a stale lock is caught offline
# (tests/unit/test_signer_venv.py).
set -euo pipefail
cd "$(dirname "$0")/.."
pins=$(mktemp) lock=$(mktemp)
trap 'rm -f "$pins" "$lock"' EXIT
while read -r name; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    grep -E "^${name}==" requirements-dev.txt >>"$pins" || { echo "lock-signer: no $name== pin in requirements-dev.txt" >&2; exit 1; }
done <requirements-signer.txt
SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt} .venv/bin/uv pip compile --quiet \
    --generate-hashes --universal --python-version 3.11 --no-header --no-annotate --output-file "$lock" "$pins"
{
    echo "# inputs sha256: $(sha256sum "$pins" | cut -d' ' -f1) (requirements-signer.txt's names at requirements-dev.txt's pins); written by scripts/lock-signer.sh, do not edit"
    cat "$lock"
} > requirements-signer.lock
echo "==> wrote requirements-signer.lock ($(grep -c '^[a-z]' requirements-signer.lock) packages)"
