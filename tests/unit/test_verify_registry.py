"""What `verify` does with a registry that answers badly or maliciously: a one-line refusal within its
deadline, never a traceback, never VERIFIED, never a credential sent where it should not go. The
registry is a real HTTP server on 127.0.0.1 serving crafted answers, with the OCI referrers API that
the local docker-registry lacks (tests/image/test_signed_proof.py covers a real registry)."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from pipeline import attest, push, registry, statements, verify
from pipeline.errors import NotVerified, RegistryDataRefused, RegistryUnreachable, UsageError
from pipeline.referrers import ENVELOPE_MEDIA_TYPE, PREDICATE_ANNOTATION
from pipeline.signing import image_statements
from pipeline.statements import Subject
from tests.crafted_registry import REPO, Server, artifacts, drip, list_referrers
from tests.records import run_folder, signable, validation
from tests.signer_clock import signer_clock

pytestmark = pytest.mark.unit

Answer = tuple[int, dict, bytes]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    private, public, _ = attest.keygen(tmp_path_factory.mktemp("keys") / "k")
    return attest.KeySource(private), public


def image(server: Server, tag: str = "2.9-cu128") -> tuple[str, str]:
    """A pushed image: its digest and config digest."""
    config = server.blob(json.dumps({"config": {"Labels": {}}}).encode())
    digest, _ = server.manifest(
        {"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST, "config": {"digest": config}, "layers": []}, tag
    )
    return digest, config


def envelopes(keys, tmp_path: Path, digest: str, config: str, days_ago: int, gpu: bool) -> tuple[list[tuple[str, bytes]], str]:
    """One run's six statements about the image, signed by the signer with its clock `days_ago` behind:
    ((kind, envelope) each, the run id the signer stamped)."""
    folder = tmp_path / f"run-{days_ago}-{gpu}"
    run_folder(folder, ref=f"h/{REPO}", digest=digest, image_id=config, record=validation(gpu=gpu))
    stmts = image_statements(signable(folder), Subject(f"h/{REPO}", digest))
    with signer_clock(f"-{days_ago}d"):
        signed = attest.sign(keys[0], stmts)
    return [(str(statements.kind_of(s["predicateType"])), e) for s, e in zip(stmts, signed.envelopes, strict=True)], signed.run


# --------------------------------------------------------------------------- the order is the signed one


def test_the_newest_signed_run_decides_not_the_registrys_annotations(server, keys, tmp_path):
    """An old CPU-only (WARNED) run wrapped in artifacts dated 9999 against a newer PASSED one dated 2000:
    the signed times decide, so the GPU proof stands (it lost to the annotations before)."""
    digest, config = image(server)
    old_signed, _ = envelopes(keys, tmp_path, digest, config, 30, gpu=False)
    new_signed, new_run = envelopes(keys, tmp_path, digest, config, 1, gpu=True)
    old = artifacts(server, digest, old_signed, "9999-12-31T00:00:00Z")
    new = artifacts(server, digest, new_signed, "2000-01-01T00:00:00Z")
    list_referrers(server, digest, old + new)
    record = verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1], verify.Policy(require_gpu=True))
    assert record["images"][0]["run"] == new_run and record["images"][0]["test_result"]["result"] == "PASSED"


def test_a_dropped_statement_of_the_newest_run_is_refused_not_filled_in_from_an_older_run(server, keys, tmp_path):
    digest, config = image(server)
    old_signed, old_run = envelopes(keys, tmp_path, digest, config, 30, gpu=False)
    old = artifacts(server, digest, old_signed, "x")
    new = artifacts(server, digest, envelopes(keys, tmp_path, digest, config, 1, gpu=True)[0], "x")
    dropped = [d for d in new if d["annotations"][PREDICATE_ANNOTATION] != statements.PREDICATES["test-result"]]
    list_referrers(server, digest, old + dropped)
    with pytest.raises(NotVerified, match=f"statements of different runs are mixed.*test-result from run {old_run}"):
        verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1])


def test_a_junk_envelope_naming_the_key_beside_a_whole_run_does_not_deny_the_image(server, keys, tmp_path):
    """Anyone can attach an envelope that names the project key's id: it is set aside, not fatal; a run it
    would complete stays incomplete and is refused with both reasons."""
    digest, config = image(server)
    signed, run = envelopes(keys, tmp_path, digest, config, 1, gpu=True)
    keyid = attest.load_public_key(keys[1]).keyid
    junk = json.dumps(
        {"payloadType": statements.PAYLOAD_TYPE, "payload": "e30=", "signatures": [{"keyid": keyid, "sig": "AAAA"}]}
    )
    whole = artifacts(server, digest, [*signed, ("test-result", junk.encode())], "x")
    list_referrers(server, digest, whole)
    assert verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1])["images"][0]["run"] == run
    list_referrers(server, digest, [d for d in whole if d["annotations"][PREDICATE_ANNOTATION] != statements.PREDICATES["vex"]])
    with pytest.raises(NotVerified, match="incomplete: no signed vex statement.*1 naming the key did not verify"):
        verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1])


def test_an_incomplete_run_is_refused(server, keys, tmp_path):
    digest, config = image(server)
    run = artifacts(server, digest, envelopes(keys, tmp_path, digest, config, 1, gpu=True)[0], "x")
    list_referrers(server, digest, [d for d in run if d["annotations"][PREDICATE_ANNOTATION] != statements.PREDICATES["vex"]])
    with pytest.raises(NotVerified, match="incomplete: no signed vex statement"):
        verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1])


# --------------------------------------------------------------------------- bounded reading, one deadline


# build.py run as a user runs it, then its peak resident memory since exec (VmHWM; getrusage would count
# the forked pytest's pages too) written where the test reads it.
PEAK_PROBE = """
import runpy, sys
sys.argv = ["build.py", *sys.argv[2:]]
try:
    runpy.run_path("build.py", run_name="__main__")
finally:
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    open(PEAK_FILE, "w").write(hwm.split()[1])
"""


def verify_cli(server: Server, *extra: str, key: Path) -> tuple[subprocess.CompletedProcess, float, int]:
    """`build.py verify` in its own process: (what it did, seconds, its peak memory in MB)."""
    peak = key.parent / f"peak-{time.monotonic_ns()}"
    probe = PEAK_PROBE.replace("PEAK_FILE", repr(str(peak)))
    argv = [sys.executable, "-c", probe, "-", "verify", f"{server.host}/{REPO}:2.9-cu128", "--key", str(key), *extra]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=attest.REPO_ROOT, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start, int(peak.read_text()) // 1024


def one_line(done: subprocess.CompletedProcess, code: int, phrase: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1 and phrase in lines[0], (done.returncode, done.stderr[-2000:])


def test_a_referrers_page_that_links_to_itself_is_refused_at_once(server, keys):
    digest, _ = image(server)
    list_referrers(server, digest, [], Link=f'</v2/{REPO}/referrers/{digest}>; rel="next"')
    done, seconds, _ = verify_cli(server, "--timeout", "10", key=keys[1])
    one_line(done, 1, "registry data refused: the referrers pages of")
    assert seconds < 10


def test_a_100_mb_page_is_refused_and_verify_stays_small(server, keys):
    digest, _ = image(server)
    page = b'{"manifests": [' + b" " * (100 * 2**20) + b"]}"
    server.put(f"referrers/{digest}", gzip.compress(page, 1), registry.OCI_INDEX, **{"Content-Encoding": "gzip"})
    done, seconds, peak_mb = verify_cli(server, key=keys[1])
    one_line(done, 1, "registry data refused: the referrers of")
    assert "Content-Encoding 'gzip'" in done.stderr and seconds < 30 and peak_mb < 200, (seconds, peak_mb)
    print(f"verify against a 100 MB page: {seconds:.2f} s, peak {peak_mb} MB")


@pytest.mark.parametrize(
    ("envelope", "said"),
    [
        (b'{"payload": "", "signatures": [], "junk": [' + b"[]," * (16 * 2**20 // 3 - 20) + b"[]]}", "JSON values"),
        (b'{"payload": "", "signatures": [], "junk": "' + b"a" * (16 * 2**20 - 60) + b'"}', "over 128 MiB"),
    ],
    ids=["nested-lists", "long-strings"],
)
def test_200_envelopes_of_16_mib_are_refused_within_the_deadline_and_250_mb(server, keys, envelope, said):
    """The attack that took 2.8 GB (and past 120 s against a registry that answers /v2/): 200 referrers of
    16 MiB envelopes. Nested lists are refused by their value count before parsing; long strings by the
    command's byte budget; envelopes are read one at a time."""
    digest, _ = image(server)
    (one,) = artifacts(server, digest, [("test-result", envelope)], "x")
    list_referrers(server, digest, [one] * 200)
    server.routes["/v2/"] = (200, {}, b"{}")
    done, seconds, peak_mb = verify_cli(server, "--timeout", "30", key=keys[1])
    one_line(done, 1, "registry data refused")
    assert said in done.stderr and seconds < 30 and peak_mb < 250, (seconds, peak_mb, done.stderr)
    print(f"200 envelopes of 16 MiB ({said}): {seconds:.1f} s, peak {peak_mb} MB")


def test_ten_thousand_referrers_are_refused(server, keys):
    digest, _ = image(server)
    entry = {"mediaType": registry.OCI_MANIFEST, "digest": "sha256:" + "f" * 64, "size": 1, "artifactType": ENVELOPE_MEDIA_TYPE}
    pages = [[entry] * 1000 for _ in range(10)]
    for i, page in enumerate(pages):  # ten pages of a thousand: over the cap before the page cap
        path = f"referrers/{digest}" + (f"?page={i}" if i else "")
        following = {"Link": f'</v2/{REPO}/referrers/{digest}?page={i + 1}>; rel="next"'} if i < 9 else {}
        body = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": page}).encode()
        server.routes[f"/v2/{REPO}/{path}"] = (200, {"Content-Type": registry.OCI_INDEX, **following}, body)
    done, seconds, _ = verify_cli(server, key=keys[1])
    one_line(done, 1, f"has more than {registry.MAX_REFERRERS} referrers")
    assert seconds < 30


def test_a_ten_thousand_deep_envelope_is_refused_not_a_traceback(server, keys, tmp_path):
    digest, config = image(server)
    deep = b'{"payload": ' + b"[" * 10_000 + b"]" * 10_000 + b', "signatures": []}'
    artifacts_ = artifacts(server, digest, [("test-result", deep)], "x")
    list_referrers(server, digest, artifacts_)
    done, seconds, _ = verify_cli(server, key=keys[1])
    one_line(done, 1, "registry data refused")
    assert "nested deeper than 64 levels" in done.stderr and seconds < 30


def test_a_registry_that_drips_its_answer_is_cut_off_at_the_deadline(server, keys):
    digest, _ = image(server)
    server.routes[f"/v2/{REPO}/referrers/{digest}"] = drip(registry.OCI_INDEX, b" ", every=0.5, count=1000)
    done, seconds, _ = verify_cli(server, "--timeout", "4", key=keys[1])
    one_line(done, 6, "did not finish answering within 4 s")
    assert seconds < 4 + 5, seconds  # the deadline, plus the interpreter's start


# --------------------------------------------------------------------------- malformed answers


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"Content-Type": "text/html"}, b"<html>login</html>"),
        (200, {"Content-Type": registry.OCI_MANIFEST}, b"[1, 2]"),
        (200, {"Content-Type": registry.OCI_MANIFEST}, b'{"config": "a string"}'),
    ],
    ids=["html", "a-list", "config-a-string"],
)
def test_a_malformed_manifest_is_one_line_not_verified(server, keys, answer):
    server.routes[f"/v2/{REPO}/manifests/tag"] = answer
    with pytest.raises(NotVerified) as err:
        verify.verify(f"{server.host}/{REPO}:tag", keys[1])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "index",
    [b"not json", b'{"manifests": "x"}', b'{"manifests": [{"artifactType": "x"}]}', b'{"manifests": ["x"]}'],
    ids=["not-json", "manifests-a-string", "no-digest", "a-string-entry"],
)
def test_a_malformed_referrers_tag_is_one_line_registry_data_refused(server, keys, index):
    digest, _ = image(server, "tag")
    server.put(f"manifests/{registry.fallback_tag(digest)}", index, registry.OCI_INDEX)
    with pytest.raises(RegistryDataRefused) as err:
        verify.verify(f"{server.host}/{REPO}:tag", keys[1])
    assert "\n" not in str(err.value)


def test_a_referrers_api_that_refuses_is_not_read_as_no_statements(server, keys):
    """A 401 or 5xx from the referrers API says the registry refused, not "pushed unsigned"."""
    digest, _ = image(server, "tag")
    server.put(f"referrers/{digest}", b"busy", status=503)
    with pytest.raises(RegistryUnreachable, match="answered 503"):
        verify.verify(f"{server.host}/{REPO}:tag", keys[1])


def test_an_oversized_manifest_is_refused(server, keys):
    server.put("manifests/tag", b" " * (registry.MAX_MANIFEST + 1))
    with pytest.raises(RegistryDataRefused, match="larger than 4 MiB"):
        verify.verify(f"{server.host}/{REPO}:tag", keys[1])


# --------------------------------------------------------------------------- credentials stay with their host


@pytest.fixture
def login(tmp_path, monkeypatch):
    """A `docker login` for a registry host, in a DOCKER_CONFIG of the test's own."""

    def for_host(host: str) -> str:
        secret = base64.b64encode(b"user:s3cret-password").decode()
        (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": secret}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
        return secret

    return for_host


def authorizations(server: Server) -> list[str]:
    return [h.get("Authorization", "") for _, _, h in server.seen if h.get("Authorization")]


def test_the_registrys_own_401_gets_the_login_at_the_token_service_it_names(server, login):
    """Docker Hub's way: registry-1 answers 401 naming auth.docker.io; the login goes to that realm."""
    secret = login(server.host)
    token = Server("127.0.0.2")
    try:
        token.routes["/token"] = (200, {"Content-Type": "application/json"}, b'{"token": "t0ken"}')
        challenge = f'Bearer realm="http://{token.host}/token",service="test"'
        server.routes[f"/v2/{REPO}/manifests/tag"] = lambda h: (
            _unauthorized(h, challenge) if "Authorization" not in h.headers else _json(h, {"config": {}})
        )
        client = registry.Registry(registry.parse_ref(f"{server.host}/{REPO}:tag"))
        assert client.manifest("tag") is not None
        assert authorizations(token) == [f"Basic {secret}"] and authorizations(server) == ["Bearer t0ken"]
    finally:
        token.shutdown()


def test_a_redirect_to_another_host_never_carries_the_login(server, login, keys):
    """The registry redirects to a second loopback address, which asks for a login: none is given."""
    login(server.host)
    other = Server("127.0.0.2")
    try:
        other.routes["/token"] = (200, {"Content-Type": "application/json"}, b'{"token": "stolen"}')
        other.routes[f"/v2/{REPO}/manifests/tag"] = lambda h: _unauthorized(h, f'Bearer realm="http://{other.host}/token"')
        server.put("manifests/tag", b"", status=307, Location=f"http://{other.host}/v2/{REPO}/manifests/tag")
        with pytest.raises(RegistryUnreachable, match=f"{other.host}, not the registry, asked for a login; none was sent"):
            verify.verify(f"{server.host}/{REPO}:tag", keys[1])
    finally:
        other.shutdown()
    assert authorizations(other) == [] and not any(path == "/token" for _, path, _ in other.seen)


def test_a_next_link_to_another_host_is_refused_and_never_followed(server, keys):
    digest, _ = image(server)
    other = Server("127.0.0.2")
    try:
        list_referrers(server, digest, [], Link=f'<http://{other.host}/v2/{REPO}/referrers/{digest}>; rel="next"')
        with pytest.raises(RegistryDataRefused, match=f"links to {other.host}, another host"):
            verify.verify(f"{server.host}/{REPO}:2.9-cu128", keys[1])
        assert other.seen == []
    finally:
        other.shutdown()


def _unauthorized(handler, challenge: str):
    handler.send_response(401)
    handler.send_header("WWW-Authenticate", challenge)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def _json(handler, body: dict):
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", registry.OCI_MANIFEST)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


# --------------------------------------------------------------------------- plain HTTP: one rule, every path


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost:5000", True),
        ("127.0.0.1:5000", True),
        ("[::1]:5000", True),
        ("127.evil.example", False),
        ("127.1:5000", False),
        ("ghcr.io", False),
    ],
)
def test_only_a_registry_written_as_loopback_is_spoken_to_without_tls(host, loopback):
    ref = registry.ImageRef(host, "r", "t")
    assert ref.loopback is loopback and ref.base.startswith("http://" if loopback else "https://")
    plain = f"{host}/r"
    assert (push._plain_http(plain, "--dest-tls-verify=false") == ["--dest-tls-verify=false"]) is loopback  # skopeo
    assert (push._plain_http(plain, "--insecure") == ["--insecure"]) is loopback  # docker manifest


def test_a_push_to_a_name_that_resolves_to_loopback_or_that_docker_calls_insecure_is_refused():
    assert "resolves to 127.0.0.1" in registry.plain_http_refusal("127.1:5000")
    assert registry.plain_http_refusal("127.0.0.1:5000") is None and registry.plain_http_refusal("localhost:5000") is None
    assert "lists registry.lan:5000 as an insecure registry" in registry.plain_http_refusal(
        "registry.lan:5000", {"registry.lan:5000": False}
    )
    assert registry.plain_http_refusal("unresolvable.invalid:5000", {}) is None  # the push fails on its own
    assert "resolves into 192.0.2.0/24, which the Docker daemon lists as insecure" in registry.plain_http_refusal(
        "192.0.2.7:5000", {"192.0.2.0/24": False}
    )
    assert registry.plain_http_refusal("192.0.2.7:5000", {"198.51.100.0/24": False}) is None


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1:5055@192.0.2.2/x:y", "user:pw@registry.example/x", "registry.example/x#y", "registry.example/x?y=1",
     "registry.example\\x/y", "registry.example/x y", "registry.example/%78"],
)  # fmt: skip
def test_a_reference_outside_the_distribution_grammar_is_refused_before_any_request(text):
    """127.0.0.1:5055@192.0.2.2 was read as loopback (plain HTTP, no TLS) while requests went to 192.0.2.2."""
    with pytest.raises(UsageError, match="not an image reference"):
        registry.parse_ref(text)


@pytest.mark.parametrize("host", ["127.0.0.1:5055@192.0.2.2", "user:pw@registry.example", "registry.example/x"])
def test_a_registry_host_outside_the_grammar_is_refused_before_the_build(host):
    with pytest.raises(UsageError):
        registry.plain_http_refusal(host)


def test_a_pull_token_is_asked_again_with_the_push_scope_for_a_write(server):
    """A registry with a token service: reading gets a pull token; the first write asks again for pull,push."""
    scopes: list[str] = []

    def token(handler):
        scopes.append(parse_qs(urlparse(handler.path).query)["scope"][0])
        _json(handler, {"token": f"t{len(scopes)}"})

    def guarded(handler):
        wanted = "Bearer t2" if handler.command == "PUT" else "Bearer t1"
        if handler.headers.get("Authorization") not in (wanted, "Bearer t2"):
            return _unauthorized(handler, f'Bearer realm="http://{server.host}/token",service="s"')
        handler.send_response(201)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server.routes["/token"] = token
    server.routes[f"/v2/{REPO}/manifests/t"] = guarded
    client = registry.Registry(registry.parse_ref(f"{server.host}/{REPO}:t"))
    client.request("GET", "manifests/t").close()
    client.put_manifest("t", b"{}", registry.OCI_MANIFEST)
    assert scopes == [f"repository:{REPO}:pull", f"repository:{REPO}:pull,push"]


def test_a_compressed_answer_is_refused(server):
    digest, _ = image(server)
    server.put("manifests/gz", gzip.compress(b"{}"), registry.OCI_MANIFEST, **{"Content-Encoding": "gzip"})
    with pytest.raises(RegistryDataRefused, match="Content-Encoding 'gzip'"):
        registry.Registry(registry.parse_ref(f"{server.host}/{REPO}:gz")).manifest("gz")


@pytest.mark.parametrize("config", [{"config": {"Labels": ["io.proven-torch.validation-sha256"]}}, {"config": "labels"}, {}])
def test_a_config_whose_labels_are_not_an_object_stamps_no_validation_hash(server, config):
    """`build.py sign` reads the stamped validation hash from the registry's config: labels of the wrong
    shape are no hash (sign then refuses: bind), never a traceback."""
    from pipeline.signing import registered

    blob = server.blob(json.dumps(config).encode())
    digest, _ = server.manifest(
        {"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST, "config": {"digest": blob}, "layers": []}
    )
    found = registered(registry.Registry(registry.parse_ref(f"{server.host}/{REPO}@{digest}")), digest)
    assert (found.config, found.validation_sha256) == (blob, None)


def test_an_index_is_read_by_one_rule_attestations_left_out_a_child_without_a_platform_kept():
    """sign, verify and diff list an index's images alike: BuildKit's attestation manifests are not images; a
    child that names no platform is one (verify must find it vouched for, sign must have it prepared)."""
    d = {c: "sha256:" + c * 64 for c in "abcd"}
    body = {
        "manifests": [
            {"digest": d["a"], "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": d["b"], "platform": {"os": "unknown", "architecture": "unknown"}},
            {"digest": d["c"]},
            {"digest": d["d"], "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    listed = registry.index_images(json.dumps(body).encode(), "an index")
    assert [(name, child["digest"]) for name, child in listed] == [
        ("linux/amd64", d["a"]),
        ("None/None", d["c"]),
        ("linux/amd64", d["d"]),
    ]
    with pytest.raises(RegistryDataRefused, match="does not list descriptors"):
        registry.index_images(json.dumps({"manifests": [{"digest": "sha256:short"}]}).encode(), "an index")


@pytest.mark.parametrize("location", [None, "http://elsewhere.example/v2/proven/blobs/uploads/1"])
def test_an_upload_the_registry_sends_nowhere_or_to_another_host_is_refused_in_one_line(server, location):
    """Attaching a signed statement uploads blobs: an upload answer without a Location, or one sending the
    bytes to another host, is refused (registry data refused), never a traceback, never sent."""
    server.put("blobs/uploads/", b"", status=202, **({"Location": location} if location else {}))
    client = registry.Registry(registry.parse_ref(f"{server.host}/{REPO}:x"))
    with pytest.raises(RegistryDataRefused, match="named no Location|another host"):
        client.upload(b"{}")
    assert not [seen for seen in server.seen if seen[0] == "PUT"]


def test_the_rollback_check_compares_a_tag_with_the_newer_builds_of_its_own_line_flavor_and_architecture():
    """verify's rollback check reads the registry's tag list: the newer immutable tags of the same torch build,
    flavor and architecture are the ones compared, newest first; a flavor's tags are not its base's."""
    stem = "0.1.0-cu100-py3.0"
    tags = [
        f"{stem}-20261201-aaaaaaa",
        f"{stem}-20261203-ccccccc",
        f"{stem}-20261205-bbbbbbb-dirty",
        f"{stem}-20261205-ddddddd-rlhf",
        f"{stem}-20261207-eeeeeee-rlhf-arm64",
        f"{stem}-20261209-fffffff-arm64",
        f"{stem}-20261130-0000000-rlhf",
        "0.1-cu100",
        "latest",
    ]
    assert verify.newer_builds(f"{stem}-20261201-aaaaaaa", tags) == [f"{stem}-20261205-bbbbbbb-dirty", f"{stem}-20261203-ccccccc"]
    assert verify.newer_builds(f"{stem}-20261201-1111111-rlhf", tags) == [f"{stem}-20261205-ddddddd-rlhf"]
    assert verify.newer_builds(f"{stem}-20261201-1111111-rlhf-arm64", tags) == [f"{stem}-20261207-eeeeeee-rlhf-arm64"]
    assert verify.newer_builds(f"{stem}-20261201-1111111-arm64", tags) == [f"{stem}-20261209-fffffff-arm64"]
    assert verify.newer_builds("0.1-cu100", tags) == []


def _tag_list(tags: list[str], honour_last: bool = True, honour_n: bool = True, per_page: int = 10**9, zot: bool = False):
    """A tag list API over `tags`: in lexical order, `n` (at most `per_page`) per page from after `last`, with a
    Link to the next page while more remain, as the spec has it; or, like Debian's docker-registry, every tag in
    one page in the order given, no Link. `zot`: a 404 for a `last` that is no tag, as zot answers."""

    def answer(handler):
        query = parse_qs(urlparse(handler.path).query)
        after = query.get("last", [""])[0] if honour_last else ""
        if zot and after and after not in tags:
            return _unauthorized_like(handler, 404)
        ordered = [t for t in sorted(tags) if t > after]
        page = ordered[: min(int(query["n"][0]), per_page)] if honour_n else tags
        data = json.dumps({"name": REPO, "tags": page}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if honour_n and len(page) < len(ordered):
            handler.send_header("Link", f'</v2/{REPO}/tags/list?n={query["n"][0]}&last={page[-1]}>; rel="next"')
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def _unauthorized_like(handler, status: int):
    handler.send_response(status)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def listing_requests(server: Server) -> list[str]:
    return [path for method, path, _ in server.seen if method == "GET" and "/tags/list" in path]


STEM = "0.1.0-cu100-py3.0"
OWN, NEWER = f"{STEM}-20261201-aaaaaaa", f"{STEM}-20261205-bbbbbbb"
NIGHTLIES = [f"0.0.{i:04d}-nightly" for i in range(3000)]  # a year of another repository's tags, sorting before the line


@pytest.fixture
def tags_of(server):
    """tags_of(handler) -> the line's newer builds verify finds behind that tag list API."""
    client = registry.Registry(registry.parse_ref(f"{server.host}/{REPO}:x"))

    def found(answer) -> list[str]:
        server.routes[f"/v2/{REPO}/tags/list"] = answer
        server.seen.clear()
        return verify.newer_builds(OWN, verify.line_tags(client, OWN))

    return found


def test_the_newer_build_of_a_line_is_found_among_thousands_of_tags_that_sort_before_it(server, tags_of):
    """A repository of 3,000 other tags: the list read from the line's own tag on (the CI registry crossed
    1,000 tags and its first 1,000 hid the newer build); sent all at once, unordered, all of it read; from
    zot, which refuses a `last` that is no tag, from the first tag on, page by page."""
    assert tags_of(_tag_list(NIGHTLIES + [OWN, NEWER])) == [NEWER]
    assert listing_requests(server) == [f"/v2/{REPO}/tags/list?n={registry.MAX_TAGS}&last={STEM}-20261201"]
    assert tags_of(_tag_list(NIGHTLIES[:2000] + [NEWER] + NIGHTLIES[2000:] + [OWN], honour_n=False)) == [NEWER]
    assert len(listing_requests(server)) == 1
    assert tags_of(_tag_list(NIGHTLIES + [OWN, NEWER], zot=True)) == [NEWER]
    assert len(listing_requests(server)) == 1 + 4  # the refused `last`, then 1,000 a page from the first


def test_a_registry_that_pages_below_n_is_followed_by_its_links_to_the_newest_build(server, tags_of):
    """distribution's `maxtags`: pages of 100 whatever `n` asks, the Link says more follow."""
    builds = [f"{STEM}-2027{m:02d}{d:02d}-aaaaaaa" for m in range(1, 13) for d in range(1, 29)]  # 336 newer
    assert tags_of(_tag_list([*NIGHTLIES, OWN, *builds], per_page=100))[0] == builds[-1]
    assert len(listing_requests(server)) == 4


def test_a_tag_list_that_ignores_last_or_never_ends_is_refused_not_read_in_part(server, tags_of):
    """Either would leave the newest builds unread: verify refuses in one line, after a bounded number of pages."""
    paged_from_the_start = _tag_list(["0.0-nightly"] + [f"{STEM}-2027{i:04d}-aaaaaaa" for i in range(3000)], honour_last=False)
    with pytest.raises(NotVerified, match="ignores `last`"):
        tags_of(paged_from_the_start)
    assert len(listing_requests(server)) == 1
    with pytest.raises(NotVerified, match=f"more than {registry.MAX_TAG_PAGES * registry.MAX_TAGS:,} tags"):
        tags_of(_tag_list([f"{STEM}-3{i:07d}-aaaaaaa" for i in range(registry.MAX_TAG_PAGES * registry.MAX_TAGS + 1)]))
    assert len(listing_requests(server)) == registry.MAX_TAG_PAGES
    assert tags_of(_tag_list(["0.0-nightly", OWN, NEWER], honour_last=False)) == [NEWER]  # one page: all there is
