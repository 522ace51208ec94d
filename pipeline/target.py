"""What validation found, where one validated image goes, and what tagging it made: the records the stages
pass along (gate.py fills a Validation, stamp.py makes a Tagged, publish.py pushes it); report.json is
written here, in one place."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.host import this_machine
from pipeline import statements
from pipeline.html_report import write_page
from pipeline.push import arch_tag
from pipeline.records import REPORT, write
from pipeline.variants import AMD64, Variant


@dataclass(frozen=True)
class Validation:
    """What validation found and its verdict (pipeline/validation/gate.py makes it from the stages' Findings);
    frozen: validation.json's hash, stamped as a label, is of this record."""

    ok: bool = False
    gpu: bool = False
    proof: dict = field(default_factory=dict)
    hygiene: tuple[str, ...] = ()
    size: dict = field(default_factory=dict)
    sbom: dict = field(default_factory=dict)
    audit: dict = field(default_factory=dict)
    seconds: float = 0.0
    failures: tuple[str, ...] = ()
    stages: tuple[tuple[str, str], ...] = ()  # (stage, "pass" | "fail" | "not run")
    platform: str = AMD64
    emulated: bool = False  # validated under emulation: nothing ran on the platform's own hardware
    ran_in: str = ""  # the image ID the proof's container ran, as Docker reported it

    @property
    def validated_on(self) -> str:
        """What the validation ran on (statements.validated_on's words)."""
        return statements.validated_on(self.platform, self.gpu, self.emulated)

    @property
    def smoke(self) -> dict:
        return self.proof.get("smoke") or {}

    def gate_figures(self) -> dict:
        """The PPO figures this validation measured, stamped into the image for `proof` to compare with."""
        ppo = self.proof.get("ppo") or {}
        where = self.proof.get("where") or {}
        device = ppo.get("device", "cpu")
        return {
            "device": device,
            "device_name": ppo.get("gpu_name") if device.startswith("cuda") else where.get("cpu"),
            "steps_to_target": ppo.get("steps_to_target"),
            "seconds_to_target": round(ppo["seconds_to_target"], 2) if ppo.get("seconds_to_target") else None,
            "sps": round(ppo["sps_end_to_end"]) if ppo.get("sps_end_to_end") else None,
        }

    def record(self) -> bytes:
        """validation.json's bytes: their hash is stamped as a label, and the push signs what they say."""
        return (json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n").encode()

    def as_dict(self) -> dict:
        """What the report and validation.json record of this validation (immutable once stamped)."""
        return {
            "ok": self.ok,
            "gpu": self.gpu,
            "platform": self.platform,
            "emulated": self.emulated,
            "validated_on": self.validated_on,
            "ran_in": self.ran_in,
            "seconds": round(self.seconds, 1),
            "failures": list(self.failures),
            "stages": [{"name": name, "status": status} for name, status in self.stages],
            **statements.proof_parts(self.proof),
            "hygiene": list(self.hygiene),
            "size": self.size,
            "sbom": self.sbom,
            "audit": self.audit,
        }


@dataclass(frozen=True)
class Target:
    """Where one validated image goes: its report folder, its name, its build identity."""

    variant: Variant
    run_dir: Path
    ref: str  # repository reference the tags go on, e.g. localhost:5000/proven-torch
    date: str  # YYYYMMDD
    created: str  # RFC 3339
    revision: str
    build_seconds: float = 0.0
    ca_cert: Path | None = None
    advisories: Path | None = None
    platform: str = AMD64
    emulated: bool = False  # validated under qemu: its proof ran on the CPU

    def own_tag(self, tag: str) -> str:
        """A multi-arch line's images are tagged per architecture (TAG-arm64); its plain tags name the index."""
        return arch_tag(tag, self.platform) if self.variant.multi_arch else tag

    @property
    def report_path(self) -> Path:
        return self.run_dir / REPORT

    def write_report(
        self,
        validated_id: str,
        validation: Validation | None,
        status: str,
        tags: list[str] | None = None,
        push=None,
        error: str | None = None,
        stamped_id: str | None = None,
    ) -> None:
        """(Re)write this build's report.json, whole (records.write), and its HTML page; status "validated",
        "failed" or "pushed"; `push`: publish.Pushed."""
        report = {
            "schema": 2,
            "status": status,
            "error": error,
            "variant": self.variant.name,
            "pins": {k: v for k, v in asdict(self.variant).items() if k != "packages"},
            "packages": dict(self.variant.packages),
            "validated_image_id": validated_id,
            "stamped_image_id": stamped_id,  # the validated layers with what validation found stamped on: tagged, pushed
            "created": self.created,
            "revision": self.revision,
            "build_seconds": round(self.build_seconds, 1),
            "gpu": validation.gpu if validation else None,
            "validation": validation.as_dict() if validation else None,
            "tags": tags or [],
            "pushed": push.refs if push else {},
            "push": push.as_dict() if push else None,
            "host": this_machine(),
        }
        write(self.report_path, report)
        write_page(self.report_path)


@dataclass(frozen=True)
class Tagged:
    validated_id: str  # the image the checks ran in
    stamped_id: str  # the same layers with what validation found stamped on: what is tagged and pushed
    tags: list[str]  # the image's own tags (a multi-arch line's end in its architecture)
    validation: Validation
    line_tags: list[str] = field(default_factory=list)  # the tags without the suffix: a multi-arch line's index


def image_ref(repo: str, registry: str | None) -> str:
    return f"{registry.rstrip('/')}/{repo}" if registry else repo
