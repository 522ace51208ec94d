"""Smoke checks for a proven-torch image.

    python -m smoke --expect '<json>' [--require-gpu] [--json-out PATH] [--only a,b]
    python -m smoke.startup          # a few informational lines at container start

The expectations come from images/variants.toml (build.py passes them); a null
pin means "must be absent". Checks: versions, driver, gpu, cudnn, amp, amp_cpu,
shm, distributed, compile (see smoke/checks.py). Standard library + torch only,
no network.
"""
