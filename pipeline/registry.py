"""The one registry client: every HTTP request the project makes to a registry (the Docker Registry
v2 / OCI distribution API) goes through `Registry`, and every push path asks `plain_http_refusal`
before it lets Docker or skopeo speak to a registry.

What crosses this boundary is untrusted, so everything here is bounded and fails closed: one loopback
rule (`ImageRef.loopback`), one auth rule (`Registry._login`), caps on every body, JSON document and
referrers listing, one `Deadline` per command (docs/supply-chain.md, "Threats to signed proof", says
what each stops). A violation is RegistryDataRefused (exit 1) or RegistryUnreachable (exit 6), never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlparse

import requests
import urllib3

from common.deadlines import DEADLINES
from pipeline.errors import NotVerified, RegistryDataRefused, RegistryUnreachable, UsageError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST))
MANIFEST_TYPES = f"{DOCKER_MANIFEST}, {OCI_MANIFEST}"
INDEXES = (OCI_INDEX, DOCKER_LIST)
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

# The bounds on what a registry may send (docs/supply-chain.md, "Threats").
MAX_MANIFEST = 4 * 2**20  # bytes of a manifest, an index or one referrers page, decompressed
MAX_ENVELOPE = 16 * 2**20  # a signed statement (the SBOM's, the largest, is about 2 MB)
MAX_PAGES = 16  # referrers pages followed for one subject
MAX_REFERRERS = 200  # entries listed for one subject (Kyverno refuses an image past 50)
MAX_TAGS = 1000  # tags asked for in one page of a repository's list (verify's rollback check)
MAX_TAG_PAGES = 20  # pages of it read for one line's newer builds (more: verify refuses)
MAX_DEPTH = 64  # nesting of any JSON read (the project's own statements nest about 10 deep)
MAX_NODES = 500_000  # values in one JSON document (the default image's SBOM statement has about 40,000)
MAX_READ = 128 * 2**20  # bytes one command reads from registries in all (verify of an image reads about 5 MB)
DEFAULT_DEADLINE = DEADLINES["verify"]  # seconds for a whole verify (build.py verify --timeout)
REQUEST_TIMEOUT = DEADLINES["registry request"]  # seconds for one request to connect or to send its next bytes
CHUNK = 8192  # bytes read at a time: a compressed chunk cannot grow past the cap by much

# The distribution spec's reference grammar, and nothing else: no userinfo, '#', '?', '\\', spaces or
# percent-escapes anywhere, so the host a rule is decided on is the host every client connects to.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<repo>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


class Deadline:
    """One deadline for everything a command asks of registries, each request getting what is left, and
    one byte budget for everything it reads (MAX_READ): a registry cannot keep a command busy or fill it."""

    def __init__(self, seconds: float = DEFAULT_DEADLINE, budget: int | None = None):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.limit = MAX_READ if budget is None else budget
        self.budget = self.limit

    def spend(self, count: int, what: str) -> None:
        self.budget -= count
        if self.budget < 0:
            said = f"{self.limit >> 20} MiB" if self.limit >= 2**20 else f"{self.limit:,} bytes"
            raise RegistryDataRefused(f"{what}: this command has read over {said} from the registry: refused")

    def left(self, what: str) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise RegistryUnreachable(
                f"{what}: the registry did not finish answering within {self.seconds:g} s; "
                "it is slow or holding the connection (raise --timeout if it is only slow)"
            )
        return remaining


@dataclass(frozen=True)
class ImageRef:
    host: str
    repo: str
    reference: str  # a tag or a digest

    @property
    def hostname(self) -> str:
        """The host without its port ('::1' for '[::1]:5000')."""
        if self.host.startswith("["):
            return self.host[1:].split("]")[0]
        return self.host.rsplit(":", 1)[0] if self.host.count(":") == 1 else self.host

    @property
    def loopback(self) -> bool:
        """A registry on this machine, written as one: localhost or a literal loopback address. The one
        place plain HTTP is allowed (Docker allows it for 127.0.0.0/8 too); a name that resolves to a
        loopback address is not one (plain_http_refusal refuses it for pushes)."""
        if self.hostname == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.hostname).is_loopback
        except ValueError:
            return False

    @property
    def scheme(self) -> str:
        return "http" if self.loopback else "https"

    @property
    def base(self) -> str:
        host = "registry-1.docker.io" if self.host == "docker.io" else self.host
        return f"{self.scheme}://{host}/v2"

    @property
    def name(self) -> str:
        """The repository as statements name it (host/repo)."""
        return f"{self.host}/{self.repo}"

    @property
    def is_digest(self) -> bool:
        return self.reference.startswith("sha256:")

    def __str__(self) -> str:
        return f"{self.name}{'@' if self.is_digest else ':'}{self.reference}"


def parse_ref(text: str) -> ImageRef:
    """HOST/REPO:TAG or HOST/REPO@sha256:…; Docker Hub names as docker pull reads them."""
    match = _REF.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{text[:200]!r} is not an image reference; write HOST/REPO:TAG or HOST/REPO@sha256:<hex>")
    host, repo = match["host"] or "docker.io", match["repo"]
    if match["host"] and not ("." in host or ":" in host or host == "localhost"):  # Docker's rule: a path component
        if not re.fullmatch(_COMPONENT, host):
            raise UsageError(f"{text[:200]!r} is not an image reference; write HOST/REPO:TAG or HOST/REPO@sha256:<hex>")
        host, repo = "docker.io", f"{host}/{repo}"
    if host == "docker.io" and "/" not in repo:
        repo = f"library/{repo}"
    return ImageRef(host, repo, match["digest"] or match["tag"] or "latest")


def plain_http_refusal(host: str, insecure: dict[str, bool] | None = None) -> str | None:
    """Why a push to `host` would leave TLS behind, or None. Docker pushes without TLS verification to
    any registry whose address resolves into 127.0.0.0/8 or that its daemon.json lists as insecure; only
    a registry written as loopback (localhost, 127.0.0.1, [::1]) may be spoken to that way.
    `insecure`: Docker's own view, host -> secure (docker_env.registry_security)."""
    ref = parse_ref(f"{host}/x")  # the one grammar: a host with userinfo or a path is refused here
    if ref.host != host:
        raise UsageError(f"--registry {host[:200]!r}: not a registry host; write HOST[:PORT]")
    if ref.loopback:
        return None
    if insecure is not None and insecure.get(host) is False:
        return f"the Docker daemon lists {host} as an insecure registry (daemon.json), so it would push there without TLS"
    try:
        infos = socket.getaddrinfo(ref.hostname, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None  # does not resolve: the push fails on its own, over nothing
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    loopback = sorted(str(a) for a in addresses if a.is_loopback)
    if loopback:
        return (
            f"{host} is not written as a loopback address but resolves to {', '.join(loopback)}, so Docker would "
            f"push to it without TLS; write the registry as 127.0.0.1:PORT or localhost:PORT"
        )
    for cidr, secure in (insecure or {}).items():
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue  # a host name, checked above
        if not secure and any(a in network for a in addresses):
            return f"{host} resolves into {cidr}, which the Docker daemon lists as insecure (daemon.json), so it would push there without TLS"
    return None


def parse_json(data: bytes, what: str) -> Any:
    """JSON from a registry, of at most MAX_NODES values (counted before parsing, so a hostile document is
    refused before it takes memory or time) nested at most MAX_DEPTH deep; RegistryDataRefused otherwise."""
    if data.count(b",") + data.count(b"[") + data.count(b"{") > MAX_NODES:
        raise RegistryDataRefused(f"{what} holds more than {MAX_NODES:,} JSON values")
    try:
        value = json.loads(data)
    except RecursionError:
        raise RegistryDataRefused(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise RegistryDataRefused(f"{what} is not JSON") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RegistryDataRefused(f"{what} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return value


def as_dict(data: bytes, what: str) -> dict:
    """JSON that must be an object."""
    value = parse_json(data, what)
    if not isinstance(value, dict):
        raise RegistryDataRefused(f"{what} is not a JSON object")
    return value


def config_digest(body: bytes, what: str) -> str:
    """The config digest (an image's ID) an image manifest names."""
    config = as_dict(body, f"{what}: the image manifest").get("config")
    config = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(config, str) or not DIGEST.fullmatch(config):
        raise RegistryDataRefused(f"{what}: the image manifest names no config digest")
    return config


def descriptors(value: Any, what: str) -> list[dict]:
    """An index's `manifests`: a list of descriptors, each with a sha256 digest."""
    if not isinstance(value, list) or not all(
        isinstance(d, dict) and isinstance(d.get("digest"), str) and DIGEST.fullmatch(d["digest"]) for d in value
    ):
        raise RegistryDataRefused(f"{what} does not list descriptors with sha256 digests")
    return value


def index_images(body: bytes, what: str) -> list[tuple[str, dict]]:
    """An index's images, each with its platform ("os/architecture", "None/None" where it names none): every
    child but BuildKit's attestation manifests (platform unknown/unknown), which are not images. The one rule
    sign, verify and diff read an index by."""
    named = []
    for child in descriptors(as_dict(body, what).get("manifests"), what):
        platform = child["platform"] if isinstance(child.get("platform"), dict) else {}
        named.append((f"{platform.get('os')}/{platform.get('architecture')}", child))
    return [(name, child) for name, child in named if name != "unknown/unknown"]


def _docker_login(host: str) -> tuple[str, str] | None:
    """user and password from ~/.docker/config.json's `auths` (what `docker login` writes without a helper)."""
    path = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError, AttributeError):
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


def _why(err: requests.RequestException) -> str:
    """A network failure in a few whole words (urllib3's messages nest the cause several levels deep)."""
    text = str(err)
    for cause, said in (
        ("NameResolutionError", "its name does not resolve"),
        ("Connection refused", "the connection was refused"),
        ("timed out", "it did not answer in time"),
        ("CERTIFICATE_VERIFY_FAILED", "its TLS certificate is not trusted here"),
    ):
        if cause in text:
            return said
    return type(err).__name__


def _netloc(url: str) -> str:
    return urlparse(url).netloc.lower()


class Registry:
    """One repository's side of the distribution API: bounded reads, the bearer-token dance where
    asked, uploads. `deadline` bounds everything this client does (None: each request its own timeout)."""

    def __init__(self, ref: ImageRef, deadline: Deadline | None = None):
        self.ref = ref
        self.deadline = deadline
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy or .netrc credentials from the environment: the login below only
        self.authorization: str | None = None  # sent to this registry's host only
        self.may_push = False  # whether that authorization was asked with the push scope
        self.login_problem = ""

    @property
    def own(self) -> str:
        return _netloc(self.ref.base)

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.ref.base}/{self.ref.repo}/{path}"

    def _timeout(self, what: str) -> float:
        return min(REQUEST_TIMEOUT, self.deadline.left(what)) if self.deadline else REQUEST_TIMEOUT

    def _send(self, method: str, url: str, what: str, kwargs: dict) -> requests.Response:
        headers = {"Accept-Encoding": "identity", **(kwargs.pop("headers", None) or {})}
        if self.authorization and _netloc(url) == self.own:
            headers["Authorization"] = self.authorization
        kwargs.setdefault("timeout", self._timeout(what))
        kwargs.setdefault("stream", True)  # no body read unless asked for, and then within its bounds (bounded)
        # requests drops Authorization when a redirect leaves the host (Session.rebuild_auth)
        return self.session.request(method, url, headers=headers, allow_redirects=method in ("GET", "HEAD"), **kwargs)

    def request(self, method: str, path: str, what: str = "", **kwargs) -> requests.Response:
        url = self._url(path)
        what = what or f"{method} {urlparse(url).path}"
        try:
            resp = self._send(method, url, what, dict(kwargs))
            challenge = resp.headers.get("WWW-Authenticate", "")
            push = method not in ("GET", "HEAD")
            if resp.status_code == 401 and challenge and (not self.authorization or push and not self.may_push):
                if _netloc(resp.url) != self.own:  # a redirect elsewhere asks for a login: never ours to give
                    self.login_problem = f"{_netloc(resp.url)}, not the registry, asked for a login; none was sent"
                else:  # a pull token does not push: a write asks again, with the push scope
                    self.authorization, self.may_push = None, push
                    self._login(challenge, push, what)
                    if self.authorization:
                        resp.close()
                        resp = self._send(method, url, what, dict(kwargs))
        except requests.RequestException as err:
            raise RegistryUnreachable(
                f"cannot reach the registry {self.ref.host}: {_why(err)}; is it running, and is the name right?"
            ) from None
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            resp.close()
            raise RegistryDataRefused(
                f"{what}: the registry answered with Content-Encoding {encoding[:40]!r}, not the identity asked for"
            )
        return resp

    def _login(self, challenge: str, push: bool, what: str) -> None:
        """Answer a Basic or Bearer challenge of this registry's own host with ~/.docker/config.json's login
        for this host (or none: anonymous)."""
        login = _docker_login(self.ref.host)
        if challenge.lower().startswith("basic"):
            if login:
                self.authorization = "Basic " + base64.b64encode(":".join(login).encode()).decode()
            else:
                self.login_problem = "it asks for a login; `docker login` first (credential helpers are not read)"
            return
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.get("realm", "")
        plain_ok = realm.startswith("http://") and ImageRef(_netloc(realm), "x", "x").loopback and self.ref.loopback
        if not realm.startswith("https://") and not plain_ok:
            self.login_problem = f"its token service {realm[:80]!r} is not https, so no credentials were sent"
            return
        scope = f"repository:{self.ref.repo}:pull" + (",push" if push else "")
        token = self.session.get(
            realm,
            params={"service": fields.get("service", ""), "scope": scope},
            auth=login,
            timeout=self._timeout(what),
            allow_redirects=False,  # the credentials go to the realm the registry named, nowhere else
            stream=True,
        )
        with token:
            body = bounded(token, MAX_MANIFEST, "the token service's answer", self.deadline) if token.ok else b""
        value = None
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            value = (parsed.get("token") or parsed.get("access_token")) if isinstance(parsed, dict) else None
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

    def _get(self, path: str, limit: int, what: str, headers: dict | None = None) -> tuple[requests.Response, bytes] | None:
        """GET a body of at most `limit` bytes (decompressed); None on 404."""
        resp = self.request("GET", path, what, headers=headers or {}, stream=True)
        with resp:
            if resp.status_code == 404:
                return None
            if not resp.ok:
                raise self.refused(resp, what)
            return resp, bounded(resp, limit, what, self.deadline)

    # ------------------------------------------------------------------ reading

    def manifest(self, reference: str) -> tuple[bytes, str, str] | None:
        """(bytes, media type, digest) of a manifest, or None when the registry has none by that name.
        The media type is the body's own (`mediaType`, else an index by its `manifests`), not a header's."""
        what = f"the manifest {self.ref.repo}:{reference[:19]}"
        got = self._get(f"manifests/{reference}", MAX_MANIFEST, what, {"Accept": ACCEPT})
        if got is None:
            return None
        data = got[1]
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryDataRefused(f"the registry sent a manifest whose digest is {digest}, not the {reference} asked for")
        body = as_dict(data, what)
        media = body.get("mediaType")
        if not isinstance(media, str) or not media:
            media = OCI_INDEX if "manifests" in body else OCI_MANIFEST
        return data, media, digest

    def blob(self, digest: str, limit: int = MAX_ENVELOPE) -> bytes:
        what = f"the blob {digest[:19]}…"
        got = self._get(f"blobs/{digest}", limit, what)
        if got is None:
            raise RegistryDataRefused(f"the registry has no blob {digest[:19]}…")
        if "sha256:" + hashlib.sha256(got[1]).hexdigest() != digest:
            raise RegistryDataRefused(f"the registry's blob {digest[:19]}… does not match its digest")
        return got[1]

    def referrers(self, digest: str) -> list[dict]:
        """Descriptors of the artifacts whose subject is `digest`: the referrers API (each page, at most
        MAX_PAGES, none twice, none on another host), or where the registry has none (it answers 404, 400
        or 405, or not with an index), the tag schema's index. At most MAX_REFERRERS entries."""
        found: list[dict] = []
        url = self._url(f"referrers/{digest}")
        seen: set[str] = set()
        while url:
            if url in seen:
                raise RegistryDataRefused(f"the referrers pages of {digest[:19]}… link back to a page already read")
            if len(seen) == MAX_PAGES:
                raise RegistryDataRefused(f"the referrers of {digest[:19]}… run past {MAX_PAGES} pages")
            if _netloc(url) != self.own or urlparse(url).scheme != self.ref.scheme:
                raise RegistryDataRefused(f"a referrers page of {digest[:19]}… links to {_netloc(url)}, another host")
            seen.add(url)
            what = f"the referrers of {digest[:19]}…"
            resp = self.request("GET", url, what, headers={"Accept": OCI_INDEX}, stream=True)
            with resp:
                api = resp.ok and resp.headers.get("Content-Type", "").startswith(OCI_INDEX)
                if not api and (resp.status_code in (400, 404, 405) or resp.ok):
                    if found:
                        break
                    return self.tagged_referrers(digest)
                if not resp.ok:
                    raise self.refused(resp, what)
                page = bounded(resp, MAX_MANIFEST, what, self.deadline)
                following = resp.links.get("next", {}).get("url")
                here = resp.url
            found += descriptors(as_dict(page, "the referrers list").get("manifests", []), "the referrers list")
            if len(found) > MAX_REFERRERS:
                raise RegistryDataRefused(f"{digest[:19]}… has more than {MAX_REFERRERS} referrers")
            url = urljoin(here, following) if following else ""
        return found

    def tagged_referrers(self, digest: str) -> list[dict]:
        """The referrers tag schema's index for `digest` (sha256-<hex>), [] where there is none."""
        tagged = self.manifest(fallback_tag(digest))
        if tagged is None:
            return []
        listed = descriptors(as_dict(tagged[0], "the referrers tag").get("manifests"), "the referrers tag")
        if len(listed) > MAX_REFERRERS:
            raise RegistryDataRefused(f"{digest[:19]}… has more than {MAX_REFERRERS} referrers")
        return listed

    def tags(self, after: str = "") -> tuple[list[str], bool] | None:
        """One page of the repository's tags, read bounded (MAX_MANIFEST bytes), asked for MAX_TAGS of them that
        sort after `after` (the API's `n` and `last`; the spec lists them in lexical order), and whether the
        registry says more follow (a `Link` to the next page; the spec's one signal). None for a 404: zot's answer
        to a `last` that is no tag. Debian's docker-registry ignores `n` and `last` and sends every tag,
        unordered, in one page, with no Link."""
        query = f"tags/list?n={MAX_TAGS}" + (f"&last={quote(after, safe='')}" if after else "")
        got = self._get(query, MAX_MANIFEST, f"the tags of {self.ref.repo}")
        if got is None:
            return None
        listed = as_dict(got[1], "the tag list").get("tags")
        if listed is None:
            listed = []  # a repository with no tags left lists null
        if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
            raise RegistryDataRefused("the tag list is not a list of names")
        return listed, "next" in got[0].links

    # ------------------------------------------------------------------ writing

    def upload(self, data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with self.request("HEAD", f"blobs/{digest}") as there:
            if there.ok:
                return {"digest": digest, "size": len(data)}
        with self.request("POST", "blobs/uploads/") as start:
            start.raise_for_status()
            location = start.headers.get("Location", "")
        if not location:
            raise RegistryDataRefused("the registry started an upload but named no Location to send it to")
        if location.startswith("/"):
            location = self.ref.base.rsplit("/v2", 1)[0] + location
        if _netloc(location) != self.own:
            raise RegistryDataRefused(f"the registry sent the upload to {_netloc(location)}, another host")
        sep = "&" if "?" in location else "?"
        headers = {"Content-Type": "application/octet-stream"}
        with self.request("PUT", f"{location}{sep}digest={digest}", data=data, headers=headers, timeout=300) as put:
            put.raise_for_status()
        return {"digest": digest, "size": len(data)}

    def put_manifest(self, reference: str, body: bytes, media_type: str) -> requests.Response:
        """PUT a manifest; the answer (closed: its headers are what callers read)."""
        with self.request("PUT", f"manifests/{reference}", data=body, headers={"Content-Type": media_type}) as put:
            put.raise_for_status()
        return put

    def delete_manifest(self, digest: str) -> requests.Response:
        """DELETE a manifest by digest (registries delete by digest: every tag naming it goes with it); the
        answer, unread (`with` it)."""
        return self.request("DELETE", f"manifests/{digest}")


def open_image(text: str, timeout: float) -> tuple[Registry, ImageRef, tuple[bytes, str, str]]:
    """A reference as given, parsed; a client of its registry with one deadline; the manifest it names now
    (bytes, media type, digest). NotVerified when the registry has no such image."""
    ref = parse_ref(text)
    client = Registry(ref, Deadline(timeout))
    found = client.manifest(ref.reference)
    if found is None:
        raise NotVerified(f"{ref}: the registry has no such image")
    return client, ref, found


def chunks(resp: requests.Response, what: str, deadline: Deadline | None, size: int = CHUNK) -> Iterator[bytes]:
    """The body, decompressed, as it arrives, read within the deadline and its byte budget: each read returns
    what one receive gave (read1, at most `size`), and waits at most what is left of the deadline, so a
    server that drips its answer byte by byte is cut off on time."""
    sock = getattr(getattr(resp.raw, "connection", None), "sock", None)
    while True:
        left = deadline.left(what) if deadline else REQUEST_TIMEOUT
        if sock is not None:
            sock.settimeout(max(0.05, min(REQUEST_TIMEOUT, left)))
        try:
            chunk = resp.raw.read1(size, decode_content=True)
        except (OSError, urllib3.exceptions.HTTPError) as err:
            if deadline:
                deadline.left(what)  # the deadline passed mid-read: say that, not the socket's words
            raise RegistryUnreachable(f"{what}: the answer broke off ({type(err).__name__})") from None
        if not chunk:
            return
        if deadline:
            deadline.spend(len(chunk), what)
        yield chunk


def bounded(resp: requests.Response, limit: int, what: str, deadline: Deadline | None) -> bytes:
    """The body, decompressed, at most `limit` bytes, read within the deadline (chunks)."""
    data = bytearray()
    for chunk in chunks(resp, what, deadline):
        data += chunk
        if len(data) > limit:
            raise RegistryDataRefused(f"{what} is larger than {limit // 2**20} MiB")
    return bytes(data)


def artifact(artifact_type: str, empty: dict, layer: dict, subject: dict) -> dict:
    """An OCI artifact's manifest: the empty config (`empty`: its upload's digest and size), one layer of
    `artifact_type`, `subject` the descriptor of the manifest it is about."""
    return {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, **empty},
        "layers": [{"mediaType": artifact_type, **layer}],
        "subject": subject,
    }


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag for a subject: sha256-<hex>."""
    return digest.replace(":", "-")


# --------------------------------------------------------------------------- after a push


def compressed_bytes(registry: Registry, tag: str) -> int | None:
    """Sum of the pushed layers' compressed sizes, from the registry's manifest; None where it cannot be read."""
    try:
        found = registry.manifest(tag)
        layers = as_dict(found[0], "the manifest").get("layers") if found else None
        return sum(int(layer["size"]) for layer in layers) if isinstance(layers, list) else None
    except (RegistryDataRefused, RegistryUnreachable, KeyError, TypeError, ValueError):
        return None


def push_sbom(registry: Registry, image_digest: str, sbom_path: Path) -> dict:
    """Attach the SBOM to the pushed image as an unsigned OCI artifact (tag sha256-<hex>.sbom, `subject` =
    the image): what an unsigned push does. Best effort: the result says where it went or why not; it
    never fails a validated push."""
    ref = registry.ref.name
    try:
        found = registry.manifest(image_digest)
        if found is None:
            return {"pushed": False, "reason": f"the registry has no {image_digest}"}
        empty = registry.upload(b"{}")
        layer = {**registry.upload(sbom_path.read_bytes()), "annotations": {"org.opencontainers.image.title": sbom_path.name}}
        subject = {"mediaType": found[1], "digest": image_digest, "size": len(found[0])}
        manifest = artifact("application/vnd.cyclonedx+json", empty, layer, subject)
        tag = fallback_tag(image_digest) + ".sbom"
        put = registry.put_manifest(tag, json.dumps(manifest).encode(), OCI_MANIFEST)
    except (requests.RequestException, RegistryDataRefused, RegistryUnreachable, KeyError, OSError) as err:
        return {"pushed": False, "reason": str(err).splitlines()[0][:200]}
    print(f"==> SBOM pushed as {ref}:{tag}", flush=True)
    return {"pushed": True, "ref": f"{ref}:{tag}", "digest": put.headers.get("Docker-Content-Digest")}
