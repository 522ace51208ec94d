"""The registry client, over its HTTP API (the Docker Registry v2 / OCI distribution API):
what a pushed tag weighs, and the SBOM attached to a pushed image."""

from __future__ import annotations

import hashlib
import json

import requests


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
            "layers": [
                {
                    "mediaType": "application/vnd.cyclonedx+json",
                    **layer,
                    "annotations": {"org.opencontainers.image.title": sbom_path.name},
                }
            ],
            "subject": {
                "mediaType": image.headers.get("Content-Type", "application/vnd.docker.distribution.manifest.v2+json"),
                "digest": image_digest,
                "size": len(image.content),
            },
        }
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
