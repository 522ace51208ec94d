"""Records shaped like the pipeline's, for tests that need one without a build."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from common.rules import CHECK_NEEDS_GPU
from pipeline.variants import load_matrix, resolve

LINE = resolve(load_matrix(), load_matrix().default_cuda).name  # the default line, read from the matrix


def validation(gpu: bool = False, ok: bool = True, emulated: bool = False, line: str = LINE) -> dict:
    """A validation record shaped like Validation.as_dict() of a CPU-only or a GPU proof."""
    gpu_status = "pass" if gpu else "skip"
    return {
        "ok": ok,
        "gpu": gpu,
        "emulated": emulated,
        "validated_on": "linux/amd64: validated on a GPU" if gpu else "linux/amd64: validated on the CPU only; not run on a GPU",
        "smoke": {
            "checks": [  # every check a proof lists (common.rules.CHECK_NEEDS_GPU), in its order
                {"name": name, "status": ("pass" if ok else "fail") if name == "compile" else gpu_status if needs_gpu else "pass"}
                | {"detail": "no GPU visible" if needs_gpu and not gpu else ""}
                for name, needs_gpu in CHECK_NEEDS_GPU.items()
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
            "variant": line,
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


def build_request(**settings):
    """What `build.py --push` passes the publish path, and the run's facts, for tests that push without a build run."""
    from pipeline.request import Request
    from pipeline.run_facts import RunFacts
    from pipeline.variants import load_matrix, resolve

    matrix = load_matrix()
    facts = RunFacts(command=["pytest"], commit="test", started="2026-01-01T00:00:00Z", invocation="test-run", tools={})
    return Request(matrix=matrix, variant=resolve(matrix, None), push=True, **settings), facts


def proof_record(gpu: bool = True, ok: bool = True, line: str = LINE) -> dict:
    """A proof.json as `proof --out` writes it (smoke/proof.py's record), on a GPU host or the CPU."""
    record = validation(gpu=gpu, ok=ok, line=line)
    return {
        "variant": line,
        "ok": ok,
        "gpu": gpu,
        "verdict": "proven" if ok else "FAILED: compile",
        "failures": [] if ok else ["smoke: compile"],
        "smoke": record["smoke"],
        "ppo": record["ppo"],
        "where": record["proof"]["where"],
        "ppo_gate": record["proof"]["ppo_gate"],
    }


VALIDATED_ID = "sha256:" + "f" * 64  # the image a test folder's validation "ran in"; the stamped child is another


def validation_files(
    folder: Path,
    *,
    line: str = LINE,
    platform: str = "linux/amd64",
    record: dict | None = None,
    components: tuple[str, ...] = ("pkg:pypi/tiny@1.0",),
) -> dict:
    """validation.json and the SBOM it names (by hash), as stamping leaves them; the validation record. Written
    first, so a test image can carry their hash as the stamp label (stamp_label) before its report is written."""
    folder.mkdir(parents=True, exist_ok=True)
    sbom = json.dumps(
        {
            "bomFormat": "CycloneDX",
            "specVersion": "1.6",
            "components": [{"name": purl.split("/")[-1].split("@")[0], "purl": purl} for purl in components],
        }
    ).encode()
    (folder / "sbom.cdx.json").write_bytes(sbom)
    record = {
        **(record or validation(line=line)),
        "platform": platform,
        "sbom": {"file": "sbom.cdx.json", "sha256": hashlib.sha256(sbom).hexdigest()},
        "ran_in": VALIDATED_ID,
    }
    (folder / "validation.json").write_text(json.dumps(record))
    return record


def stamp_label(folder: Path, version: str) -> dict[str, str]:
    """The labels `build.py sign` reads from a validated image's config (pipeline/stamp.py stamps them): its
    validation.json's hash and its immutable tag, `version` (the tag without an architecture)."""
    from pipeline.labels import VALIDATION_SHA256, VERSION

    return {VALIDATION_SHA256: hashlib.sha256((folder / "validation.json").read_bytes()).hexdigest(), VERSION: version}


def run_folder(
    folder: Path,
    *,
    ref: str,
    digest: str,
    image_id: str,
    line: str = LINE,
    tags: tuple[str, ...] = (LINE,),
    platform: str = "linux/amd64",
    record: dict | None = None,
    components: tuple[str, ...] = ("pkg:pypi/tiny@1.0",),
) -> Path:
    """A build's report folder as `build.py --push` leaves it (report.json, validation.json, facts.json and
    the SBOM): what publish.image_statements and `build.py sign` read. Returns report.json's path."""
    record = validation_files(folder, line=line, platform=platform, record=record, components=components)
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
    report = {
        "status": "pushed",
        "variant": line,
        "pushed": {f"{ref}:{tags[0]}": digest},
        "validated_image_id": VALIDATED_ID,
        "stamped_image_id": image_id,
        "validation": record,
    }
    (folder / "report.json").write_text(json.dumps(report))
    return folder / "report.json"


def signable(folder: Path):
    """A report folder's records as the push signs them (records.Signable): its facts.json and validation.json,
    and the SBOM that names by hash."""
    from pipeline.records import FACTS, VALIDATION, Facts, Signable, load

    return Signable.of_run(folder, Facts.load(folder / FACTS), load(folder / VALIDATION, "validation record"))


def proof_folder(folder: Path, image_id: str, **proof) -> Path:
    """A later proof as scripts/prove.sh leaves it: proof.json (proof_record's keywords) and ran.json naming
    the image it ran in. Returns proof.json's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "proof.json").write_text(json.dumps(proof_record(**proof)))
    (folder / "ran.json").write_text(json.dumps({"image_id": image_id, "ref": "test"}))
    return folder / "proof.json"
