"""Records shaped like the pipeline's, for tests that need one without a build."""

from __future__ import annotations

import json
from pathlib import Path


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


def publish_options(**settings):
    """What `build.py --push` passes the publish path, for tests that push without a build run."""
    from pipeline.publish import PublishOptions, RunFacts

    facts = RunFacts(command=["pytest"], commit="test", started="2026-01-01T00:00:00Z", invocation="test-run", tools={})
    return PublishOptions(facts=facts, base_images={}, **settings)


def proof_record(gpu: bool = True, ok: bool = True) -> dict:
    """A proof.json as `proof --out` writes it (smoke/proof.py's record), on a GPU host or the CPU."""
    record = validation(gpu=gpu, ok=ok)
    return {
        "ok": ok,
        "gpu": gpu,
        "verdict": "proven" if ok else "FAILED: compile",
        "failures": [] if ok else ["smoke: compile"],
        "smoke": record["smoke"],
        "ppo": record["ppo"],
        "where": record["proof"]["where"],
        "ppo_gate": record["proof"]["ppo_gate"],
    }


def run_folder(
    folder: Path,
    *,
    ref: str,
    digest: str,
    image_id: str,
    line: str = "2.9-cu128",
    tags: tuple[str, ...] = ("2.9-cu128",),
    platform: str = "linux/amd64",
    record: dict | None = None,
) -> Path:
    """A build's report folder as `build.py --push` leaves it (report.json, validation.json, facts.json and
    the SBOM): what publish.image_statements and `build.py sign` read. Returns report.json's path."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {**(record or validation()), "platform": platform, "sbom": {"file": "sbom.cdx.json"}}
    (folder / "validation.json").write_text(json.dumps(record))
    (folder / "sbom.cdx.json").write_text(
        json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [{"name": "tiny"}]})
    )
    facts = {
        "command": ["python", "build.py", "--push"],
        "commit": "0" * 40,
        "started": "2026-12-06T00:00:00Z",
        "finished": "2026-12-06T00:05:00Z",
        "invocation": "test-build",
        "tools": {"python": "3.11"},
        "dependencies": [{"uri": "file:images/locks/test.txt", "digest": {"sha256": "e" * 64}}],
        "line": line,
        "flavor": None,
        "platform": platform,
        "ref": ref,
        "tags": list(tags),
        "stamped_image_id": image_id,
    }
    (folder / "facts.json").write_text(json.dumps(facts))
    report = {"status": "pushed", "variant": line, "pushed": {f"{ref}:{tags[0]}": digest}, "validation": record}
    (folder / "report.json").write_text(json.dumps(report))
    return folder / "report.json"
