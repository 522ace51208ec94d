"""The files a run leaves, typed: one atomic writer, one loader per file, each field read once.

    report.json      Report     what the run did: status, the validated and stamped images, what was pushed
    validation.json  (a dict)   the stamped validation record (its hash is a label): read whole by statements
    facts.json       Facts      what provenance says about the run (written at push)
    proof.json       Proof      a proof's own record (smoke/proof.py), written inside the image
    ran.json         Ran        beside a later proof.json: the image the proof ran in, recorded outside the
                                container by whatever ran it (a container cannot know its own digest)

A file that is missing, not JSON, or has a field of the wrong type is one line naming the file and the
field (UsageError, exit 2). Standard library only (the signer process imports it too).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from common.cli import write_json
from common.rules import CHECK_NEEDS_GPU
from pipeline.errors import NotVerified, PipelineError, UsageError, ValidationFailed

T = TypeVar("T")
REPORT, VALIDATION, FACTS, PROOF, RAN = "report.json", "validation.json", "facts.json", "proof.json", "ran.json"
MAX_BYTES = 64 << 20  # no run file is near this; a bigger one is not ours


class Reader:
    """Typed fields of one JSON document; a missing or mistyped one is `error` naming the document and field."""

    def __init__(self, what: str, error: type[PipelineError] = UsageError):
        self.what, self.error = what, error

    def refuse(self, name: str, wanted: str) -> PipelineError:
        return self.error(f"{self.what}: {name} is not {wanted}")

    def get(self, obj: Any, key: str, kind: type[T], wanted: str, optional: bool = False) -> T | None:
        value = obj.get(key) if isinstance(obj, dict) else None
        if value is None and optional:
            return None
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise self.refuse(key, wanted)
        return value

    def text(self, obj: Any, key: str, optional: bool = False) -> str | None:
        return self.get(obj, key, str, "a string", optional)

    def obj(self, obj: Any, key: str, optional: bool = False) -> dict:
        return self.get(obj, key, dict, "an object", optional) or {}

    def items(self, obj: Any, key: str, optional: bool = False) -> list:
        return self.get(obj, key, list, "a list", optional) or []

    def texts(self, obj: Any, key: str, optional: bool = False) -> tuple[str, ...]:
        value = self.items(obj, key, optional)
        if not all(isinstance(v, str) for v in value):
            raise self.refuse(key, "a list of strings")
        return tuple(value)

    def flag(self, obj: Any, key: str) -> bool:
        return bool(self.get(obj, key, bool, "true or false", optional=True))

    def number(self, obj: Any, key: str) -> float | None:
        value = obj.get(key) if isinstance(obj, dict) else None
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.refuse(key, "a number")
        return float(value)


def write(path: Path, record: dict) -> Path:
    """A run file, written whole or not at all."""
    write_json(path, record)
    return path


def load(path: Path, what: str) -> dict:
    """A run file's JSON object; a link, a missing file or one that is not a JSON object is one line."""
    return parse(read_bytes(path, what), path, what)


def read_bytes(path: Path, what: str) -> bytes:
    """A run file's bytes, read once (what is hashed is what is parsed); a link or a missing file is one line."""
    try:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW)) as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as err:  # a folder too (EISDIR, at the read)
        if err.errno == errno.ELOOP:
            raise UsageError(f"{path}: the {what} is a symbolic link; give the file itself") from None
        raise UsageError(f"{path}: cannot read the {what} ({err.strerror})") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: the {what} is over {MAX_BYTES >> 20} MiB: not a run file")
    return data


def parse(data: bytes, path: Path, what: str) -> dict:
    try:
        value = json.loads(data)
    except ValueError:
        raise UsageError(f"{path}: the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}: the {what} is not a JSON object")
    return value


# --------------------------------------------------------------------------- report.json


@dataclass(frozen=True)
class Report:
    """report.json as `build.py sign`, the matrix summary and the release read it."""

    path: Path
    status: str  # "validated", "failed", "pushed"
    line: str
    validated_image_id: str
    stamped_image_id: str | None
    pushed: dict[str, str]  # ref -> digest
    gpu: bool
    build_seconds: float | None
    validation: dict

    @property
    def folder(self) -> Path:
        return self.path.parent

    @classmethod
    def load(cls, path: Path) -> Report:
        raw = load(path, "build report")
        r = Reader(f"{path} (build report)")
        pushed = r.obj(raw, "pushed", optional=True)
        if not all(isinstance(v, str) for v in pushed.values()):
            raise r.refuse("pushed", "a map of references to digests")
        return cls(
            path=path,
            status=str(r.text(raw, "status")),
            line=str(r.text(raw, "variant")),
            validated_image_id=str(r.text(raw, "validated_image_id", optional=True) or ""),
            stamped_image_id=r.text(raw, "stamped_image_id", optional=True),
            pushed=dict(pushed),
            gpu=r.flag(raw, "gpu"),
            build_seconds=r.number(raw, "build_seconds"),
            validation=r.obj(raw, "validation", optional=True),
        )


# --------------------------------------------------------------------------- facts.json


@dataclass(frozen=True)
class Facts:
    """What provenance says about a run: gathered at push, read by every later statement about the image."""

    command: tuple[str, ...]
    commit: str  # the full git commit, "-dirty" when the checkout had changes, or "nogit"
    started: str  # RFC 3339
    finished: str  # built, validated and stamped
    invocation: str  # the build run's own id (which run built it; the signer names the signing run)
    tools: dict
    dependencies: tuple[dict, ...]
    line: str
    flavor: str | None
    platform: str
    ref: str  # the repository the image was pushed to
    tags: tuple[str, ...]
    stamped_image_id: str

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def load(cls, path: Path) -> Facts:
        return cls.read(load(path, "run facts (written at push)"), path)

    @classmethod
    def read(cls, raw: dict, path: Path) -> Facts:
        r = Reader(f"{path} (run facts)")
        deps = r.items(raw, "dependencies")
        if not all(isinstance(d, dict) and isinstance(d.get("uri"), str) for d in deps):
            raise r.refuse("dependencies", "a list of objects with a uri")
        return cls(
            command=r.texts(raw, "command"),
            commit=str(r.text(raw, "commit")),
            started=str(r.text(raw, "started")),
            finished=str(r.text(raw, "finished")),
            invocation=str(r.text(raw, "invocation")),
            tools=r.obj(raw, "tools"),
            dependencies=tuple(deps),
            line=str(r.text(raw, "line")),
            flavor=r.text(raw, "flavor", optional=True),
            platform=str(r.text(raw, "platform")),
            ref=str(r.text(raw, "ref")),
            tags=r.texts(raw, "tags"),
            stamped_image_id=str(r.text(raw, "stamped_image_id")),
        )


# --------------------------------------------------------------------------- a proof and where it ran


@dataclass(frozen=True)
class Proof:
    """A proof's outcome as signing needs it, and the image it ran in; `raw` is what the statements are made from."""

    path: Path
    ok: bool
    gpu: bool
    line: str | None
    checks: dict[str, str]  # smoke check -> "pass", "skip", "fail"
    ppo_device: str | None
    ran_in: str  # the image ID the proof's container ran, recorded outside it
    own: bool  # the build's own validation (ran in the validated image, before stamping), not a later proof
    raw: dict = field(repr=False)

    @classmethod
    def later(cls, path: Path) -> Proof:
        """A later proof: proof.json of `proof --out DIR`, with ran.json beside it (scripts/prove.sh writes both)."""
        raw = load(path, "proof record")
        ran = path.with_name(RAN)
        if not ran.is_file():
            raise NotVerified(
                f"sign refused: {path} has no {RAN} beside it, the record of the image it ran in that whatever ran it "
                "writes outside the container (scripts/prove.sh): a proof bound to no image"
            )
        return cls.read(raw, path, Ran.load(ran).image_id, own=False)

    @classmethod
    def of_build(cls, raw: dict, path: Path) -> Proof:
        """The build's own proof: validation.json's (`raw`, read from `path`), which ran in the validated image
        (its `ran_in`)."""
        ran_in = Reader(f"{path} (validation record)").text(raw, "ran_in", optional=True)
        if not ran_in:
            raise UsageError(f"{path}: names no image its proof ran in (ran_in): made by an older build.py; build it again")
        proof = {**Reader(str(path)).obj(raw, "proof", optional=True), **{k: raw.get(k) for k in ("ok", "gpu", "smoke", "ppo")}}
        return cls.read(proof, path, ran_in, own=True)

    @classmethod
    def read(cls, raw: dict, path: Path, ran_in: str, own: bool) -> Proof:
        r = Reader(f"{path} (proof record)")
        checks: dict[str, str] = {}
        for check in r.items(r.obj(raw, "smoke", optional=True), "checks", optional=True):
            checks[str(r.text(check, "name"))] = str(r.text(check, "status"))
        return cls(
            path=path,
            ok=r.flag(raw, "ok"),
            gpu=r.flag(raw, "gpu"),
            line=r.text(raw, "variant", optional=True),
            checks=checks,
            ppo_device=r.text(r.obj(raw, "ppo", optional=True), "device", optional=True),
            ran_in=ran_in,
            own=own,
            raw=raw,
        )

    def unlisted(self) -> list[str]:
        """The smoke checks every proof lists (common.rules.CHECK_NEEDS_GPU) that this one does not."""
        return [name for name in CHECK_NEEDS_GPU if name not in self.checks]

    def gpu_not_passed(self) -> list[str]:
        """The GPU checks (and the GPU gate) this proof did not pass: a GPU proof passes every one."""
        missing = [f"smoke/{n}" for n, needs in CHECK_NEEDS_GPU.items() if needs and self.checks.get(n) != "pass"]
        if not str(self.ppo_device or "").startswith("cuda"):
            missing.append("ppo-gate/cuda")
        return missing


@dataclass(frozen=True)
class Ran:
    """ran.json: the image a proof ran in, as the host that ran it saw it (`docker inspect` of the container)."""

    image_id: str
    ref: str | None

    @classmethod
    def load(cls, path: Path) -> Ran:
        raw = load(path, "record of the image the proof ran in (scripts/prove.sh writes it beside proof.json)")
        r = Reader(f"{path} (where the proof ran)")
        image = str(r.text(raw, "image_id"))
        if not image.startswith("sha256:") or len(image) != 71:
            raise r.refuse("image_id", "an image ID (sha256:<64 hex>)")
        return cls(image_id=image, ref=r.text(raw, "ref", optional=True))


# --------------------------------------------------------------------------- what signing requires


@dataclass(frozen=True)
class Registered:
    """What the registry holds for a pushed digest, as content-addressed data: its config's digest (the image
    ID), and what the build stamped into that config as labels: validation.json's hash, the immutable tag."""

    digest: str
    config: str
    validation_sha256: str | None
    version: str | None = None


@dataclass(frozen=True)
class Signable:
    """What the statements about one image are made from: its run's facts, its validation record and SBOM."""

    facts: Facts
    validation: dict
    sbom: dict

    @classmethod
    def of_run(cls, folder: Path, facts: Facts, validation: dict) -> Signable:
        """The run's facts and its stamped validation record, with the SBOM read once from the report folder and
        refused unless it is the one the record names by hash (the push's records, and `build.py sign`'s)."""
        sbom_file = folder / sbom_name(validation)
        sbom = _stamped(sbom_file, "SBOM", (validation.get("sbom") or {}).get("sha256"))
        if sbom is None:
            raise NotVerified(f"sign refused: {sbom_file} is not the SBOM the stamped validation record names: nothing signed")
        return cls(facts, validation, sbom)


def revision(commit: str) -> str:
    """The revision a build's immutable tag names (push.IMMUTABLE's `rev`): its commit's first 7 hex digits,
    "-dirty" kept, or "nogit"."""
    return "nogit" if commit == "nogit" else commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")


def sbom_name(validation: dict) -> str:
    return str((validation.get("sbom") or {}).get("file", "sbom.cdx.json"))


def _stamped(path: Path, what: str, sha256: object) -> dict | None:
    """The run file at `path`, parsed from the bytes that hash to `sha256`; None when they do not, or when
    there are none to read (missing, a link, a folder)."""
    try:
        data = read_bytes(path, what)
    except UsageError:
        return None
    return parse(data, path, what) if hashlib.sha256(data).hexdigest() == sha256 else None


def bind(pushed: Registered, report: Report, facts: Facts, later: Proof | None, require_gpu: bool) -> tuple[Signable, Proof]:
    """`build.py sign`'s check before anything is signed: refused unless the pushed digest, the report, the
    facts, the stamped validation record, its SBOM and the proof (`later`'s, else the build's own) all name
    one image and one line, and the proof passed and lists every check (with require_gpu, every GPU check and
    the GPU gate too). Returns what it checked, each file parsed from the bytes that were checked: what is
    signed is what was bound, whatever changes in the folder meanwhile."""
    digest, config = pushed.digest, pushed.config
    if digest not in report.pushed.values() or report.status != "pushed":
        names = ", ".join(report.pushed.values()) or "none"
        raise UsageError(f"{report.path}: that build did not push {digest} (its report names {names})")
    if config != report.stamped_image_id or config != facts.stamped_image_id:
        raise NotVerified(
            f"sign refused: {digest[:19]}… is image {config[:19]}… in the registry, but the report names "
            f"{str(report.stamped_image_id)[:19]}… and its facts {facts.stamped_image_id[:19]}…: an edited or foreign report"
        )
    if facts.line != report.line:
        raise NotVerified(f"sign refused: the run's facts name line {facts.line}, its report {report.line}")
    validation_file = report.folder / VALIDATION
    validation = _stamped(validation_file, "validation record", pushed.validation_sha256)
    if validation is None:  # no label (None) matches no bytes' hash either
        raise NotVerified(
            f"sign refused: {validation_file} is not the validation record {digest[:19]}… was stamped with (its config's "
            "label names another, or none): an edited record, or an image this pipeline did not stamp"
        )
    stamped = ((validation.get("proof") or {}).get("variant"), validation.get("platform"))
    if stamped != (report.line, facts.platform):
        raise NotVerified(
            f"sign refused: {digest[:19]}… was validated as line {stamped[0]} on {stamped[1]} (its stamped record), but "
            f"the report and facts name {report.line} on {facts.platform}: an edited record"
        )
    signable = Signable.of_run(report.folder, facts, validation)
    proof = later or Proof.of_build(validation, validation_file)
    expected = report.validated_image_id if proof.own else config
    if proof.ran_in != expected:
        raise NotVerified(
            f"sign refused: {proof.path} ran in image {proof.ran_in[:19]}…, not in {expected[:19]}… ({digest[:19]}…): "
            "a proof of another image"
        )
    if proof.line != report.line:
        raise NotVerified(f"sign refused: {proof.path} is a proof of line {proof.line}, not of {report.line}")
    if not proof.ok:
        raise ValidationFailed(
            f"{proof.path}: the proof did not pass ({proof.raw.get('verdict') or 'no verdict'}): nothing signed; "
            f"withdraw the digest (`build.py withdraw {facts.ref}@{digest}`)"
        )
    if unlisted := proof.unlisted():
        raise NotVerified(f"sign refused: {proof.path} lists no result for {', '.join(unlisted)}: not a whole proof")
    if require_gpu and (missing := proof.gpu_not_passed()):
        raise ValidationFailed(
            f"{proof.path}: not a GPU proof ({', '.join(missing)} did not pass: the CPU only?) and --require-gpu "
            "was given: nothing signed"
        )
    return signable, proof
