"""Signed statements read back into typed records, for `verify` and `diff`: an in-toto v1 statement about
exactly one subject, of a predicate type this project signs (statements.PREDICATES), carrying the run
and time the signer stamped into it; each field typed at the boundary, a missing or mistyped one a
RegistryDataRefused that names it. Writing them is pipeline/statements.py's."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.errors import RegistryDataRefused
from pipeline.records import Reader
from pipeline.statements import (
    RESULTS,
    RUN_ANNOTATION,
    RUN_NAME_ANNOTATION,
    SIGNED_ANNOTATION,
    STAMPED_ANNOTATION,
    STAMPED_BY,
    STATEMENT_TYPE,
    TIME_FORMAT,
    kind_of,
)


@dataclass(frozen=True)
class TestResult:
    result: str
    passed: tuple[str, ...]
    warned: tuple[str, ...]
    failed: tuple[str, ...]
    warned_reasons: dict[str, str]
    validated_on: str | None
    image_id: str | None
    vouched: tuple[str, ...]  # the digests `configuration` names (an index's children)


@dataclass(frozen=True)
class Provenance:
    line: str
    platform: str
    tags: tuple[str, ...]
    command: tuple[str, ...]
    revision: str
    started: str | None
    finished: str | None


@dataclass(frozen=True)
class Benchmark:
    environment: str | None
    target_return: float | None
    steps_to_target: float | None
    seconds_to_target: float | None
    steps_per_second: float | None
    device: str
    cuda: str | None
    gpu_model: str | None
    driver: str | None
    host_cpu: str | None


@dataclass(frozen=True)
class Accepted:
    id: str
    package: str
    why: str


@dataclass(frozen=True)
class Vulns:
    data_date: str | None
    accepted_until: tuple[tuple[str, str], ...]  # (advisory id, expiry date) of each accepted finding
    findings: tuple[tuple[str, str, str, bool], ...] = ()  # (advisory id, severity, package purl, accepted)


@dataclass(frozen=True)
class Signed:
    """One statement whose signature verified, read into its kind's record."""

    kind: str
    digest: str  # the subject
    run: str
    signed_at: dt.datetime
    record: Any  # TestResult, Provenance, Benchmark, Vulns, a tuple of Accepted (vex), or the SBOM's package URLs
    run_name: str | None = None  # the caller's name for the run (a label, signed)


def _test_result(r: Reader, p: dict) -> TestResult:
    result = r.text(p, "result")
    if result not in RESULTS:
        raise r.refuse("result", f"one of {', '.join(RESULTS)}")
    reasons = r.obj(p, "warnedReasons", optional=True)
    configuration = r.items(p, "configuration", optional=True)
    vouched = tuple(
        f"sha256:{c['digest']['sha256']}"
        for c in configuration
        if isinstance(c, dict) and isinstance(c.get("digest"), dict) and isinstance(c["digest"].get("sha256"), str)
    )
    return TestResult(
        result=str(result),
        passed=r.texts(p, "passedTests", optional=True),
        warned=r.texts(p, "warnedTests", optional=True),
        failed=r.texts(p, "failedTests", optional=True),
        warned_reasons={str(k): str(v) for k, v in reasons.items()},
        validated_on=r.text(p, "validatedOn", optional=True),
        image_id=r.text(p, "imageId", optional=True),
        vouched=vouched,
    )


def _provenance(r: Reader, p: dict) -> Provenance:
    definition, details = r.obj(p, "buildDefinition"), r.obj(p, "runDetails")
    params, metadata = r.obj(definition, "externalParameters"), r.obj(details, "metadata")
    return Provenance(
        line=str(r.text(params, "line")),
        platform=str(r.text(params, "platform", optional=True) or ""),
        tags=r.texts(params, "tags"),
        command=r.texts(params, "command", optional=True),
        revision=str(r.text(r.obj(r.obj(details, "builder"), "version"), "build.py", optional=True) or "?"),
        started=r.text(metadata, "startedOn", optional=True),
        finished=r.text(metadata, "finishedOn", optional=True),
    )


def _benchmark(r: Reader, p: dict) -> Benchmark:
    return Benchmark(
        environment=r.text(p, "environment", optional=True),
        target_return=r.number(p, "target_return"),
        steps_to_target=r.number(p, "steps_to_target"),
        seconds_to_target=r.number(p, "seconds_to_target"),
        steps_per_second=r.number(p, "steps_per_second"),
        device=str(r.text(p, "device", optional=True) or "cpu"),
        cuda=r.text(p, "cuda", optional=True),
        gpu_model=r.text(p, "gpu_model", optional=True),
        driver=r.text(p, "driver", optional=True),
        host_cpu=r.text(p, "host_cpu", optional=True),
    )


def _vulns(r: Reader, p: dict) -> Vulns:
    scanner = r.obj(p, "scanner")
    accepted, findings = [], []
    for result in r.items(scanner, "result", optional=True):
        notes = [a for a in r.items(result, "annotations", optional=True) if isinstance(a, dict)]
        expires = next((str(a["expires"]) for a in notes if a.get("expires")), None)
        ident = str(r.text(result, "id"))
        if expires:
            accepted.append((ident, expires))
        severity = next(
            (str(s.get("score")) for s in r.items(result, "severity", optional=True) if isinstance(s, dict)), "UNKNOWN"
        )
        package = next((str(a["package"]) for a in notes if a.get("package")), "")
        findings.append((ident, severity, package, any("accepted" in a for a in notes)))
    date = r.text(r.obj(scanner, "db"), "lastUpdate", optional=True)
    return Vulns(data_date=date, accepted_until=tuple(accepted), findings=tuple(findings))


def _vex(r: Reader, p: dict) -> tuple[Accepted, ...]:
    out = []
    for s in r.items(p, "statements", optional=True):
        products = r.items(s, "products") or [{}]
        parts = r.items(products[0], "subcomponents") or [{}]
        out.append(
            Accepted(
                id=str(r.text(r.obj(s, "vulnerability"), "name")),
                package=str(r.text(parts[0], "@id")),
                why=str(r.text(s, "action_statement", optional=True) or ""),
            )
        )
    return tuple(out)


def _sbom(r: Reader, p: dict) -> tuple[str, ...]:
    """The package URL of each component (pkg:pypi/numpy@2.2.0, pkg:deb/debian/libc6@2.36-9)."""
    return tuple(
        str(c["purl"]) for c in r.items(p, "components", optional=True) if isinstance(c, dict) and isinstance(c.get("purl"), str)
    )


READERS: dict[str, Callable[[Reader, dict], Any]] = {
    "provenance": _provenance,
    "sbom": _sbom,
    "test-result": _test_result,
    "benchmark": _benchmark,
    "vulns": _vulns,
    "vex": _vex,
}


def read_statement(stmt: Any, what: str) -> Signed:
    """A verified statement's JSON (parsed, depth-bounded) as a typed record: an in-toto v1 statement
    about exactly one subject, of a known predicate type, carrying its run and signing time. Any other
    shape: RegistryDataRefused naming the field."""
    r = Reader(what, RegistryDataRefused)
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise RegistryDataRefused(f"{what}: not an in-toto v1 statement")
    kind = kind_of(str(r.text(stmt, "predicateType")))
    if kind is None:
        raise RegistryDataRefused(f"{what}: predicate type {str(stmt.get('predicateType'))[:80]!r} is none this tool signs")
    r.what = f"{what} ({kind})"
    subjects = r.items(stmt, "subject")
    if len(subjects) != 1:
        raise RegistryDataRefused(f"{r.what}: not about exactly one subject")
    digests = r.obj(subjects[0], "digest")
    if not isinstance(digests.get("sha256"), str):
        raise r.refuse("subject digest", "a sha256 digest")
    notes = r.obj(subjects[0], "annotations", optional=True)
    run, signed = notes.get(RUN_ANNOTATION), notes.get(SIGNED_ANNOTATION)
    if not isinstance(run, str) or not run or not isinstance(signed, str) or notes.get(STAMPED_ANNOTATION) != STAMPED_BY:
        raise RegistryDataRefused(
            f"{r.what}: its run and signing time were not stamped by the signer (signed by an older build.py, which let "
            "its caller choose them); sign the image again (`build.py sign`)"
        )
    name = notes.get(RUN_NAME_ANNOTATION)
    try:
        signed_at = dt.datetime.strptime(signed, TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        raise r.refuse(SIGNED_ANNOTATION, f"a time written {TIME_FORMAT}") from None
    predicate = r.obj(stmt, "predicate")
    run_name = name if isinstance(name, str) else None
    return Signed(kind, f"sha256:{digests['sha256']}", run, signed_at, READERS[kind](r, predicate), run_name)
