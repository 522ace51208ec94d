"""Tag the validated image and push exactly that image."""

from __future__ import annotations

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
                raise PushFailed(f"registry refused the push of {ref}:{tag}: {detail.strip()}; check the registry and your login (`docker login`)")
            if event.get("id") and event.get("status"):
                layers[event["id"]] = event["status"]
            digest = event.get("aux", {}).get("Digest", digest)
            now = time.monotonic()
            if now - last_report > 10:
                done = sum(1 for s in layers.values() if s in ("Pushed", "Layer already exists", "Mounted from"))
                print(f"  [{now - start:6.1f}s] layers done {done}/{len(layers)}", flush=True)
                last_report = now
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while pushing {ref}:{tag}; the validated image stays tagged locally, rerun with --push") from None
    except PushFailed:
        raise
    except Exception as err:
        raise PushFailed(f"cannot push {ref}:{tag}: {str(err).splitlines()[0][:200]}; is the registry running and reachable?") from None
    if not digest:
        raise PushFailed(f"push of {ref}:{tag} ended without a digest; the registry did not confirm it")
    print(f"==> pushed {ref}:{tag} ({digest}) in {time.monotonic() - start:.0f}s", flush=True)
    return digest


def compressed_bytes(ref: str, tag: str) -> int | None:
    """Sum of the pushed layers' compressed sizes, read from the registry's manifest.

    Best effort: registries that need a login answer 401 here and give None.
    """
    registry, _, repo = ref.partition("/")
    if not repo or "." not in registry and ":" not in registry and registry != "localhost":
        return None
    scheme = "http" if registry.startswith(("localhost", "127.")) else "https"
    try:
        resp = requests.get(
            f"{scheme}://{registry}/v2/{repo}/manifests/{tag}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"},
            timeout=30,
        )
        resp.raise_for_status()
        return sum(int(layer["size"]) for layer in resp.json()["layers"])
    except (requests.RequestException, KeyError, ValueError):
        return None
