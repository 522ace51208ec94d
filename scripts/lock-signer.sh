#!/usr/bin/env bash
# Write requirements-signer.lock from requirements-signer.txt: every package the signer's venv installs,
# each file by sha256, for any platform and Python 3.11+ (uv's universal resolution), with the inputs'
# own sha256 on its first line so a stale lock is caught offline (tests/unit/test_signer_venv.py).
set -euo pipefail
cd "$(dirname "$0")/.."
inputs=$(sha256sum requirements-signer.txt | cut -d' ' -f1)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt} .venv/bin/uv pip compile --quiet \
    --generate-hashes --universal --python-version 3.11 --no-header --output-file "$tmp" requirements-signer.txt
{
    echo "# inputs sha256: $inputs (requirements-signer.txt); written by scripts/lock-signer.sh, do not edit"
    cat "$tmp"
} > requirements-signer.lock
echo "==> wrote requirements-signer.lock ($(grep -c '^[a-z]' requirements-signer.lock) packages)"
