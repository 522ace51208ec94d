"""One tag, two architectures, against the real registry on 127.0.0.1: the index build.py writes
over per-architecture images. The images here are tiny (FROM scratch, one file: BuildKit makes an
arm64 one without emulation), so CI proves the index logic in seconds; the real arm64 image,
built and proven under qemu, is `make arm64` (tests/image/test_arm64.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipeline import push
from pipeline.errors import PushFailed
from pipeline.variants import AMD64, ARM64
from tests.image.conftest import REGISTRY, manifest_inspect, opened
from tests.image.tiny_images import build_tiny

pytestmark = pytest.mark.image

REF = f"{REGISTRY}/proven-torch-test-index"  # scripts/ci-cleanup.sh removes proven-torch-test* images


@pytest.fixture(scope="module")
def children(docker, tmp_path_factory):
    """Both architectures' images, tagged per architecture and pushed by the pipeline's own push."""
    tmp_path = tmp_path_factory.mktemp("index")
    out = {}
    for platform in (AMD64, ARM64):
        image_id = build_tiny(tmp_path, platform)
        tag = push.arch_tag("line", platform)
        push.tag_image(docker, image_id, REF, [tag])
        digest = push.push_tag(docker, image_id, REF, tag)
        out[platform] = push.Child(platform, REF, tag, digest, image_id)
    yield out
    for child in out.values():
        subprocess.run(["docker", "rmi", "-f", f"{REF}:{child.tag}", child.image_id], capture_output=True, check=False)


def _inspect(ref: str) -> dict:
    done = manifest_inspect(ref)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_index_lists_each_platform_with_its_validated_childs_digest(children):
    ordered = push.plan_index((AMD64, ARM64), children)
    digest = push.push_index(REF, "line", ordered)
    listed = _inspect(f"{REF}:line")
    assert {(m["platform"]["os"], m["platform"]["architecture"], m["digest"]) for m in listed["manifests"]} == {
        ("linux", "amd64", children[AMD64].digest),
        ("linux", "arm64", children[ARM64].digest),
    }
    assert digest.startswith("sha256:") and _inspect(f"{REF}@{digest}") == listed


def test_pulling_the_tag_for_arm64_yields_the_arm64_image(children, docker):
    push.push_index(REF, "line", push.plan_index((AMD64, ARM64), children))
    for child in children.values():  # the pull below must come from the registry
        subprocess.run(["docker", "rmi", "-f", f"{REF}:{child.tag}", child.image_id], capture_output=True, check=False)
    pulled = docker.images.pull(REF, tag="line", platform=ARM64)
    assert pulled.id == children[ARM64].image_id and pulled.attrs["Architecture"] == "arm64"
    docker.images.remove(f"{REF}:line", force=True)
    assert docker.images.pull(REF, tag="line", platform=AMD64).id == children[AMD64].image_id


def test_a_child_that_is_not_the_validated_image_is_refused(children):
    """The registry holds arm64's image under arm64's digest; claiming it is amd64's validated image fails."""
    wrong = push.Child(AMD64, REF, children[ARM64].tag, children[ARM64].digest, children[AMD64].image_id)
    with pytest.raises(PushFailed, match="not the validated"):
        push.push_index(REF, "wrong", [wrong, children[ARM64]])
    gone = manifest_inspect(f"{REF}:wrong")
    assert gone.returncode != 0, "a refused index was pushed anyway"


def test_a_local_build_gives_the_hosts_image_the_lines_plain_tags(docker, matrix, tmp_path):
    """`build.py --cuda C` of a multi-arch line without --push ends with `docker run IMAGE:LINE` working on this
    host: its validated image gets the plain tags too; a pushed build leaves the plain tags to the index."""
    from pipeline.line import tag_host_image
    from pipeline.request import host_platform
    from pipeline.target import Tagged, Target

    line = next(v for v in matrix.variants if v.multi_arch)
    image_id = build_tiny(tmp_path, host_platform())
    ref = "proven-torch-test-local"
    target = Target(variant=line, run_dir=tmp_path, ref=ref, date="20000101", created="t", revision="t", platform=AMD64)
    plain = [f"{line.torch}-test", line.name]
    own = [target.own_tag(t) for t in plain]
    push.tag_image(docker, image_id, ref, own)
    tagged = Tagged(validated_id=image_id, stamped_id=image_id, tags=own, validation=None, line_tags=plain)  # type: ignore[arg-type]
    try:
        assert tag_host_image(docker, {AMD64: (target, tagged)}, line, pushed=True) == []
        mine = [t for t in docker.images.get(image_id).tags if t.startswith(f"{ref}:")]  # the tiny image may be shared
        assert mine and all(t.endswith("-amd64") for t in mine), mine
        refs = tag_host_image(docker, {AMD64: (target, tagged)}, line, pushed=False)
        assert refs == [f"{ref}:{t}" for t in plain]
        assert all(docker.images.get(r).id == image_id for r in refs)
    finally:
        refs = [t for t in docker.images.get(image_id).tags if t.startswith(f"{ref}:")]
        subprocess.run(["docker", "rmi", *refs], capture_output=True, check=False)


def test_a_signed_index_names_the_facts_the_push_wrote_not_facts_json_edited_since(children, matrix, sign_keys, tmp_path):
    """publish_index signs the index's provenance from the run facts each child's push wrote (Pushed.facts): a
    facts.json edited in the report folder after the push (another commit) is not what it signs."""
    from pipeline import attest, statements
    from pipeline.publish import Pushed, publish_index
    from pipeline.records import Facts
    from pipeline.request import Request
    from pipeline.target import Tagged, Target, Validation
    from pipeline.variants import arch

    line = next(v for v in matrix.variants if v.multi_arch)
    results = {}
    for platform, child in children.items():
        target = Target(
            variant=line,
            run_dir=tmp_path / arch(platform),
            ref=REF,
            date="20000101",
            created="t",
            revision="t",
            platform=platform,
        )
        target.run_dir.mkdir()
        facts = Facts(
            command=("pytest",), commit="1" * 40, started="2026-12-06T00:00:00Z", finished="2026-12-06T00:05:00Z",
            invocation="test", tools={}, dependencies=(), line=line.name, flavor=None, platform=platform, ref=REF,
            tags=(child.tag,), stamped_image_id=child.image_id,
        )  # fmt: skip
        (target.run_dir / "facts.json").write_text(json.dumps({**facts.as_dict(), "commit": "f" * 40}))  # edited since
        tagged = Tagged(child.image_id, child.image_id, [child.tag], Validation(ok=True, platform=platform), line_tags=["line"])
        results[platform] = (
            target,
            tagged,
            Pushed(refs={f"{REF}:{child.tag}": child.digest}, sbom={}, compressed_bytes={}, facts=facts),
        )
    key = attest.KeySource(sign_keys["private"], sign_keys["passphrase"])
    digest = publish_index(results, Request(matrix=matrix, variant=line, push=True, hold_moving_tags=True, sign_key=key))[
        f"{REF}:line"
    ]
    # by this session's key only: the tiny children, so the index, are the same digests run after run, and the
    # registry keeps what earlier runs signed (another key) about them
    signed = opened(digest, REF, sign_keys["public"])
    provenance = [s for s in signed if s["predicateType"] == statements.PREDICATES["provenance"]]
    assert len(provenance) == 1 and "1" * 40 in json.dumps(provenance) and "f" * 40 not in json.dumps(provenance)
