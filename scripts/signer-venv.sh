#!/usr/bin/env bash
# The signer's venv .venv-signer: the only environment that reads the signing key (pipeline/attest.py runs
# there as its own process). Its pip is CPython's own (ensurepip); every file it installs is checked
# against requirements-signer.lock's hashes, nothing else is installed. Rebuilt when the lock changes.
# Run by scripts/host-venv.sh, and alone by the release's signing job (nothing else of the checkout runs there).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv-signer/bin/python ]] || ! cmp -s requirements-signer.lock .venv-signer/.lock; then
    echo "==> creating .venv-signer from the hash-locked requirements-signer.lock"
    rm -rf .venv-signer
    python3 -m venv .venv-signer
    .venv-signer/bin/python -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --require-hashes -r requirements-signer.lock
    cp requirements-signer.lock .venv-signer/.lock
fi
