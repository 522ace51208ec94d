"""The push decision: tag the validated image, re-check each tag names it, push exactly that
image, immutable tag first. The zstd form is pipeline/zstd_push.py; the registry's HTTP API
(sizes, the SBOM artifact) is pipeline/registry.py."""

from __future__ import annotations

import time

from common.deadlines import DEADLINES
from pipeline import hostprocs
from pipeline.docker_env import sdk_errors
from pipeline.errors import Interrupted, PushFailed, ValidationFailed

# build.py --compression (cli_text.py says which runtimes pull each); `both` pushes gzip under the plain
# tags, so no runtime meets a tag it cannot pull, and a zstd form of each under ZSTD_SUFFIX.
COMPRESSIONS = ("gzip", "zstd", "both")
ZSTD_SUFFIX = "-zstd"


def tag_image(client, image_id: str, ref: str, tags: list[str]) -> list[str]:
    """Give the validated image its tags; return the full references."""
    image = client.images.get(image_id)
    refs = []
    for tag in tags:
        if not image.tag(ref, tag=tag):
            raise ValidationFailed(f"docker refused the tag {ref}:{tag}")
        refs.append(f"{ref}:{tag}")
    return refs


def check_tag(client, image_id: str, ref: str, tag: str) -> None:
    """Refuse to push ref:tag when it no longer names the validated image."""
    current = client.images.get(f"{ref}:{tag}").id
    if current != image_id:
        raise PushFailed(f"{ref}:{tag} now names {current[:19]}, not the validated {image_id[:19]}; refusing to push")


def push_plan(compression: str, tags: list[str]) -> list[tuple[str, str, str]]:
    """(local tag, registry tag, compression) in push order: every form's immutable tag
    (tags[0]) before any moving tag, so a push that fails part-way moves nothing."""
    forms = {"gzip": [("", "gzip")], "zstd": [("", "zstd")], "both": [("", "gzip"), (ZSTD_SUFFIX, "zstd")]}[compression]
    return [(tag, tag + suffix, form) for tag in tags for suffix, form in forms]


def push_tag(client, image_id: str, ref: str, tag: str) -> str:
    """Push ref:tag (gzip, docker push) after checking it still names the validated image; return the manifest digest."""
    check_tag(client, image_id, ref, tag)
    print(f"==> push {ref}:{tag}", flush=True)
    start = time.monotonic()
    last_report = 0.0
    digest = ""
    layers: dict[str, str] = {}
    limit = DEADLINES["docker push"]
    try:
        with hostprocs.step(f"the push of {ref}:{tag}"):  # Ctrl-C: pipeline.line says what stays tagged and pushed
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
                if now - start > limit:  # the daemon goes on pushing only while someone reads its stream
                    raise PushFailed(f"the push of {ref}:{tag} did not finish within {limit:.0f} s and was abandoned")
                if now - last_report > 10:
                    done = sum(1 for s in layers.values() if s in ("Pushed", "Layer already exists", "Mounted from"))
                    print(f"  [{now - start:6.1f}s] layers done {done}/{len(layers)}", flush=True)
                    last_report = now
    except (PushFailed, Interrupted):
        raise
    except sdk_errors() as err:
        raise PushFailed(
            f"cannot push {ref}:{tag}: {str(err).splitlines()[0][:200]}; is the registry running and reachable?"
        ) from None
    if not digest:
        raise PushFailed(f"push of {ref}:{tag} ended without a digest; the registry did not confirm it")
    print(f"==> pushed {ref}:{tag} ({digest}) in {time.monotonic() - start:.0f}s", flush=True)
    return digest
