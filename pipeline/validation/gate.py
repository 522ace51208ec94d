"""Validate a built image: named stages, cheapest first, stopping at the first that fails (the README's
"Stages, in order"); the last is the image's own `proof`, run through its entrypoint as a user runs it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline import labels
from pipeline.containers import read_file, run_in_image
from pipeline.errors import ValidationFailed
from pipeline.render import dockerfile_path
from pipeline.target import Target, Validation
from pipeline.validation import advisories as advisory_db
from pipeline.validation import audit, hygiene, sbom, size
from pipeline.variants import PLATFORMS, Variant, arch

if TYPE_CHECKING:
    from docker import DockerClient
from common.deadlines import EMULATION_SCALE, emulated_on_x86
from common.rules import BAKED_SPEC

PROOF_TIMEOUT_S = 2400
OUT = "/tmp/validation"


@dataclass(frozen=True)
class Request:
    """What validation is asked to do: which image, for which Target (its line, platform and report folder),
    with how many GPUs."""

    client: DockerClient
    image_id: str
    gpus: int
    target: Target

    @property
    def time_scale(self) -> float:
        """How much longer each stage may take: emulated Python runs 10-100x slower (docs/benchmarks.md)."""
        return EMULATION_SCALE if self.target.emulated else 1.0  # the proof inside scales its own the same way


@dataclass
class Findings:
    """What the stages found, filled in as they run (a Validation is made of it at the end)."""

    size: dict = field(default_factory=dict)
    hygiene: tuple[str, ...] = ()
    sbom: dict = field(default_factory=dict)
    audit: dict = field(default_factory=dict)
    proof: dict = field(default_factory=dict)
    ran_in: str = ""


# --------------------------------------------------------------------------- stages


SPEC_IN_IMAGE = str(BAKED_SPEC)


def spec_problem(baked: bytes | None, variant: Variant) -> str | None:
    """The image's baked spec must be the matrix's: `proof` holds the image to it."""
    if baked is None:
        return f"the image has no {SPEC_IN_IMAGE}: not built from this checkout's {dockerfile_path(variant).name}"
    try:
        spec = json.loads(baked)
    except ValueError:
        return f"the image's {SPEC_IN_IMAGE} is not JSON"
    want, got = variant.spec(), spec.get("expect", {})
    differ = sorted(k for k in set(want["expect"]) | set(got) if want["expect"].get(k) != got.get(k))
    differ += ["ppo_gate"] if spec.get("ppo_gate") != want["ppo_gate"] else []
    if differ:
        return (
            f"the image's spec differs from images/variants.toml in {', '.join(differ)}: rebuild after `python build.py render`"
        )
    return None


def labels_and_size(req: Request, found: Findings) -> list[str]:
    """Labels and the baked spec against the pins, size against the budget: instant, so they run first."""
    failures = []
    image = req.client.images.get(req.image_id)
    if image.attrs.get("Architecture") != arch(req.target.platform):
        failures.append(f"the image is {image.attrs.get('Architecture')}, not the {req.target.platform} that was built")
    try:
        labels.check_labels(image.labels or {}, req.target.variant)
    except ValidationFailed as err:
        failures.append(str(err).removesuffix("; it will not be tagged"))
    problem = spec_problem(read_file(req.client, req.image_id, SPEC_IN_IMAGE), req.target.variant)
    if problem:
        failures.append(problem)
    found.size = size.size_summary(req.client, req.image_id)
    print(
        f"==> size: {found.size['uncompressed_bytes'] / size.GB:.2f} GB uncompressed, budget {req.target.variant.size_budget_gb} GB",
        flush=True,
    )
    try:
        size.check_budget(found.size, req.target.variant)
    except ValidationFailed as err:
        failures.append(str(err))
    return failures


def hygiene_scan(req: Request, found: Findings) -> list[str]:
    print("==> hygiene scan: private keys, tokens, the build CA, .git, pip caches, nvcc", flush=True)
    start = time.monotonic()
    found.hygiene = tuple(hygiene.scan_image(req.client, req.image_id, req.target.ca_cert, 600 * req.time_scale))
    for finding in found.hygiene:
        print(f"  │ found {finding}", flush=True)
    print(f"==> hygiene scan: {len(found.hygiene)} finding(s) in {time.monotonic() - start:.1f}s", flush=True)
    return [f"hygiene scan found {len(found.hygiene)} problem(s), first: {found.hygiene[0]}"] if found.hygiene else []


def sbom_and_audit(req: Request, found: Findings) -> list[str]:
    """SBOM of the image, then the vulnerability audit of its Python packages."""
    inventory, found.sbom = sbom.write_sbom(req.client, req.image_id, req.target.variant, req.target.run_dir, req.time_scale)
    database = advisory_db.load(req.target.advisories) if req.target.advisories else advisory_db.load_snapshot()
    found.audit = {**audit.audit(inventory["python"], database.records, audit.load_allowlist()), **database.describe()}
    result, word = found.audit, audit.word(found.audit)
    print(
        f"==> audit: {word if word == 'pass' else warn(word)} "
        f"({len(result['findings'])} finding(s), {len(result['allowed'])} accepted) "
        f"against {result['records']} records of {database.source}, as of {result['as_of'] or 'an unknown date'}; "
        f"{result['read_by_rule_records']} read by the irregular-version rule, "
        f"{result['unreadable_records']} unreadable (counted as affected)",
        flush=True,
    )
    for entry in result["unreadable"]:
        print(f"  │ unreadable: {entry['id']} for {entry['package']} {entry['version']}: {'; '.join(entry['raw'])}", flush=True)
    for entry in result["allowed"]:
        print(
            f"  │ accepted: {entry['id']} ({entry['severity']}) in {entry['package']} {entry['version']}, until {entry['expires']}: {entry['reason']}",
            flush=True,
        )
    if result["stale"]:
        age = "of unknown age" if result["age_days"] is None else f"{result['age_days']} days old"
        print(
            "  │ "
            + warn(f"stale: the advisory data is {age}")
            + "; pass --advisories with fresh OSV records (osv.dev PyPI/all.zip) or refresh the snapshot "
            "(python build.py advisories --from DIR)",
            flush=True,
        )
    return (
        [f"vulnerability audit: {', '.join(result['failing'][:3])} not in images/audit-allowlist.toml"]
        if result["failing"]
        else []
    )


def warn(text: str) -> str:
    """`text` in a warning's colour (yellow) on a terminal; plain in logs and pipes."""
    return f"\033[33m{text}\033[0m" if sys.stdout.isatty() else text


def proof_command(require_gpu: bool) -> list[str]:
    """What validation runs in the image: the same `proof` a user runs."""
    return ["proof", "--out", OUT] + (["--require-gpu"] if require_gpu else [])


def emulation_env(target: Target) -> dict[str, str]:
    """What tells `proof` it runs under emulation, whatever the qemu (8.1+ imitates the guest's /proc/cpuinfo,
    which common.deadlines.emulation reads otherwise)."""
    if not target.emulated:
        return {}
    return {"PROVEN_TORCH_EMULATED": emulated_on_x86(PLATFORMS[target.platform]["machine"])}


def proof(req: Request, found: Findings) -> list[str]:
    gpu = req.gpus > 0
    command = proof_command(require_gpu=gpu)
    print(f"==> proof: {' '.join(command)}", flush=True)
    done = run_in_image(
        req.client,
        req.image_id,
        command,
        timeout_s=PROOF_TIMEOUT_S * req.time_scale,
        gpus=req.gpus,
        shm_size="2g",
        stream=True,
        fetch=OUT,
        what="the proof",
        environment=emulation_env(req.target),
    )
    print(
        f"==> proof: exit {done.exit_code} in {done.seconds:.1f}s" + (" (killed at the deadline)" if done.timed_out else ""),
        flush=True,
    )
    for name, data in {**done.files, "proof.log": done.stdout.encode()}.items():  # what `proof` printed, kept beside its record
        path = req.target.run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        found.proof = json.loads(done.files["proof.json"])
    except (KeyError, ValueError):
        found.proof = {}
    found.ran_in = done.image_id  # what Docker says the container ran: the proof cannot say it of itself
    if done.exit_code == 0 and found.proof.get("ok"):
        return []
    return list(found.proof.get("failures") or []) or [f"proof failed (exit {done.exit_code}, no proof.json)"]


Stage = Callable[[Request, Findings], list[str]]
STAGES: tuple[tuple[str, Stage], ...] = (
    ("labels, spec and size", labels_and_size),
    ("hygiene scan", hygiene_scan),
    ("SBOM and audit", sbom_and_audit),
    ("proof", proof),
)


def validate_image(req: Request) -> Validation:
    """Run the stages in order until one fails; the rest are "not run"."""
    start = time.monotonic()
    found = Findings()
    failures: list[str] = []
    statuses = []
    for name, stage in STAGES:
        if failures:
            statuses.append((name, "not run"))
            continue
        try:
            failures = stage(req, found)
        except ValidationFailed as err:  # a stage's tool that failed: that stage's failure, the report written
            failures = [str(err)]
        statuses.append((name, "fail" if failures else "pass"))
    return Validation(
        ok=not failures,
        gpu=bool(found.proof.get("gpu")),
        seconds=time.monotonic() - start,
        failures=tuple(failures),
        stages=tuple(statuses),
        platform=req.target.platform,
        emulated=req.target.emulated,
        **vars(found),  # what the stages found: proof, hygiene, size, SBOM, audit, the image the proof ran in
    )
