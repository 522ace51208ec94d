"""Tag the validated image and push exactly that image."""

from __future__ import annotations

import hashlib
import json
import time

import requests

from pipeline.errors import Interrupted, PushFailed, ValidationFailed


def tag_image(client, image_id: str, ref: str, tags: list[str]) -> list[str]:
    """Give the validated image its tags; return the full references."""
    image = client.images.get(image_id)
    refs = []
    for tag in tags:
        if not image.tag(ref, tag=tag):
            raise ValidationFailed(f"docker refused the tag {ref}:{tag}")
        refs.append(f"{ref}:{tag}")
    return refs


def push_tag(client, image_id: str, ref: str, tag: str) -> str:
    """Push ref:tag after checking it still names the validated image; return the manifest digest."""
    current = client.images.get(f"{ref}:{tag}").id
    if current != image_id:
        raise PushFailed(f"{ref}:{tag} now names {current[:19]}, not the validated {image_id[:19]}; refusing to push")
    print(f"==> push {ref}:{tag}", flush=True)
    start = time.monotonic()
    last_report = 0.0
    digest = ""
    layers: dict[str, str] = {}
    try:
        for event in client.images.push(ref, tag=tag, stream=True, decode=True):
            if "error" in event:
                detail = event.get("errorDetail", {}).get("message") or event["error"]
                raise PushFailed(
                    f"registry refused the push of {ref}:{tag}: {detail.strip()}; check the registry and your login (`docker login`)"
                )
            if event.get("id") and event.get("status"):
                layers[event["id"]] = event["status"]
            digest = event.get("aux", {}).get("Digest", digest)
            now = time.monotonic()
            if now - last_report > 10:
                done = sum(1 for s in layers.values() if s in ("Pushed", "Layer already exists", "Mounted from"))
                print(f"  [{now - start:6.1f}s] layers done {done}/{len(layers)}", flush=True)
                last_report = now
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted while pushing {ref}:{tag}; the validated image stays tagged locally, rerun with --push"
        ) from None
    except PushFailed:
        raise
    except Exception as err:
        raise PushFailed(
            f"cannot push {ref}:{tag}: {str(err).splitlines()[0][:200]}; is the registry running and reachable?"
        ) from None
    if not digest:
        raise PushFailed(f"push of {ref}:{tag} ended without a digest; the registry did not confirm it")
    print(f"==> pushed {ref}:{tag} ({digest}) in {time.monotonic() - start:.0f}s", flush=True)
    return digest


def registry_api(ref: str) -> tuple[str, str] | None:
    """(base URL of the registry's v2 API, repository) for a ref, or None for Docker Hub names."""
    registry, _, repo = ref.partition("/")
    if not repo or "." not in registry and ":" not in registry and registry != "localhost":
        return None
    scheme = "http" if registry.startswith(("localhost", "127.")) else "https"
    return f"{scheme}://{registry}/v2", repo


MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def compressed_bytes(ref: str, tag: str) -> int | None:
    """Sum of the pushed layers' compressed sizes, read from the registry's manifest.

    Best effort: registries that need a login answer 401 here and give None.
    """
    api = registry_api(ref)
    if api is None:
        return None
    base, repo = api
    try:
        resp = requests.get(f"{base}/{repo}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=30)
        resp.raise_for_status()
        return sum(int(layer["size"]) for layer in resp.json()["layers"])
    except (requests.RequestException, KeyError, ValueError):
        return None


def _upload_blob(base: str, repo: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = requests.post(f"{base}/{repo}/blobs/uploads/", timeout=30)
    start.raise_for_status()
    location = start.headers["Location"]
    if location.startswith("/"):
        location = base.rsplit("/v2", 1)[0] + location
    sep = "&" if "?" in location else "?"
    put = requests.put(
        f"{location}{sep}digest={digest}", data=data, headers={"Content-Type": "application/octet-stream"}, timeout=300
    )
    put.raise_for_status()
    return {"digest": digest, "size": len(data)}


def push_sbom(ref: str, image_tag: str, image_digest: str, sbom_path) -> dict:
    """Attach the SBOM to the pushed image as an OCI artifact (tag sha256-<hex>.sbom, `subject` = the image).

    Best effort, as the issue asks ("where the registry accepts it"): the result says
    where it went or why not; it never fails a validated push.
    """
    api = registry_api(ref)
    if api is None:
        return {"pushed": False, "reason": "Docker Hub names need a login; attach it with oras or cosign"}
    base, repo = api
    try:
        image = requests.get(f"{base}/{repo}/manifests/{image_tag}", headers={"Accept": MANIFEST_TYPES}, timeout=30)
        image.raise_for_status()
        empty = _upload_blob(base, repo, b"{}")
        layer = _upload_blob(base, repo, sbom_path.read_bytes())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.cyclonedx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", **empty},
            "layers": [{"mediaType": "application/vnd.cyclonedx+json", **layer,
                        "annotations": {"org.opencontainers.image.title": sbom_path.name}}],
            "subject": {"mediaType": image.headers.get("Content-Type", "application/vnd.docker.distribution.manifest.v2+json"),
                        "digest": image_digest, "size": len(image.content)},
        }  # fmt: skip
        tag = image_digest.replace(":", "-") + ".sbom"
        put = requests.put(
            f"{base}/{repo}/manifests/{tag}",
            data=json.dumps(manifest).encode(),
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
            timeout=60,
        )
        put.raise_for_status()
    except (requests.RequestException, KeyError, OSError) as err:
        return {"pushed": False, "reason": str(err).splitlines()[0][:200]}
    print(f"==> SBOM pushed as {ref}:{tag}", flush=True)
    return {"pushed": True, "ref": f"{ref}:{tag}", "digest": put.headers.get("Docker-Content-Digest")}
