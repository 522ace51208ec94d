"""`build.py diff A B`: the comparison itself (pure, on Side records), and against a crafted registry that
records every request: two signed images compared without a single layer blob read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline import attest, registry, statements
from pipeline.diff import Side, compare, markdown, screen
from pipeline.signing import image_statements
from pipeline.statements import Subject
from tests.crafted_registry import REPO, Server, artifacts, list_referrers
from tests.records import run_folder, signable, validation

pytestmark = pytest.mark.unit

LAYER = {"sha256:" + "1" * 64: 4_000_000_000, "sha256:" + "2" * 64: 200_000}


def side(
    ref: str = "h/r:a",
    *,
    packages=("pkg:pypi/torch@1.0.1", "pkg:pypi/numpy@2.1.0"),
    sps=1000.0,
    cpu="Xeon",
    findings=(),
    layers=None,
):
    image = {
        "digest": "sha256:" + "a" * 64,
        "provenance": {"line": "2.9-cu128"},
        "test_result": {"result": "WARNED", "validated_on": "linux/amd64: validated on the CPU only"},
        "benchmark": {"device": "cpu", "host_cpu": cpu, "steps_per_second": sps, "seconds_to_target": 3.0, "cuda": "12.8"},
        "packages": list(packages),
        "findings": [dict(zip(("id", "severity", "package", "accepted"), f, strict=True)) for f in findings],
        "advisory_data": "2026-07-23",
    }
    return Side(
        ref, image["digest"] if layers is None else "sha256:" + "b" * 64, layers if layers is not None else dict(LAYER), image
    )


def test_a_package_bump_is_named_and_is_no_regression():
    record = compare(side(), side("h/r:b", packages=("pkg:pypi/torch@1.0.1", "pkg:pypi/numpy@2.2.0", "pkg:pypi/rich@14.0")))
    assert record["packages"] == {"added": ["pypi/rich 14.0"], "removed": [], "changed": ["pypi/numpy 2.1.0 -> 2.2.0"]}
    assert record["regressions"] == [] and record["speed"]["ratio"] == 1.0


def test_a_slower_benchmark_on_the_same_hardware_is_a_regression_and_on_other_hardware_has_no_ratio():
    slow = compare(side(), side("h/r:b", sps=700.0), max_slowdown=0.15)
    assert slow["speed"]["ratio"] == 0.7 and slow["speed"]["slower"]
    assert len(slow["regressions"]) == 1 and "0.70x A's on the same hardware" in slow["regressions"][0]
    other = compare(side(), side("h/r:b", sps=700.0, cpu="EPYC"))
    assert other["speed"]["ratio"] is None and "different hardware (cpu: Xeon vs cpu: EPYC)" in other["speed"]["why_no_ratio"]
    assert other["regressions"] == []


def test_a_new_unaccepted_high_advisory_and_acceptances_are_named():
    a = side(findings=[("PYSEC-1", "HIGH", "pkg:pypi/torch@1.0.1", True)])
    b = side("h/r:b", findings=[("PYSEC-2", "CRITICAL", "pkg:pypi/numpy@2.1.0", False)])
    sec = compare(a, b)["security"]
    assert (sec["fixed_in_b"], sec["new_in_b"], sec["new_unaccepted_high"]) == (["PYSEC-1"], ["PYSEC-2"], ["PYSEC-2"])
    assert sec["acceptances_removed"] == ["PYSEC-1"]
    assert any("PYSEC-2" in r for r in compare(a, b)["regressions"])


def test_an_unverified_side_is_named_and_its_figures_are_never_shown_as_verified():
    b = Side("h/r:b", "sha256:" + "c" * 64, dict(LAYER), None, "h/r:b: no signed statements are attached")
    record = compare(side(), b)
    assert record["b"]["verified"] is False and record["regressions"] == [f"B does not verify: {b.why}"]
    assert record["speed"]["ratio"] is None and record["proof"]["b"]["result"] is None
    text = "\n".join(screen(record))
    assert "B NOT verified" in text and "B unverified" in text


def test_cost_is_the_layers_b_adds_and_a_equals_a_says_no_differences():
    b = side("h/r:b", layers={**LAYER, "sha256:" + "3" * 64: 5_000_000})
    cost = compare(side(), b)["cost"]
    assert cost["layers_shared"] == 2 and cost["pull_for_b_bytes"] == 5_000_000
    same = compare(side(), side())
    assert same["same_image"] and screen(same)[-1] == "no differences: the same image (one digest)"
    assert markdown(same).splitlines()[0] == "| | A | B |"


def test_two_signed_images_are_compared_from_statements_and_manifests_without_a_layer_blob(tmp_path):
    """The registry records every request: diff reads manifests, configs and statements, never a layer."""
    server = Server()
    try:
        private, public, _ = attest.keygen(tmp_path / "k")
        digests, layers = [], []
        for name, numpy in (("a", "2.1.0"), ("b", "2.2.0")):
            layer = server.blob(f"layer-{name}".encode() * 1000)
            config = server.blob(json.dumps({"config": {"Labels": {}}, "n": name}).encode())
            body = {"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST, "config": {"digest": config, "size": 1},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": 4000}]}  # fmt: skip
            digest, _ = server.manifest(body, name)
            folder = tmp_path / name
            run_folder(folder, ref=f"{server.host}/{REPO}", digest=digest, image_id=config, tags=(name,),
                       record=validation(), components=("pkg:pypi/torch@1.0.1", f"pkg:pypi/numpy@{numpy}"))  # fmt: skip
            stmts = image_statements(signable(folder), Subject(f"{server.host}/{REPO}", digest))
            signed = attest.sign(attest.KeySource(private), stmts)
            kinds = [(str(statements.kind_of(s["predicateType"])), e) for s, e in zip(stmts, signed.envelopes, strict=True)]
            list_referrers(server, digest, artifacts(server, digest, kinds, "x"))
            digests.append(digest)
            layers.append(layer)
        server.routes["/v2/"] = (200, {}, b"{}")
        argv = [
            sys.executable,
            "build.py",
            "diff",
            f"{server.host}/{REPO}:a",
            f"{server.host}/{REPO}:b",
            "--key",
            str(public),
            "--json",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        record = json.loads(done.stdout)
        assert (
            record["packages"]["changed"] == ["pypi/numpy 2.1.0 -> 2.2.0"] and record["a"]["verified"] and record["b"]["verified"]
        )
        assert record["cost"]["pull_for_b_bytes"] == 4000 and record["speed"]["ratio"] == 1.0
        read = [path for method, path, _ in server.seen if method == "GET"]
        assert not [p for p in read if any(layer in p for layer in layers)], read  # no layer blob read
        assert any("/referrers/" in p or "sha256-" in p for p in read), read  # it did read the statements
    finally:
        server.shutdown()
