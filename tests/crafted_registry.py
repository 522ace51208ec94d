"""A registry on 127.0.0.1 whose answers a test writes (routes), for the unit tests of the registry client's
callers (verify, diff, rebuild's layer reads): crafted answers the local docker-registry cannot give, and the
OCI referrers API it lacks."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline import registry, statements
from pipeline.referrers import CREATED_ANNOTATION, ENVELOPE_MEDIA_TYPE, PREDICATE_ANNOTATION

REPO = "proven"


class Handler(BaseHTTPRequestHandler):
    server: Server  # type: ignore[assignment]

    def answer(self):
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        route = self.server.routes.get(self.path.split("?")[0]) or self.server.routes.get(self.path)
        if callable(route):
            return route(self)
        status, headers, body = route or (404, {}, b'{"errors":[]}')
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = answer  # noqa: N815

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    """A registry whose answers the test writes: routes[path] = (status, headers, body) or a handler function."""

    daemon_threads = True

    def __init__(self, address: str = "127.0.0.1"):
        super().__init__((address, 0), Handler)
        self.routes: dict = {}
        self.seen: list[tuple[str, str, dict]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"{self.server_address[0]}:{self.server_address[1]}"

    def put(self, path: str, body: bytes, media: str = "application/octet-stream", status: int = 200, **headers) -> None:
        self.routes[f"/v2/{REPO}/{path}"] = (status, {"Content-Type": media, **headers}, body)

    def blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.put(f"blobs/{digest}", data)
        return digest

    def manifest(self, body: dict, *names: str) -> tuple[str, int]:
        data = json.dumps(body).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        for name in (digest, *names):
            self.put(f"manifests/{name}", data, body.get("mediaType", registry.OCI_MANIFEST))
        return digest, len(data)


def artifacts(server: Server, digest: str, signed: list[tuple[str, bytes]], created: str) -> list[dict]:
    """Each envelope as an artifact about `digest`, with the (unsigned) creation annotation the test chooses."""
    out = []
    for kind, envelope in signed:
        layer = server.blob(envelope)
        notes = {PREDICATE_ANNOTATION: statements.PREDICATES[kind], CREATED_ANNOTATION: created}
        body = {
            "schemaVersion": 2,
            "mediaType": registry.OCI_MANIFEST,
            "artifactType": ENVELOPE_MEDIA_TYPE,
            "config": {"mediaType": registry.EMPTY_MEDIA_TYPE, "digest": server.blob(b"{}"), "size": 2},
            "layers": [{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": layer, "size": len(envelope)}],
            "subject": {"mediaType": registry.OCI_MANIFEST, "digest": digest, "size": 1},
            "annotations": notes,
        }
        artifact, size = server.manifest(body)
        out.append(
            {
                "mediaType": registry.OCI_MANIFEST,
                "digest": artifact,
                "size": size,
                "artifactType": ENVELOPE_MEDIA_TYPE,
                "annotations": notes,
            }
        )
    return out


def list_referrers(server: Server, digest: str, descriptors: list[dict], **headers) -> None:
    """The referrers API's answer for `digest`."""
    body = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": descriptors}).encode()
    server.put(f"referrers/{digest}", body, registry.OCI_INDEX, **headers)


def drip(content_type: str, byte: bytes, every: float, count: int):
    """A route that answers a byte at a time, `every` seconds apart: a registry holding a client's read open."""

    def answer(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(count):
            handler.wfile.write(byte)
            handler.wfile.flush()
            time.sleep(every)

    return answer
