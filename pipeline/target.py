"""Where one validated image goes, and what tagging it made: the records the stages after validation
pass along (stamp.py makes a Tagged, publish.py pushes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.index_push import arch_tag
from pipeline.report import write_report
from pipeline.validation.gate import Validation
from pipeline.variants import AMD64, Variant


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
        return self.run_dir / "report.json"

    def write_report(self, validated_id: str, validation: Validation, **fields) -> Path:
        """(Re)write this build's report; `fields` are write_report's per-stage ones."""
        return write_report(
            self.report_path,
            variant=self.variant,
            image_id=validated_id,
            build_seconds=self.build_seconds,
            created=self.created,
            revision=self.revision,
            validation=validation,
            **fields,
        )


@dataclass(frozen=True)
class Tagged:
    validated_id: str  # the image the checks ran in
    stamped_id: str  # the same layers with what validation found stamped on: what is tagged and pushed
    tags: list[str]  # the image's own tags (a multi-arch line's end in its architecture)
    validation: Validation
    line_tags: list[str] = field(default_factory=list)  # the tags without the suffix: a multi-arch line's index
