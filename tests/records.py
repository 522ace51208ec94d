"""Records shaped like the pipeline's, for tests that need one without a build."""

from __future__ import annotations


def validation(gpu: bool = False, ok: bool = True, emulated: bool = False) -> dict:
    """A validation record shaped like Validation.as_dict() of a CPU-only or a GPU proof."""
    gpu_status = "pass" if gpu else "skip"
    return {
        "ok": ok,
        "gpu": gpu,
        "emulated": emulated,
        "validated_on": "linux/amd64: validated on a GPU" if gpu else "linux/amd64: validated on the CPU only; not run on a GPU",
        "smoke": {
            "checks": [
                {"name": "versions", "status": "pass", "detail": "torch 2.9.0"},
                {"name": "driver", "status": gpu_status, "detail": "no driver"},
                {"name": "gpu", "status": gpu_status, "detail": "no GPU visible"},
                {"name": "compile", "status": "pass" if ok else "fail", "detail": ""},
            ],
            "facts": {"cuda": "12.8"},
        },
        "ppo": {
            "device": "cuda:0" if gpu else "cpu",
            "steps_to_target": 45056,
            "seconds_to_target": 61.2,
            "sps_end_to_end": 736.0,
        },
        "proof": {
            "where": {"cpu": "Test CPU", "gpu_names": ["NVIDIA H200"] if gpu else [], "driver": "580.1" if gpu else None},
            "ppo_gate": {"env_id": "CartPole-v1", "target_return": 475.0, "total_timesteps": 2000000},
        },
        "audit": {
            "as_of": "2026-07-23",
            "findings": [],
            "allowed": [
                {
                    "id": "PYSEC-2025-1",
                    "aliases": ["CVE-2025-1"],
                    "package": "torch",
                    "version": "2.9.0",
                    "severity": "HIGH",
                    "fixed": "2.10.0",
                    "reason": "kept on purpose",
                    "expires": "2027-06-01",
                }
            ],
        },
    }
