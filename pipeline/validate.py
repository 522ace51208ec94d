"""Validate a built image inside containers: smoke checks, then the PPO gate.

Each step runs the image's own entrypoint (as a user would) through the Docker
SDK, with every GPU of the host when it has any, streams the container's output,
is bounded by a deadline, and is always removed afterwards.
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import advisories as advisory_db
from pipeline import audit, hygiene, labels, sbom, size
from pipeline.errors import Interrupted, ValidationFailed
from pipeline.variants import Variant

SMOKE_TIMEOUT_S = 900
PPO_TIMEOUT_S = 900
OUT = "/tmp/validation"


@dataclass(frozen=True)
class StepResult:
    name: str
    exit_code: int
    seconds: float
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Validation:
    ok: bool
    gpu: bool
    smoke: dict
    ppo: dict
    ppo_cpu: dict | None
    hygiene: tuple[str, ...]
    size: dict
    sbom: dict
    audit: dict
    seconds: float
    failures: tuple[str, ...]

    def as_dict(self) -> dict:
        """What the report and validation.json record of this validation."""
        return {
            "ok": self.ok,
            "gpu": self.gpu,
            "seconds": round(self.seconds, 1),
            "failures": list(self.failures),
            "smoke": self.smoke,
            "ppo": self.ppo,
            "ppo_cpu": self.ppo_cpu,
            "gpu_cpu_sps_ratio": self.gpu_cpu_sps_ratio(),
            "hygiene": list(self.hygiene),
            "size": self.size,
            "sbom": self.sbom,
            "audit": self.audit,
        }

    def gpu_cpu_sps_ratio(self) -> float | None:
        if not self.ppo_cpu:
            return None
        gpu, cpu = self.ppo.get("sps_end_to_end"), self.ppo_cpu.get("sps_end_to_end")
        return round(gpu / cpu, 2) if gpu and cpu else None


def _device_requests(gpus: int):
    if gpus <= 0:
        return None
    import docker.types

    return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def _fetch_dir(container, path: str) -> dict[str, bytes]:
    """Copy a folder out of a (stopped) container: {relative name: bytes}."""
    try:
        stream, _ = container.get_archive(path)
    except Exception:  # the folder was never written
        return {}
    buf = io.BytesIO(b"".join(stream))
    files = {}
    with tarfile.open(fileobj=buf) as tar:
        for member in tar.getmembers():
            if member.isfile():
                name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                files[name] = tar.extractfile(member).read()
    return files


def run_step(client, image_id: str, name: str, command: list[str], gpus: int, timeout_s: int) -> StepResult:
    """Run one command in a fresh container from the image; stream its output."""
    print(f"==> {name}: {' '.join(command)}", flush=True)
    start = time.monotonic()
    container = client.containers.create(
        image_id,
        command=command,
        device_requests=_device_requests(gpus),
        shm_size="2g",
        labels={"io.proven-torch.role": "validation"},
    )
    timed_out = threading.Event()

    def _kill_at_deadline():
        timed_out.set()
        try:
            container.kill()
        except Exception:
            pass

    timer = threading.Timer(timeout_s, _kill_at_deadline)
    try:
        container.start()
        timer.start()
        for chunk in container.logs(stream=True, follow=True):
            for line in chunk.decode(errors="replace").splitlines():
                print(f"  │ {line}", flush=True)
        exit_code = container.wait(timeout=60)["StatusCode"]
        files = _fetch_dir(container, OUT)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted during {name}; nothing was tagged or pushed") from None
    finally:
        timer.cancel()
        try:
            container.remove(force=True, v=True)
        except Exception:
            pass
    seconds = time.monotonic() - start
    if timed_out.is_set():
        exit_code = 124
        print(f"==> {name}: killed after the {timeout_s}s deadline", flush=True)
    print(f"==> {name}: exit {exit_code} in {seconds:.1f}s", flush=True)
    return StepResult(name=name, exit_code=exit_code, seconds=seconds, files=files)


def smoke_command(variant: Variant, gpu: bool) -> list[str]:
    expect = json.dumps(variant.expectations(require_gpu=gpu), separators=(",", ":"))
    cmd = ["python", "-m", "smoke", "--expect", expect, "--json-out", f"{OUT}/smoke.json"]
    return cmd + (["--require-gpu"] if gpu else [])


def ppo_command(variant: Variant, device: str, require_gpu: bool) -> list[str]:
    gate = variant.ppo_gate
    cmd = [
        "python", "-m", "ppo_bench",
        "--backend", gate.backend,
        "--env-id", gate.env_id,
        "--seed", str(gate.seed),
        "--total-timesteps", str(gate.total_timesteps),
        "--target-return", str(gate.target_return),
        "--device", device,
        "--out-dir", f"{OUT}/ppo",
        "--stop-at-target",
        "--fail-below-target",
        "--no-progress",
    ]  # fmt: skip
    return cmd + (["--require-gpu"] if require_gpu else [])


def _write_files(files: dict[str, bytes], out_dir: Path) -> None:
    for name, data in files.items():
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _load_json(files: dict[str, bytes], name: str) -> dict:
    try:
        return json.loads(files[name])
    except (KeyError, ValueError):
        return {}


def static_checks(client, image_id: str, variant: Variant) -> tuple[dict, list[str]]:
    """Labels against the pins, size against the budget: instant, so they run first."""
    failures = []
    try:
        labels.check_labels(client.images.get(image_id).labels or {}, variant)
    except ValidationFailed as err:
        failures.append(str(err).removesuffix("; it will not be tagged"))
    summary = size.size_summary(client, image_id)
    print(f"==> size: {summary['uncompressed_bytes'] / size.GB:.2f} GB uncompressed, budget {variant.size_budget_gb} GB", flush=True)
    try:
        size.check_budget(summary, variant)
    except ValidationFailed as err:
        failures.append(str(err))
    return summary, failures


def hygiene_checks(client, image_id: str, ca_cert: Path | None) -> tuple[tuple[str, ...], list[str]]:
    print("==> hygiene scan: private keys, tokens, the build CA, .git, pip caches, nvcc", flush=True)
    start = time.monotonic()
    findings = tuple(hygiene.scan_image(client, image_id, ca_cert))
    for finding in findings:
        print(f"  │ found {finding}", flush=True)
    print(f"==> hygiene scan: {len(findings)} finding(s) in {time.monotonic() - start:.1f}s", flush=True)
    return findings, [f"hygiene scan found {len(findings)} problem(s), first: {findings[0]}"] if findings else []


def supply_chain_checks(client, image_id: str, variant: Variant, out_dir: Path, advisories: Path | None):
    """SBOM of the image, then the vulnerability audit of its Python packages."""
    inventory, sbom_summary = sbom.write_sbom(client, image_id, f"proven-torch {variant.name}", variant.base_suite, out_dir)
    database = advisory_db.load(advisories) if advisories else advisory_db.load_snapshot()
    result = {**audit.audit(inventory["python"], database.records, audit.load_allowlist()), **database.describe()}
    print(
        f"==> audit: {result['status']} ({len(result['findings'])} finding(s), {len(result['allowed'])} allowed) "
        f"against {result['records']} records of {database.source}, as of {result['as_of'] or 'an unknown date'}",
        flush=True,
    )
    if result["stale"]:
        age = "of unknown age" if result["age_days"] is None else f"{result['age_days']} days old"
        print(
            f"  │ warning: advisory data is {age}; "
            "pass --advisories with fresh OSV records (osv.dev PyPI/all.zip) or refresh the snapshot "
            "(python build.py advisories --from DIR)",
            flush=True,
        )
    failures = [f"vulnerability audit: {', '.join(result['failing'][:3])} not in images/audit-allowlist.toml"] if result["failing"] else []
    return sbom_summary, result, failures


def validate_image(
    client,
    image_id: str,
    variant: Variant,
    gpus: int,
    out_dir: Path,
    ca_cert: Path | None = None,
    advisories: Path | None = None,
) -> Validation:
    """Check the image, cheapest first, stopping at the first stage that fails:
    labels and size, the hygiene scan, SBOM and audit, the smoke suite, the PPO gate."""
    start = time.monotonic()
    gpu = gpus > 0
    summary, failures = static_checks(client, image_id, variant)
    findings: tuple[str, ...] = ()
    smoke_report: dict = {}
    ppo_report: dict = {}
    ppo_cpu: dict | None = None
    sbom_summary: dict = {}
    audit_result: dict = {}
    if not failures:
        findings, failures = hygiene_checks(client, image_id, ca_cert)
    if not failures:
        sbom_summary, audit_result, failures = supply_chain_checks(client, image_id, variant, out_dir, advisories)
    if not failures:
        smoke = run_step(client, image_id, "smoke checks", smoke_command(variant, gpu), gpus, SMOKE_TIMEOUT_S)
        _write_files(smoke.files, out_dir)
        smoke_report = _load_json(smoke.files, "smoke.json")
        if smoke.exit_code != 0 or not smoke_report.get("ok"):
            bad = [c["name"] for c in smoke_report.get("checks", []) if c.get("status") == "fail"]
            failures.append(f"smoke checks failed ({', '.join(bad) or f'exit {smoke.exit_code}, no report'})")
    if not failures:
        device = "cuda" if gpu else "cpu"
        ppo = run_step(client, image_id, f"PPO gate ({device})", ppo_command(variant, device, gpu), gpus, PPO_TIMEOUT_S)
        _write_files(ppo.files, out_dir)
        ppo_report = _load_json(ppo.files, "ppo/result.json")
        if ppo.exit_code != 0 or not ppo_report.get("solved"):
            got = ppo_report.get("final_mean_return")
            failures.append(
                f"PPO gate failed: {variant.ppo_gate.env_id} mean return {got} < {variant.ppo_gate.target_return}"
                if got is not None
                else f"PPO gate failed (exit {ppo.exit_code}, no result)"
            )
        if gpu and not failures:  # the same benchmark on the CPU, for the GPU/CPU ratio
            cpu = run_step(client, image_id, "PPO on the CPU (for the ratio)", ppo_command(variant, "cpu", False), 0, PPO_TIMEOUT_S)
            ppo_cpu = _load_json(cpu.files, "ppo/result.json")
    return Validation(
        ok=not failures,
        gpu=gpu,
        smoke=smoke_report,
        ppo=ppo_report,
        ppo_cpu=ppo_cpu,
        hygiene=findings,
        size=summary,
        sbom=sbom_summary,
        audit=audit_result,
        seconds=time.monotonic() - start,
        failures=tuple(failures),
    )


def require_valid(validation: Validation, report_path: Path) -> None:
    if not validation.ok:
        raise ValidationFailed("; ".join(validation.failures) + f"; nothing was tagged (report: {report_path})")
