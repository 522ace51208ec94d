"""Find the Docker pieces the pipeline needs: the daemon (SDK), a BuildKit CLI, GPUs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from pipeline.errors import DockerUnavailable
from pipeline.hostprocs import run_host

# Candidate CLIs in order. A client without the buildx plugin cannot use
# BuildKit from Docker 23 on; Debian's 20.10 CLI can with DOCKER_BUILDKIT=1.
_CLI_CANDIDATES = ("docker", "/usr/bin/docker")


@dataclass(frozen=True)
class BuildCli:
    """A docker CLI that can build with BuildKit: argv prefix and environment."""

    argv: tuple[str, ...]  # ("docker", "buildx", "build") or ("/usr/bin/docker", "build")
    env: tuple[tuple[str, str], ...]
    description: str

    def environ(self) -> dict[str, str]:
        return {**os.environ, **dict(self.env)}


def find_build_cli() -> BuildCli:
    """The first docker CLI that can drive BuildKit (secrets, cache mounts)."""
    candidates = [os.environ["DOCKER_CLI"]] if os.environ.get("DOCKER_CLI") else list(_CLI_CANDIDATES)
    tried = []
    for candidate in candidates:
        exe = shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)
        if not exe:
            continue
        if run_host([exe, "buildx", "version"], "docker probe").returncode == 0:
            return BuildCli((exe, "buildx", "build", "--load"), (), f"{exe} buildx")
        version = run_host([exe, "version", "--format", "{{.Client.Version}}"], "docker probe")
        client = version.stdout.strip() if version.returncode not in (None, 127) else ""  # it ran and finished
        major = re.match(r"(\d+)\.", client)
        if major and int(major.group(1)) < 23:
            return BuildCli((exe, "build"), (("DOCKER_BUILDKIT", "1"),), f"{exe} {client} with DOCKER_BUILDKIT=1")
        tried.append(f"{exe} ({client or 'unknown version'}, no buildx)")
    raise DockerUnavailable(
        "no docker CLI that can use BuildKit: tried "
        + (", ".join(tried) or "none found on PATH")
        + "; install the buildx plugin or Debian's docker.io, or set DOCKER_CLI"
    )


def sdk_errors() -> tuple[type[Exception], ...]:
    """What the Docker SDK raises when the daemon refuses, a thing is gone or the connection breaks
    (`except docker_env.sdk_errors():`, the one list; anything else is a bug and surfaces as one)."""
    import docker.errors
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException)


def docker_client():
    """A Docker SDK client that has answered a ping."""
    import docker  # host dependency; imported here so `--help` works without it

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except sdk_errors() as err:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise DockerUnavailable(
            f"cannot reach the Docker daemon at {host} ({reason}); start Docker "
            "(e.g. `sudo systemctl start docker`, or scripts/prepare-host.sh) and retry"
        ) from None
    return client


def host_gpu_count() -> int:
    """How many NVIDIA GPUs this host has (0 when none or no driver)."""
    smi = shutil.which("nvidia-smi")
    if smi:
        result = run_host([smi, "-L"], "docker probe")
        if result.returncode == 0:
            return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))
    return 0


def registry_security(client) -> dict[str, bool]:
    """Registry host -> whether the Docker daemon speaks TLS to it (`docker info`'s IndexConfigs: what
    daemon.json's insecure-registries made insecure), and each insecure CIDR -> False."""
    registry = client.info().get("RegistryConfig") or {}
    configs = registry.get("IndexConfigs") or {}
    secure = {str(name): bool(config.get("Secure", True)) for name, config in configs.items() if isinstance(config, dict)}
    return secure | {str(cidr): False for cidr in registry.get("InsecureRegistryCIDRs") or [] if isinstance(cidr, str)}


class Chunks:
    """A reader over an iterator of byte chunks (the Engine's `docker save` stream); each byte copied once."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.chunk, self.at = chunks, b"", 0

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if self.at == len(self.chunk):
                chunk = next(self.chunks, None)  # an empty chunk is not the end
                if chunk is None:
                    break
                self.chunk, self.at = chunk, 0
                continue
            take = len(self.chunk) - self.at if n < 0 else min(n - len(out), len(self.chunk) - self.at)
            out += self.chunk[self.at : self.at + take]
            self.at += take
        return bytes(out)


@contextlib.contextmanager
def saved(client, image_id: str) -> Iterator[tarfile.TarFile]:
    """`docker save` of the image as a tar read in one pass as the daemon streams it; the stream is closed
    after, read to its end or not."""
    stream = client.api.get_image(image_id, chunk_size=1 << 20)
    try:
        with tarfile.open(fileobj=cast(IO[bytes], Chunks(iter(stream))), mode="r|") as archive:
            yield archive
    finally:
        stream.close()
