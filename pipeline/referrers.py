"""Signed statements in the registry, beside the image they are about (OCI distribution 1.1).

Each DSSE envelope is its own OCI artifact: a manifest whose `subject` is the image's digest,
`artifactType` the DSSE envelope type, the predicate type in an annotation. Registries with the
referrers API (GET /v2/<repo>/referrers/<digest>) list them by themselves; for the others
(Debian's docker-registry, which the tests use) the pusher keeps the referrers tag schema: an
index tagged `sha256-<hex>` listing the artifacts. Pushing again replaces a predicate type's
earlier statement in that index, so nothing piles up.

Anonymous pulls and logins from ~/.docker/config.json (`auths`, basic) are answered with the
registry's bearer token; credential helpers are not asked.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlparse

import requests

from pipeline.errors import NotVerified, RegistryUnreachable, UsageError
from pipeline.signing import ENVELOPE_MEDIA_TYPE

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST))
INDEXES = (OCI_INDEX, DOCKER_LIST)
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # the name BuildKit's attestations use too
CREATED_ANNOTATION = "org.opencontainers.image.created"
_REF = re.compile(
    r"^(?:(?P<host>[^/]+\.[^/]+|[^/]+:\d+|localhost)/)?(?P<repo>[a-z0-9][a-z0-9._/-]*)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class ImageRef:
    host: str
    repo: str
    reference: str  # a tag or a digest

    @property
    def loopback(self) -> bool:
        """A registry on this machine (plain HTTP, as Docker allows for 127.0.0.0/8 and localhost)."""
        name = self.host.rsplit(":", 1)[0] if not self.host.startswith("[") else self.host[1:].split("]")[0]
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    @property
    def base(self) -> str:
        scheme = "http" if self.loopback else "https"
        host = "registry-1.docker.io" if self.host == "docker.io" else self.host
        return f"{scheme}://{host}/v2"

    @property
    def name(self) -> str:
        """The repository as statements name it (host/repo)."""
        return f"{self.host}/{self.repo}"

    def __str__(self) -> str:
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.name}{sep}{self.reference}"


def parse_ref(text: str) -> ImageRef:
    """HOST/REPO:TAG or HOST/REPO@sha256:…; Docker Hub names as docker pull reads them."""
    match = _REF.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not an image reference; write HOST/REPO:TAG or HOST/REPO@sha256:<hex>")
    host, repo = match["host"] or "docker.io", match["repo"]
    if host == "docker.io" and "/" not in repo:
        repo = f"library/{repo}"
    return ImageRef(host, repo, match["digest"] or match["tag"] or "latest")


def _docker_login(host: str) -> tuple[str, str] | None:
    """user and password from ~/.docker/config.json's `auths` (what `docker login` writes without a helper)."""
    path = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    entry = (
        auths.get(host)
        or auths.get(f"https://{host}")
        or (auths.get("https://index.docker.io/v1/") if host == "docker.io" else None)
    )
    if not isinstance(entry, dict) or not entry.get("auth"):
        return None
    try:
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, TypeError):
        return None
    return user, password


MAX_MANIFEST = 4 * 2**20  # bytes: a manifest or index larger than this is refused
MAX_ENVELOPE = 64 * 2**20  # a signed statement (the SBOM's is the largest, about 2 MB)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def as_dict(data: bytes, what: str) -> dict:
    """JSON that must be an object; NotVerified naming `what` otherwise (never a traceback)."""
    try:
        value = json.loads(data)
    except ValueError:
        raise NotVerified(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise NotVerified(f"{what} is not a JSON object")
    return value


def descriptors(value, what: str) -> list[dict]:
    """An index's `manifests`: a list of descriptors, each with a sha256 digest."""
    if not isinstance(value, list) or not all(
        isinstance(d, dict) and isinstance(d.get("digest"), str) and DIGEST.fullmatch(d["digest"]) for d in value
    ):
        raise NotVerified(f"{what} does not list descriptors with sha256 digests")
    return value


class Registry:
    """One repository's side of the distribution API, with the bearer-token dance where asked."""

    def __init__(self, ref: ImageRef, timeout: float = 30):
        self.ref = ref
        self.timeout = timeout
        self.session = requests.Session()
        self.authorization: str | None = None  # sent to this registry's host only, never to a redirect elsewhere
        self.login_problem = ""

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else f"{self.ref.base}/{self.ref.repo}/{path}"

    def _send(self, method: str, url: str, kwargs: dict) -> requests.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if self.authorization and urlparse(url).netloc == urlparse(self.ref.base).netloc:
            headers["Authorization"] = self.authorization
        return self.session.request(method, url, headers=headers, allow_redirects=method in ("GET", "HEAD"), **kwargs)

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        url = self._url(path)
        kwargs.setdefault("timeout", self.timeout)
        try:
            resp = self._send(method, url, dict(kwargs))
            challenge = resp.headers.get("WWW-Authenticate", "")
            if resp.status_code == 401 and not self.authorization and challenge:
                self._login(challenge, method not in ("GET", "HEAD"))
                if self.authorization:
                    resp = self._send(method, url, dict(kwargs))
        except requests.RequestException as err:
            raise RegistryUnreachable(
                f"cannot reach the registry {self.ref.host}: {str(err).splitlines()[0][:160]}; is it running, and is the name right?"
            ) from None
        return resp

    def _login(self, challenge: str, push: bool) -> None:
        """Answer a Basic or Bearer challenge with ~/.docker/config.json's login for this host (or none: anonymous)."""
        login = _docker_login(self.ref.host)
        if challenge.lower().startswith("basic"):
            if login:
                self.authorization = "Basic " + base64.b64encode(":".join(login).encode()).decode()
            else:
                self.login_problem = "it asks for a login; `docker login` first (credential helpers are not read)"
            return
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.get("realm", "")
        if not realm.startswith("https://") and not (realm.startswith("http://") and self.ref.loopback):
            self.login_problem = f"its token service {realm!r} is not https, so no credentials were sent"
            return
        scope = f"repository:{self.ref.repo}:pull" + (",push" if push else "")
        token = self.session.get(
            realm, params={"service": fields.get("service", ""), "scope": scope}, auth=login, timeout=self.timeout
        )
        try:
            body = token.json() if token.ok else {}
        except ValueError:
            body = {}
        value = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if isinstance(value, str) and value:
            self.authorization = f"Bearer {value}"
        else:
            self.login_problem = f"its token service answered {token.status_code}" + (
                ""
                if login
                else " (no login for it in ~/.docker/config.json: `docker login` first; credential helpers are not read)"
            )

    def refused(self, resp: requests.Response, what: str) -> RegistryUnreachable:
        why = f": {self.login_problem}" if self.login_problem else ""
        return RegistryUnreachable(f"the registry {self.ref.host} answered {resp.status_code} for {what}{why}")

    def _read(self, path: str, limit: int, what: str, headers: dict | None = None) -> bytes | None:
        """GET a body of at most `limit` bytes; None on 404."""
        resp = self.request("GET", path, headers=headers or {}, stream=True)
        with resp:
            if resp.status_code == 404:
                return None
            if not resp.ok:
                raise self.refused(resp, what)
            data = bytearray()
            for chunk in resp.iter_content(2**16):
                data += chunk
                if len(data) > limit:
                    raise NotVerified(f"{what} is larger than {limit // 2**20} MiB; refused")
        return bytes(data)

    # ------------------------------------------------------------------ reading

    def manifest(self, reference: str) -> tuple[bytes, str, str] | None:
        """(bytes, media type, digest) of a manifest, or None when the registry has none by that name.
        The media type is the body's own (`mediaType`, else an index by its `manifests`), not a header's."""
        data = self._read(f"manifests/{reference}", MAX_MANIFEST, f"{self.ref.repo}:{reference}", {"Accept": ACCEPT})
        if data is None:
            return None
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise NotVerified(f"the registry sent a manifest whose digest is {digest}, not the {reference} asked for")
        body = as_dict(data, f"the manifest {self.ref.repo}:{reference}")
        media = body.get("mediaType")
        if not isinstance(media, str) or not media:
            media = OCI_INDEX if "manifests" in body else OCI_MANIFEST
        return data, media, digest

    def blob(self, digest: str, limit: int = MAX_ENVELOPE) -> bytes:
        data = self._read(f"blobs/{digest}", limit, f"the blob {digest[:19]}…")
        if data is None:
            raise NotVerified(f"the registry has no blob {digest[:19]}…")
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise NotVerified(f"the registry's blob {digest[:19]}… does not match its digest")
        return data

    def referrers(self, digest: str) -> list[dict]:
        """Descriptors of the artifacts whose subject is `digest`: the referrers API (every page), or where
        the registry has none (it answers 404, 400 or 405, or not with an index), the tag schema's index."""
        found: list[dict] = []
        path: str | None = f"referrers/{digest}"
        while path:
            resp = self.request("GET", path, headers={"Accept": OCI_INDEX})
            api = resp.ok and resp.headers.get("Content-Type", "").startswith(OCI_INDEX)
            if not api and (resp.status_code in (400, 404, 405) or resp.ok):
                if found:
                    break
                tagged = self.manifest(fallback_tag(digest))
                return (
                    descriptors(as_dict(tagged[0], "the referrers tag").get("manifests"), "the referrers tag") if tagged else []
                )
            if not resp.ok:
                raise self.refused(resp, f"the referrers of {digest[:19]}…")
            found += descriptors(as_dict(resp.content, "the referrers list").get("manifests", []), "the referrers list")
            following = resp.links.get("next", {}).get("url")
            path = urljoin(resp.url, following) if following else None
        return found

    # ------------------------------------------------------------------ writing

    def upload(self, data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.request("HEAD", f"blobs/{digest}").ok:
            return {"digest": digest, "size": len(data)}
        start = self.request("POST", "blobs/uploads/")
        start.raise_for_status()
        location = start.headers["Location"]
        if location.startswith("/"):
            location = self.ref.base.rsplit("/v2", 1)[0] + location
        sep = "&" if "?" in location else "?"
        put = self.request(
            "PUT", f"{location}{sep}digest={digest}", data=data, headers={"Content-Type": "application/octet-stream"}, timeout=300
        )
        put.raise_for_status()
        return {"digest": digest, "size": len(data)}

    def put_manifest(self, reference: str, body: bytes, media_type: str) -> requests.Response:
        put = self.request("PUT", f"manifests/{reference}", data=body, headers={"Content-Type": media_type})
        put.raise_for_status()
        return put


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag for a subject: sha256-<hex>."""
    return digest.replace(":", "-")


def subject_descriptor(registry: Registry, digest: str) -> dict:
    found = registry.manifest(digest)
    if found is None:
        raise NotVerified(f"{registry.ref.name} has no manifest {digest}")
    body, media, _ = found
    return {"mediaType": media, "digest": digest, "size": len(body)}


def attach(registry: Registry, subject: dict, envelopes: list[tuple[str, bytes]]) -> list[dict]:
    """Push each (predicate type, DSSE envelope) as an artifact about `subject` (a descriptor);
    return the artifacts' descriptors. A predicate type pushed before for the same subject is
    replaced in the tag-schema index (and deleted where the registry lets it), not added to."""
    empty = registry.upload(b"{}")
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    added: list[dict] = []
    native = False
    for predicate_type, envelope in envelopes:
        layer = registry.upload(envelope)
        annotations = {PREDICATE_ANNOTATION: predicate_type, CREATED_ANNOTATION: now}
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ENVELOPE_MEDIA_TYPE,
            "config": {"mediaType": EMPTY_MEDIA_TYPE, **empty},
            "layers": [{"mediaType": ENVELOPE_MEDIA_TYPE, **layer}],
            "subject": subject,
            "annotations": annotations,
        }
        body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        put = registry.put_manifest(digest, body, OCI_MANIFEST)
        native = native or bool(put.headers.get("OCI-Subject"))
        added.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": len(body),
                "artifactType": ENVELOPE_MEDIA_TYPE,
                "annotations": annotations,
            }
        )
    kinds = {d["annotations"][PREDICATE_ANNOTATION] for d in added}
    if native:  # the registry lists referrers itself: remove what these replace, where it allows deletes
        for old in registry.referrers(subject["digest"]):
            if old.get("annotations", {}).get(PREDICATE_ANNOTATION) in kinds and old["digest"] not in {
                d["digest"] for d in added
            }:
                registry.request("DELETE", f"manifests/{old['digest']}")
        return added
    tag = fallback_tag(subject["digest"])
    found = registry.manifest(tag)
    kept = [
        d
        for d in (json.loads(found[0]).get("manifests", []) if found else [])
        if d.get("annotations", {}).get(PREDICATE_ANNOTATION) not in kinds
    ]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": kept + added}
    registry.put_manifest(tag, json.dumps(index, sort_keys=True, separators=(",", ":")).encode(), OCI_INDEX)
    return added


def envelopes_about(registry: Registry, digest: str) -> list[tuple[dict, bytes]]:
    """(artifact descriptor, envelope bytes) of every DSSE artifact the registry lists for `digest`.
    The artifact manifest's own subject must be `digest`: an index entry pointing elsewhere is refused."""
    out = []
    for descriptor in registry.referrers(digest):
        if descriptor.get("artifactType") != ENVELOPE_MEDIA_TYPE:
            continue
        found = registry.manifest(descriptor["digest"])
        if found is None:
            raise NotVerified(
                f"the registry lists the statement {descriptor['digest'][:19]}… for {digest[:19]}… but does not have it"
            )
        manifest = as_dict(found[0], f"the statement artifact {descriptor['digest'][:19]}…")
        subject = manifest.get("subject")
        about = subject.get("digest") if isinstance(subject, dict) else None
        if about != digest:
            raise NotVerified(
                f"the statement artifact {descriptor['digest'][:19]}… listed for {digest[:19]}… is about {str(about or 'nothing')[:19]}…"
            )
        layers = manifest.get("layers")
        candidates = [x for x in layers if isinstance(x, dict)] if isinstance(layers, list) else []
        layer = next(
            (x for x in candidates if x.get("mediaType") == ENVELOPE_MEDIA_TYPE and isinstance(x.get("digest"), str)), None
        )
        if layer is None or not DIGEST.fullmatch(layer["digest"]):
            raise NotVerified(f"the statement artifact {descriptor['digest'][:19]}… holds no DSSE envelope")
        annotations = manifest.get("annotations")
        out.append(
            ({**descriptor, "annotations": annotations if isinstance(annotations, dict) else {}}, registry.blob(layer["digest"]))
        )
    return out
