"""Signing again replaces what an earlier signing attached (pipeline/referrers.py's attach), against a small
registry on 127.0.0.1 that stores what is pushed: with the referrers API (the superseded artifacts deleted)
and without it (the tag schema's index rewritten, other tools' entries kept). tests/image/test_signed_proof.py
runs the same against a real registry."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline import referrers, registry

pytestmark = pytest.mark.unit

REPO = "proven"
KINDS = ("https://example/a", "https://example/b")


class Store(BaseHTTPRequestHandler):
    """Blobs and manifests kept in memory; `native`: the registry answers the referrers API itself."""

    server: StoringRegistry

    def reply(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):  # noqa: N802
        self.reply(200 if self.path.rsplit("/", 1)[1] in self.server.blobs else 404)

    def do_POST(self):  # noqa: N802
        self.reply(202, Location=f"/v2/{REPO}/blobs/uploads/1")

    def do_PUT(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if "/blobs/uploads/" in self.path:
            self.server.blobs[digest] = body
            return self.reply(201)
        name = self.path.rsplit("/", 1)[1]
        self.server.manifests[name] = self.server.manifests[digest] = (self.headers["Content-Type"], body)
        subject = self.server.native and json.loads(body).get("subject")
        self.reply(201, Docker_Content_Digest=digest, **({"OCI_Subject": subject["digest"]} if subject else {}))

    def do_DELETE(self):  # noqa: N802
        self.server.deleted.append(self.path.rsplit("/", 1)[1])
        self.reply(202 if self.server.manifests.pop(self.path.rsplit("/", 1)[1], None) else 404)

    def do_GET(self):  # noqa: N802
        kind, name = self.path.split("/")[-2:]
        if kind == "referrers" and self.server.native:
            listed = [
                {
                    "mediaType": registry.OCI_MANIFEST,
                    "digest": d,
                    "size": len(b),
                    **{k: m[k] for k in ("artifactType", "annotations")},
                }
                for d, (_, b) in self.server.manifests.items()
                if d.startswith("sha256:") and (m := json.loads(b)).get("subject", {}).get("digest") == name
            ]
            index = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": listed}).encode()
            return self.reply(200, index, Content_Type=registry.OCI_INDEX)
        found = self.server.manifests.get(name) if kind == "manifests" else None
        if kind == "blobs" and name in self.server.blobs:
            found = ("application/octet-stream", self.server.blobs[name])
        self.reply(200, found[1], Content_Type=found[0]) if found else self.reply(404)

    def log_message(self, *args):
        pass


class StoringRegistry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, native: bool):
        super().__init__(("127.0.0.1", 0), Store)
        self.native = native
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.deleted: list[str] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize("native", [True, False])
def test_signing_again_replaces_the_kinds_it_signs_and_keeps_the_rest(native):
    server = StoringRegistry(native)
    try:
        client = registry.Registry(registry.parse_ref(f"127.0.0.1:{server.server_address[1]}/{REPO}:t"))
        image = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST, "layers": []}).encode()
        digest = client.put_manifest("t", image, registry.OCI_MANIFEST).headers["Docker-Content-Digest"]
        subject = referrers.subject_descriptor(client, digest)
        assert subject == {"mediaType": registry.OCI_MANIFEST, "digest": digest, "size": len(image)}
        first = referrers.attach(client, subject, [(k, f"first {k}".encode()) for k in KINDS])
        other = {"mediaType": registry.OCI_MANIFEST, "digest": "sha256:" + "e" * 64, "size": 1}  # another tool's entry
        if not native:
            index = json.loads(server.manifests[registry.fallback_tag(digest)][1])
            server.manifests[registry.fallback_tag(digest)] = (
                registry.OCI_INDEX,
                json.dumps({**index, "manifests": [*index["manifests"], other]}).encode(),
            )
        second = referrers.attach(client, subject, [(KINDS[0], b"second")])
        listed = client.referrers(digest)
        assert {d["digest"] for d in listed} == {second[0]["digest"], first[1]["digest"], *(() if native else (other["digest"],))}
        assert server.deleted == [first[0]["digest"]]  # the superseded kind, and only it, deleted by digest
        assert list(referrers.envelopes_about(client, digest)) in (
            [b"second", f"first {KINDS[1]}".encode()],
            [f"first {KINDS[1]}".encode(), b"second"],
        )
    finally:
        server.shutdown()
