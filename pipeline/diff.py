"""`build.py diff A B --key PUB`: is B safe to roll out instead of A? Answered from what each image's
signed statements say and what its manifest (content-addressed, so it needs no signature) says, without
reading a layer:

    trust     whether each side verifies (verify's checks: key, run, tag, age); an unverified side's
              statements are not read, only its manifest
    changed   the line, torch, torchvision, torchaudio, CUDA, cuDNN, NCCL and Python; Python and Debian
              packages added, removed and changed (from the signed SBOMs)
    security  advisories fixed by B and new in B, acceptances added or removed, each side's data date;
              with --advisories DIR both SBOMs' Python packages audited again against that data
    cost      compressed size, layers shared, the bytes a host holding A pulls to get B
    proof     each side's result and where it ran; the PPO figures side by side, a ratio only on the same
              hardware (device kind and GPU or CPU model), otherwise both figures and why no ratio

The verdict: exit 0 when B is no worse than A (B verifies, no new unaccepted HIGH or CRITICAL advisory,
on the same hardware steps/s no lower than --max-slowdown allows); 1 with one line per regression; 2 bad
input; 6 a registry unreachable. What no signed statement carries (uncompressed size, the GPU
architectures compiled in, the minimum driver, the host's load during the benchmark) is said as not
compared.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.rules import MAX_SLOWDOWN
from pipeline import registry, verify
from pipeline.errors import NotVerified
from pipeline.variants import AMD64

FAILING = ("HIGH", "CRITICAL")
NOT_SIGNED = ("uncompressed size", "GPU architectures compiled in", "minimum driver", "the host's load during the benchmark")
VERSION_OF = {  # what the summary names -> the package URL it is read from
    "torch": r"pkg:pypi/torch@",
    "torchvision": r"pkg:pypi/torchvision@",
    "torchaudio": r"pkg:pypi/torchaudio@",
    "cuDNN": r"pkg:pypi/nvidia-cudnn-cu\d+@",
    "NCCL": r"pkg:pypi/nvidia-nccl-cu\d+@",
    "Python": r"pkg:deb/debian/python3\.\d+@",
}


@dataclass(frozen=True)
class Side:
    """One image as diff sees it: its manifest's layers always; its verified summary (verify.summary) or why not."""

    ref: str
    digest: str  # the image's own manifest (an index's child for the chosen platform)
    layers: dict[str, int]  # layer digest -> compressed size, from the manifest
    image: dict | None  # verify's summary of it; None when it did not verify
    why: str = ""  # why it did not verify

    def packages(self) -> dict[str, str]:
        """'pypi/numpy' -> '2.2.0', from the signed SBOM's package URLs."""
        out = {}
        for purl in (self.image or {}).get("packages", []):
            name, _, version = purl.removeprefix("pkg:").partition("@")
            out[re.sub(r"^deb/debian/", "deb/", name)] = version.split("?")[0]
        return out

    def findings(self) -> dict[str, dict]:
        return {f["id"]: f for f in (self.image or {}).get("findings", [])}


def read_side(text: str, keys: list[Path], policy: verify.Policy, timeout: float, platform: str) -> Side:
    """The manifest (the platform's child of an index), then verify's judgement of the same reference."""
    client, ref, (body, media, digest) = registry.open_image(text, timeout)
    if media in registry.INDEXES:
        child = next((d for name, d in registry.index_images(body, str(ref)) if name == platform), None)
        if child is None:
            raise NotVerified(f"{ref}: the index has no {platform} image (--platform picks another)")
        found = client.manifest(child["digest"])
        if found is None:
            raise NotVerified(f"{ref}: the index names {child['digest'][:19]}…, which the registry does not have")
        body, _, digest = found
    layers = registry.descriptors(registry.as_dict(body, str(ref)).get("layers"), str(ref))
    sizes = {d["digest"]: int(d.get("size") or 0) for d in layers}
    try:
        record = verify.verify(text, keys, policy, timeout)
    except NotVerified as err:  # RegistryDataRefused too: the side is unverified, said so
        return Side(str(ref), digest, sizes, None, str(err))
    image = next((i for i in record["images"] if i["digest"] == digest or i.get("platform") == platform), record["images"][0])
    return Side(str(ref), digest, sizes, image)


# --------------------------------------------------------------------------- comparing (pure)


def versions(side: Side) -> dict[str, str]:
    """The headline versions: the line, torch and its companions, CUDA, cuDNN, NCCL, Python."""
    if side.image is None:
        return {}
    purls = side.image.get("packages", [])
    out = {"line": side.image["provenance"]["line"]}
    for name, pattern in VERSION_OF.items():
        hit = next((p for p in purls if re.match(pattern, p)), None)
        if hit:
            out[name] = hit.split("@", 1)[1].split("?")[0]
    out["CUDA"] = (side.image.get("benchmark") or {}).get("cuda") or "?"
    return out


def package_changes(a: Side, b: Side) -> dict[str, list]:
    pa, pb = a.packages(), b.packages()
    return {
        "added": sorted(f"{n} {pb[n]}" for n in pb.keys() - pa.keys()),
        "removed": sorted(f"{n} {pa[n]}" for n in pa.keys() - pb.keys()),
        "changed": sorted(f"{n} {pa[n]} -> {pb[n]}" for n in pa.keys() & pb.keys() if pa[n] != pb[n]),
    }


def security(a: Side, b: Side, reaudit: tuple[dict, dict] | None = None) -> dict:
    """Advisories fixed and new, acceptances added and removed, each side's data date; `reaudit`: each side's
    findings against fresher data, by id ({id: {severity, package, accepted}}), in place of the signed ones."""
    fa, fb = reaudit if reaudit is not None else (a.findings(), b.findings())
    accepted_a = {i for i, f in fa.items() if f["accepted"]}
    accepted_b = {i for i, f in fb.items() if f["accepted"]}
    return {
        "fixed_in_b": sorted(fa.keys() - fb.keys()),
        "new_in_b": sorted(fb.keys() - fa.keys()),
        "new_unaccepted_high": sorted(
            i for i, f in fb.items() if not f["accepted"] and f["severity"] in FAILING and (i not in fa or fa[i]["accepted"])
        ),
        "acceptances_added": sorted(accepted_b - accepted_a),
        "acceptances_removed": sorted(accepted_a - accepted_b),
        "data": {"a": (a.image or {}).get("advisory_data"), "b": (b.image or {}).get("advisory_data")},
        "reaudited": reaudit is not None,
    }


def cost(a: Side, b: Side) -> dict:
    shared = a.layers.keys() & b.layers.keys()
    return {
        "a_compressed_bytes": sum(a.layers.values()),
        "b_compressed_bytes": sum(b.layers.values()),
        "layers_shared": len(shared),
        "b_layers": len(b.layers),
        "pull_for_b_bytes": sum(size for d, size in b.layers.items() if d not in a.layers),
    }


def hardware(bench: dict) -> str:
    device = "cuda" if str(bench.get("device", "cpu")).startswith("cuda") else "cpu"
    return f"{device}: {bench.get('gpu_model') if device == 'cuda' else bench.get('host_cpu')}"


def speed(a: Side, b: Side, max_slowdown: float) -> dict:
    """The PPO figures side by side; a ratio (B over A) only when both ran on the same hardware."""
    ba, bb = (a.image or {}).get("benchmark") or {}, (b.image or {}).get("benchmark") or {}
    out: dict[str, Any] = {
        "a": {
            "steps_per_second": ba.get("steps_per_second"),
            "seconds_to_target": ba.get("seconds_to_target"),
            "hardware": hardware(ba) if ba else None,
        },
        "b": {
            "steps_per_second": bb.get("steps_per_second"),
            "seconds_to_target": bb.get("seconds_to_target"),
            "hardware": hardware(bb) if bb else None,
        },
        "ratio": None,
        "why_no_ratio": None,
        "slower": False,
    }
    if not ba or not bb or not ba.get("steps_per_second") or not bb.get("steps_per_second"):
        out["why_no_ratio"] = "a side has no signed benchmark figures"
    elif hardware(ba) != hardware(bb):
        out["why_no_ratio"] = f"different hardware ({hardware(ba)} vs {hardware(bb)})"
    else:
        out["ratio"] = round(bb["steps_per_second"] / ba["steps_per_second"], 3)
        out["slower"] = out["ratio"] < 1 - max_slowdown
    return out


def compare(a: Side, b: Side, max_slowdown: float = MAX_SLOWDOWN, reaudit: tuple[dict, dict] | None = None) -> dict:
    """The whole answer, as --json prints it (schema 1), with the regressions that decide the exit status."""
    same = a.digest == b.digest
    record: dict[str, Any] = {
        "schema": 1,
        "a": {"ref": a.ref, "digest": a.digest, "verified": a.image is not None, "why": a.why},
        "b": {"ref": b.ref, "digest": b.digest, "verified": b.image is not None, "why": b.why},
        "same_image": same,
        "versions": {"a": versions(a), "b": versions(b)},
        "packages": package_changes(a, b),
        "security": security(a, b, reaudit),
        "cost": cost(a, b),
        "proof": {
            side: {
                "result": (s.image or {}).get("test_result", {}).get("result"),
                "where": (s.image or {}).get("test_result", {}).get("validated_on"),
            }
            for side, s in (("a", a), ("b", b))
        },
        "speed": speed(a, b, max_slowdown),
        "max_slowdown": max_slowdown,
        "not_compared": list(NOT_SIGNED) + ["(not in the signed statements)"],
    }
    regressions = []
    if b.image is None:
        regressions.append(f"B does not verify: {b.why}")
    regressions += [
        f"B carries {i}, a new unaccepted HIGH or CRITICAL advisory" for i in record["security"]["new_unaccepted_high"]
    ]
    if record["speed"]["slower"]:
        ratio = record["speed"]["ratio"]
        regressions.append(
            f"B's PPO steps/s is {ratio:.2f}x A's on the same hardware, below the {1 - max_slowdown:.2f}x --max-slowdown allows"
        )
    record["regressions"] = regressions
    return record


# --------------------------------------------------------------------------- showing


def screen(record: dict) -> list[str]:
    a, b = record["a"], record["b"]
    lines = [f"diff {a['ref']} -> {b['ref']}"]
    if record["same_image"] and not record["regressions"] and a["verified"] and b["verified"]:
        return [*lines, "no differences: the same image (one digest)"]
    for name, side in (("A", a), ("B", b)):
        lines.append(
            f"  trust     {name} "
            + (f"verified ({side['digest'][:19]}…)" if side["verified"] else f"NOT verified: {side['why']}")
        )
    va, vb = record["versions"]["a"], record["versions"]["b"]
    for key in ("line", "torch", "torchvision", "torchaudio", "CUDA", "cuDNN", "NCCL", "Python"):
        if va.get(key) != vb.get(key):
            lines.append(f"  changed   {key}: {va.get(key, '?')} -> {vb.get(key, '?')}")
    pk = record["packages"]
    lines.append(f"  packages  {len(pk['added'])} added, {len(pk['removed'])} removed, {len(pk['changed'])} changed")
    lines += [f"            + {p}" for p in pk["added"][:20]] + [f"            - {p}" for p in pk["removed"][:20]]
    lines += [f"            ~ {p}" for p in pk["changed"][:40]]
    sec = record["security"]
    data = f"advisory data {sec['data']['a']} -> {sec['data']['b']}" + (
        " (both re-audited with --advisories)" if sec["reaudited"] else ""
    )
    lines.append(
        f"  security  fixed in B: {', '.join(sec['fixed_in_b']) or 'none'}; new in B: {', '.join(sec['new_in_b']) or 'none'}; {data}"
    )
    if sec["acceptances_added"] or sec["acceptances_removed"]:
        lines.append(
            f"            acceptances added: {', '.join(sec['acceptances_added']) or 'none'}; removed: {', '.join(sec['acceptances_removed']) or 'none'}"
        )
    c = record["cost"]
    lines.append(
        f"  cost      {c['a_compressed_bytes'] / 1e9:.2f} GB -> {c['b_compressed_bytes'] / 1e9:.2f} GB compressed; "
        f"{c['layers_shared']} of B's {c['b_layers']} layers shared; a host holding A pulls {c['pull_for_b_bytes'] / 1e6:,.1f} MB"
    )
    pa, pb = record["proof"]["a"], record["proof"]["b"]
    lines.append(
        f"  proof     A {pa['result'] or 'unverified'} ({pa['where'] or '?'}); B {pb['result'] or 'unverified'} ({pb['where'] or '?'})"
    )
    sp = record["speed"]
    figures = f"steps/s {_number(sp['a']['steps_per_second'])} -> {_number(sp['b']['steps_per_second'])}"
    lines.append(
        f"  speed     {figures}: "
        + (f"B/A {sp['ratio']:.2f}x on {sp['b']['hardware']}" if sp["ratio"] else f"no ratio, {sp['why_no_ratio']}")
    )
    lines.append(f"  not compared (not in the signed statements): {', '.join(NOT_SIGNED)}")
    lines.append(
        "verdict: " + ("B is no worse than A" if not record["regressions"] else f"{len(record['regressions'])} regression(s)")
    )
    return lines + [f"  REGRESSION {r}" for r in record["regressions"]]


def _number(value) -> str:
    return f"{value:,.0f}" if isinstance(value, int | float) else "?"


def markdown(record: dict) -> str:
    """A table fit for a pull request comment."""
    va, vb, sp, sec, c = record["versions"]["a"], record["versions"]["b"], record["speed"], record["security"], record["cost"]
    rows = [
        ("image", f"`{record['a']['ref']}`", f"`{record['b']['ref']}`"),
        ("verified", str(record["a"]["verified"]), str(record["b"]["verified"])),
    ]
    rows += [(k, va.get(k, "?"), vb.get(k, "?")) for k in ("line", "torch", "CUDA", "cuDNN", "NCCL", "Python")]
    rows += [("proof", str(record["proof"]["a"]["result"]), str(record["proof"]["b"]["result"]))]
    ratio = f" ({sp['ratio']:.2f}x)" if sp["ratio"] else f" (no ratio: {sp['why_no_ratio']})"
    rows += [("PPO steps/s", _number(sp["a"]["steps_per_second"]), _number(sp["b"]["steps_per_second"]) + ratio)]
    rows += [
        (
            "compressed",
            f"{c['a_compressed_bytes'] / 1e9:.2f} GB",
            f"{c['b_compressed_bytes'] / 1e9:.2f} GB (pull {c['pull_for_b_bytes'] / 1e6:,.1f} MB)",
        )
    ]
    rows += [("advisory data", str(sec["data"]["a"]), str(sec["data"]["b"]))]
    table = ["| | A | B |", "|---|---|---|", *(f"| {k} | {x} | {y} |" for k, x, y in rows)]
    verdict = "**B is no worse than A**" if not record["regressions"] else "**Regressions**: " + "; ".join(record["regressions"])
    return "\n".join([*table, "", verdict])


def reaudit_findings(a: Side, b: Side, advisories: Path) -> tuple[dict, dict]:
    """Each side's Python packages (from its signed SBOM) audited by the project's own audit against `advisories`."""
    from pipeline.validation import advisories as advisory_db
    from pipeline.validation import audit

    database = advisory_db.load(advisories)
    allowlist = audit.load_allowlist()

    def findings(side: Side) -> dict:
        pkgs = [{"name": n.removeprefix("pypi/"), "version": v} for n, v in side.packages().items() if n.startswith("pypi/")]
        done = audit.audit(pkgs, database.records, allowlist)
        found = [(f, False) for f in done.get("findings", [])] + [(f, True) for f in done.get("allowed", [])]
        return {
            f["id"]: {"severity": f["severity"], "package": f"pkg:pypi/{f['package']}@{f['version']}", "accepted": ok}
            for f, ok in found
        }

    return findings(a), findings(b)


@dataclass(frozen=True)
class DiffRequest:
    """`build.py diff`, parsed once."""

    a: str
    b: str
    keys: list[Path]
    platform: str = AMD64  # an index's image to compare
    max_slowdown: float = MAX_SLOWDOWN
    advisories: Path | None = None  # re-audit both SBOMs against this data
    max_age: int = verify.DEFAULT_MAX_AGE
    timeout: float = registry.DEFAULT_DEADLINE
    output: str = "screen"  # "screen", "json" or "markdown"


def diff_command(req: DiffRequest) -> tuple[list[str], int]:
    """`build.py diff A B`: the lines to print and the exit status (0 no worse, 1 regressions)."""
    if not 0 <= req.max_slowdown < 1:
        from pipeline.errors import UsageError

        raise UsageError(f"--max-slowdown {req.max_slowdown:g}: give a fraction from 0 to below 1 (0.15: 15% slower at most)")
    policy = verify.Policy(max_age_days=req.max_age)
    a, b = (read_side(text, req.keys, policy, req.timeout, req.platform) for text in (req.a, req.b))
    reaudit = reaudit_findings(a, b, req.advisories) if req.advisories else None
    record = compare(a, b, req.max_slowdown, reaudit)
    lines = {"json": lambda: [json.dumps(record, indent=2)], "markdown": lambda: [markdown(record)]}.get(
        req.output, lambda: screen(record)
    )()
    return lines, 1 if record["regressions"] else 0
