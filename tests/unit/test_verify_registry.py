"""What `verify` does with a registry that answers badly or maliciously: a one-line error, never a
traceback, and never VERIFIED. The registry is a real HTTP server on 127.0.0.1 serving crafted
answers; tests/image/test_signed_proof.py covers a real registry's good answers and tampering."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline import referrers, signing, verify
from pipeline.errors import NotVerified, RegistryUnreachable

pytestmark = pytest.mark.unit


class Crafted(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict, bytes]] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        status, headers, body = self.routes.get(self.path.split("?")[0], (404, {}, b'{"errors":[]}'))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    """(host:port, routes): a server whose answers the test writes into routes."""
    routes: dict[str, tuple[int, dict, bytes]] = {}
    handler = type("Handler", (Crafted,), {"routes": routes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", routes
    server.shutdown()


@pytest.fixture(scope="module")
def public_key(tmp_path_factory):
    return signing.keygen(tmp_path_factory.mktemp("keys") / "k")[1]


def manifest(body: dict) -> tuple[bytes, str]:
    data = json.dumps(body).encode()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


IMAGE, IMAGE_DIGEST = manifest(
    {"schemaVersion": 2, "mediaType": referrers.OCI_MANIFEST, "config": {"digest": "sha256:" + "c" * 64}, "layers": []}
)


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"Content-Type": "text/html"}, b"<html>login</html>"),
        (200, {"Content-Type": referrers.OCI_MANIFEST}, b"[1, 2]"),
        (200, {"Content-Type": referrers.OCI_MANIFEST}, b'{"config": "a string"}'),
    ],
    ids=["html", "a-list", "config-a-string"],
)
def test_a_malformed_manifest_is_one_line_not_verified(registry, public_key, answer):
    host, routes = registry
    routes["/v2/proven/manifests/tag"] = answer
    with pytest.raises(NotVerified) as err:
        verify.verify(f"{host}/proven:tag", public_key)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "index",
    [b"not json", b'{"manifests": "x"}', b'{"manifests": [{"artifactType": "x"}]}', b'{"manifests": ["x"]}'],
    ids=["not-json", "manifests-a-string", "no-digest", "a-string-entry"],
)
def test_a_malformed_referrers_tag_is_one_line_not_verified(registry, public_key, index):
    host, routes = registry
    routes["/v2/proven/manifests/tag"] = (200, {"Content-Type": referrers.OCI_MANIFEST}, IMAGE)
    routes[f"/v2/proven/manifests/{referrers.fallback_tag(IMAGE_DIGEST)}"] = (200, {"Content-Type": referrers.OCI_INDEX}, index)
    with pytest.raises(NotVerified) as err:
        verify.verify(f"{host}/proven:tag", public_key)
    assert "\n" not in str(err.value)


def test_a_referrers_api_that_refuses_is_not_read_as_no_statements(registry, public_key):
    """A 401 or 5xx from the referrers API says the registry refused, not "pushed unsigned"."""
    host, routes = registry
    routes["/v2/proven/manifests/tag"] = (200, {"Content-Type": referrers.OCI_MANIFEST}, IMAGE)
    routes[f"/v2/proven/referrers/{IMAGE_DIGEST}"] = (503, {}, b"busy")
    with pytest.raises(RegistryUnreachable, match="answered 503"):
        verify.verify(f"{host}/proven:tag", public_key)


def test_an_oversized_manifest_is_refused(registry, public_key):
    host, routes = registry
    routes["/v2/proven/manifests/tag"] = (200, {}, b" " * (referrers.MAX_MANIFEST + 1))
    with pytest.raises(NotVerified, match="larger than 4 MiB"):
        verify.verify(f"{host}/proven:tag", public_key)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost:5000", True), ("127.0.0.1:5000", True), ("[::1]:5000", True), ("127.evil.example", False), ("ghcr.io", False)],
)
def test_only_this_machines_registry_is_spoken_to_without_tls(host, loopback):
    ref = referrers.ImageRef(host, "r", "t")
    assert ref.loopback is loopback and ref.base.startswith("http://" if loopback else "https://")


def test_an_accepted_advisory_past_its_expiry_is_caught():
    vulns = {"scanner": {"result": [{"id": "PYSEC-1", "annotations": [{"accepted": "why"}, {"expires": "2026-06-01"}]}]}}
    assert verify.lapsed(vulns, dt.date(2026, 12, 5)) == ["PYSEC-1 (accepted until 2026-06-01)"]
    assert verify.lapsed(vulns, dt.date(2026, 5, 1)) == []
