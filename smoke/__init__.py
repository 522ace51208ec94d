"""Smoke checks and the proof of a proven-torch image.

    proof [--require-gpu] [--out DIR]  # python -m smoke.proof: the smoke suite, then the PPO gate
    python -m smoke [--expect '<json>'|@FILE | --as-installed] [--require-gpu] [--json-out PATH] [--only a,b]
    python -m smoke.startup          # a few informational lines at container start

The expectations come from the image's own spec, /opt/proven-torch/expect.json,
generated from images/variants.toml at build time; a null pin means "must be
absent". Checks: versions, driver, gpu, cudnn, amp, amp_cpu, shm, distributed,
compile (see smoke/checks.py). Standard library, torch and common/ only, no network.
"""
