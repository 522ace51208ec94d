"""The one way the pipeline runs a program in a container of an image.

Every run is bounded by a deadline (the container is killed at it), labelled so
`scripts/ci-cleanup.sh` finds strays, and always removed with its anonymous
volumes. Output is either streamed line by line (long steps: the user watches
them) or captured (tools whose stdout is data).
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, Unpack

from pipeline.docker_env import sdk_errors
from pipeline.errors import ValidationFailed
from pipeline.hostprocs import step

ROLE_LABEL = {"io.proven-torch.role": "validation"}


@dataclass(frozen=True)
class Finished:
    exit_code: int  # 124 when killed at the deadline
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    files: dict[str, bytes] = field(default_factory=dict)  # the `fetch` folder, by relative name
    image_id: str = ""  # the image the container ran, as Docker reports it (`docker inspect`'s .Image)


def device_requests(gpus: int):
    """Every GPU of the host (`--gpus all`) when it has any."""
    if gpus <= 0:
        return None
    import docker.types

    return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def fetch_dir(container, path: str) -> dict[str, bytes]:
    """Copy a folder out of a (stopped) container: {relative name: bytes}; {} when it was never written."""
    try:
        stream, _ = container.get_archive(path)
    except sdk_errors():
        return {}
    files = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        for member in tar.getmembers():
            if member.isfile():
                name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                extracted = tar.extractfile(member)
                if extracted is not None:
                    files[name] = extracted.read()
    return files


def read_file(client, image_id: str, path: str) -> bytes | None:
    """One file of the image, read without running anything (a created, never started container)."""
    container = client.containers.create(image_id, command=["true"], labels=ROLE_LABEL)
    try:
        files = fetch_dir(container, path)
    finally:
        container.remove(force=True, v=True)
    return next(iter(files.values()), None) if len(files) == 1 else None


class RunOptions(TypedDict, total=False):
    """How run_in_image runs its command (each optional but timeout_s)."""

    timeout_s: Required[float]
    entrypoint: list[str] | None
    user: str | None
    network: bool  # default True
    gpus: int  # every GPU of the host when above 0
    shm_size: str | None
    stream: bool  # print output as it comes ("  │ line") and return it as stdout
    fetch: str | None  # a folder inside the container to copy out before it is removed
    what: str  # the step's name, for Ctrl-C and errors
    environment: dict[str, str] | None


def run_in_image(client, image_id: str, command: list[str], **options: Unpack[RunOptions]) -> Finished:
    """Run `command` in a fresh container of the image and wait for it (at most `timeout_s`); stdout and
    stderr captured apart unless `stream`."""
    timeout_s, stream, fetch = options["timeout_s"], options.get("stream", False), options.get("fetch")
    start = time.monotonic()
    container = client.containers.create(
        image_id,
        command=command,
        entrypoint=options.get("entrypoint"),
        user=options.get("user") or "",
        network_disabled=not options.get("network", True),
        device_requests=device_requests(options.get("gpus", 0)),
        shm_size=options.get("shm_size"),
        labels=ROLE_LABEL,
        environment=options.get("environment"),
    )
    timed_out = threading.Event()

    def kill_at_deadline() -> None:
        timed_out.set()
        try:
            container.kill()
        except sdk_errors():
            pass

    timer = threading.Timer(timeout_s, kill_at_deadline)
    streamed: list[str] = []
    try:
        # Ctrl-C: Interrupted naming the step; the container is removed below either way
        with step(options.get("what", "a step")):
            container.start()
            timer.start()
            if stream:
                for chunk in container.logs(stream=True, follow=True):
                    for line in chunk.decode(errors="replace").splitlines():
                        streamed.append(line)
                        print(f"  │ {line}", flush=True)
            exit_code = container.wait(timeout=timeout_s + 60)["StatusCode"]
            if stream:
                stdout, stderr = "\n".join(streamed), ""
            else:
                stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
                stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
            files = fetch_dir(container, fetch) if fetch else {}
    finally:
        timer.cancel()
        try:
            container.remove(force=True, v=True)
        except sdk_errors():
            pass
    return Finished(
        exit_code=124 if timed_out.is_set() else exit_code,
        stdout=stdout,
        stderr=stderr,
        seconds=time.monotonic() - start,
        timed_out=timed_out.is_set(),
        files=files,
        image_id=str(container.attrs.get("Image", "")),
    )


def json_answer(done: Finished, what: str) -> Any:
    """The JSON a tool run in the image printed on its last line; ValidationFailed, one line with the end of
    what it printed, when it failed or printed no JSON."""
    try:
        if done.exit_code == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    said = " ".join((done.stdout + "\n" + done.stderr).split())[-300:]  # one line
    raise ValidationFailed(f"{what} itself failed (exit {done.exit_code}): {said}")
