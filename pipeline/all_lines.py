"""`build.py matrix`: build and prove every line this host can build, one after another (docs/benchmarks.md,
"The matrix"); a line's images removed after its proof unless `--keep`, so the disk holds one line at a time;
one summary table, Markdown and JSON."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from pipeline import build_image, docker_env
from pipeline.errors import Interrupted, PipelineError, UsageError, ValidationFailed
from pipeline.html_report import line_reports
from pipeline.line import run
from pipeline.records import Report, write
from pipeline.request import Request
from pipeline.variants import REPO_ROOT, Variant, pypi_alternatives


@dataclass(frozen=True)
class LineResult:
    """One row of the summary: what happened to one line on this host."""

    line: str
    torch: str
    cuda: str
    builds_from: str
    status: str  # "proven (CPU only)", "proven (GPU)", "failed", "not buildable here"
    detail: str = ""
    size_gb: float | None = None
    build_seconds: float | None = None
    proof_seconds: float | None = None
    ppo_gate_seconds: float | None = None
    advisories: str = ""


def _row(variant: Variant, status: str, report: Report | None, detail: str = "") -> LineResult:
    validation = report.validation if report else {}
    size = (validation.get("size") or {}).get("uncompressed_bytes")
    proof = validation.get("proof") or {}
    ppo = validation.get("ppo") or {}
    advisories = (proof.get("advisories") or {}).get("summary", "")
    return LineResult(
        line=variant.name,
        torch=variant.torch,
        cuda=variant.cuda,
        builds_from=variant.builds_from,
        status=status,
        detail=detail,
        size_gb=round(size / 1e9, 2) if size else None,
        build_seconds=report.build_seconds if report else None,
        proof_seconds=proof.get("seconds"),
        ppo_gate_seconds=ppo.get("wall_seconds"),
        advisories=advisories,
    )


def _remove_images(result) -> None:
    client = docker_env.docker_client()
    for ref in [*result.tags, result.stamped_id, result.validated_id]:
        try:
            client.images.remove(ref, force=True)
        except docker_env.sdk_errors():  # already gone (removing a tag may remove the image)
            pass


def stopped_in(line: str, err: BaseException, rows: list[LineResult], kept: list[str]) -> Interrupted:
    """Ctrl-C during a line: stop the whole matrix (exit 130), naming the line and what the run left behind.
    The matrix never pushes; a proven line's images are removed unless --keep."""
    said = str(err) or "interrupted"
    before = "; ".join(f"{r.line}: {r.status}" for r in rows) or "none"
    left = f"; still tagged (--keep): {', '.join(kept)}" if kept else ""
    return Interrupted(f"matrix stopped in {line}: {said}; lines finished before it: {before}; nothing was pushed{left}")


def run_matrix(base: Request, names: list[str] | None, keep: bool) -> list[LineResult]:
    """Build and prove each chosen line in turn; a failed line does not stop the others, Ctrl-C stops all."""
    rows: list[LineResult] = []
    kept: list[str] = []
    matrix = base.matrix
    for variant in [matrix.by_name(name) for name in names] if names else matrix.variants:  # by_name refuses an unknown one
        try:
            rows.append(_run_line(base, variant, keep, kept))
        except (Interrupted, KeyboardInterrupt) as err:
            raise stopped_in(variant.name, err, rows, kept) from None
    return rows


def _run_line(base: Request, variant: Variant, keep: bool, kept: list[str]) -> LineResult:
    """One line of the matrix: its row (a line that failed included); Interrupted propagates."""
    print(f"==> matrix: {variant.name} (torch {variant.torch}, CUDA {variant.cuda}, {variant.builds_from})", flush=True)
    if not variant.uses_pypi and (why := build_image.index_unreachable(variant.index, base.ca_cert)):
        print(f"==> matrix: {variant.name}: not buildable here ({why})", flush=True)
        detail = f"{variant.index} unreachable ({why}); {pypi_alternatives(base.matrix, variant)}"
        return _row(variant, "not buildable here", None, detail)
    try:
        result = run(dataclasses.replace(base, variant=variant))
    except (UsageError, Interrupted):
        raise
    except PipelineError as err:
        runs = line_reports(base.report_dir / variant.name)
        return _row(variant, "failed", Report.load(runs[-1]) if runs else None, str(err))
    report = Report.load(result.report_path)
    if keep:
        kept.extend(result.tags)
    else:
        _remove_images(result)
    return _row(variant, "proven (GPU)" if result.gpu else "proven (CPU only)", report)


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def markdown(rows: list[LineResult], host: str, date: str) -> str:
    head = (
        f"Matrix run on {host}, {date} (`python build.py matrix`).\n\n"
        "| line | torch | CUDA | builds from | result | size (GB) | build (s) | proof (s) | PPO gate (s) | advisories |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.line} | {r.torch} | {r.cuda} | {r.builds_from} | {r.status}{': ' + r.detail if r.detail else ''} "
        f"| {_cell(r.size_gb)} | {_cell(r.build_seconds)} | {_cell(r.proof_seconds)} | {_cell(r.ppo_gate_seconds)} "
        f"| {r.advisories or '-'} |\n"
        for r in rows
    )
    return head + body


def write_summary(rows: list[LineResult], report_dir: Path, host: str) -> tuple[Path, Path]:
    now = dt.datetime.now(dt.UTC)
    out = report_dir / "matrix" / f"{now:%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True, exist_ok=True)
    write(out / "summary.json", {"host": host, "date": now.isoformat(), "lines": [dataclasses.asdict(r) for r in rows]})
    (out / "summary.md").write_text(markdown(rows, host, f"{now:%Y-%m-%d}"))
    return out / "summary.md", out / "summary.json"


def run_and_summarize(base: Request, names: list[str] | None, keep: bool) -> int:
    """`build.py matrix`: every chosen line built and proven in turn (no push), the summary written and
    printed; ValidationFailed (exit 5) naming the lines that failed."""
    from common.host import host_cpu

    rows = run_matrix(base, names, keep)
    md, js = write_summary(rows, base.report_dir, host_cpu())
    print(markdown(rows, host_cpu(), "today"), end="")
    print(f"==> matrix summary: {md.relative_to(REPO_ROOT) if md.is_relative_to(REPO_ROOT) else md} and {js.name}")
    failed = [r.line for r in rows if r.status == "failed"]
    if failed:
        raise ValidationFailed(f"matrix: {', '.join(failed)} failed; see {md}")
    return 0
