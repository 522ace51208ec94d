#!/usr/bin/env bash
# import torch with the image's hash-based .pyc files (reproducible builds) beside the same files compiled
# timestamp-based, alternated 7 times in one container: docs/supply-chain.md quotes the result.
#   docker run --rm -u 1000:100 --entrypoint bash -v "$PWD/scripts/bench-pyc-import.sh:/b.sh:ro" IMAGE /b.sh
set -euo pipefail
t() { python -c 'import time; s = time.perf_counter(); import torch; print(f"{time.perf_counter() - s:.3f}")'; }
SP=/opt/venv/lib/python3.11/site-packages
t >/dev/null
cp -a $SP/torch /tmp/torch-hash
python -m compileall -q -f --invalidation-mode timestamp $SP/torch >/dev/null 2>&1 || true
mv $SP/torch /tmp/torch-ts && mv /tmp/torch-hash $SP/torch
t >/dev/null
for _ in 1 2 3 4 5 6 7; do
  a=$(t); mv $SP/torch /tmp/torch-hash && mv /tmp/torch-ts $SP/torch
  b=$(t); mv $SP/torch /tmp/torch-ts && mv /tmp/torch-hash $SP/torch
  echo "checked-hash $a timestamp $b"
done
