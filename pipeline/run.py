"""The stages in order: resolve → build → validate → report → tag → push."""

from __future__ import annotations

import datetime as dt
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline import build_image, docker_env, push, tags, validate
from pipeline.errors import PipelineError, UsageError, ValidationFailed
from pipeline.report import write_report
from pipeline.validate import Validation
from pipeline.variants import REPO_ROOT, Matrix, Variant


@dataclass(frozen=True)
class BuildConfig:
    """Everything one run needs, parsed once from the command line."""

    matrix: Matrix
    variant: Variant
    push: bool = False
    registry: str | None = None
    repo: str = "proven-torch"
    ca_cert: Path | None = None
    allow_cpu_validation: bool = False
    report_dir: Path = REPO_ROOT / "reports"
    verbose: bool = False


@dataclass(frozen=True)
class RunResult:
    image_id: str
    tags: list[str]
    pushed: dict[str, str]
    report_path: Path
    gpu: bool


def git_revision(root: Path = REPO_ROOT) -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "nogit"
    return f"{rev}-dirty" if dirty else rev


def check_push_allowed(config: BuildConfig, gpus: int) -> None:
    """Refuse before building, not after: a CPU-only validation is pushed only on request."""
    if config.push and gpus == 0 and not config.allow_cpu_validation:
        raise UsageError(
            "--push refused: this host has no GPU, so the image can only be validated on the CPU; "
            "add --allow-cpu-validation to push it anyway (it is labelled io.proven-torch.gpu-validated=false)"
        )
    if config.registry is not None and not config.push:
        raise UsageError("--registry is only used with --push; add --push or drop --registry")


def validate_and_tag(client, image_id, variant, gpus, run_dir, ref, date, revision, common) -> tuple[Validation, list[str]]:
    """Validate the untagged image; tag it only when every check passed and the facts match the pins."""
    report_path = run_dir / "report.json"
    validation = validate.validate_image(client, image_id, variant, gpus, run_dir)
    try:
        validate.require_valid(validation, report_path)
        immutable, moving = tags.compute_tags(variant, validation.smoke, date, revision)
    except ValidationFailed as err:
        write_report(report_path, validation=validation, status="failed", error=str(err), **common)
        raise
    all_tags = [immutable, *moving]
    write_report(report_path, validation=validation, status="validated", tags=all_tags, **common)
    refs = push.tag_image(client, image_id, ref, all_tags)
    print(f"==> validated and tagged: {', '.join(refs)}", flush=True)
    return validation, all_tags


def run(config: BuildConfig) -> RunResult:
    variant = config.variant
    gpus = docker_env.host_gpu_count()
    check_push_allowed(config, gpus)
    if variant.note:
        print(f"==> note: {variant.note}", flush=True)
    print(
        f"==> {variant.name}: torch {variant.torch}, torchvision {variant.torchvision}, torchaudio {variant.torchaudio}, "
        f"CUDA {variant.cuda}, Python {variant.python}; validation on {'%d GPU(s)' % gpus if gpus else 'the CPU (no GPU on this host)'}",
        flush=True,
    )
    client = docker_env.docker_client()
    cli = docker_env.find_build_cli()

    now = dt.datetime.now(dt.timezone.utc)
    created = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    revision = git_revision()
    run_dir = config.report_dir / variant.name / f"{now:%Y%m%dT%H%M%SZ}"
    report_path = run_dir / "report.json"
    ref = tags.image_ref(config.repo, config.registry if config.push else None)

    args = build_image.build_args(revision, created, gpus > 0)
    built = build_image.build_image(cli, config.matrix, variant, run_dir, args, config.ca_cert, config.verbose)

    common = dict(variant=variant, image_id=built.image_id, build_seconds=built.seconds, created=created, revision=revision)
    validation, all_tags = validate_and_tag(client, built.image_id, variant, gpus, run_dir, ref, f"{now:%Y%m%d}", revision, common)
    refs = [f"{ref}:{tag}" for tag in all_tags]

    pushed: dict[str, str] = {}
    if config.push:
        try:
            for tag in all_tags:
                pushed[f"{ref}:{tag}"] = push.push_tag(client, built.image_id, ref, tag)
        except PipelineError as err:
            write_report(report_path, validation=validation, status="validated", tags=all_tags, pushed=pushed, error=str(err), **common)
            raise
        write_report(report_path, validation=validation, status="pushed", tags=all_tags, pushed=pushed, **common)
    print(f"==> report: {report_path}", flush=True)
    return RunResult(image_id=built.image_id, tags=refs, pushed=pushed, report_path=report_path, gpu=validation.gpu)
