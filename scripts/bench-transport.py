#!/usr/bin/env python3
"""Benchmark: how the image travels. In one run, side by side, on this machine:

  cold push   gzip (`docker push`) and zstd (build.py's skopeo path, pipeline.push),
              each into an empty registry of its own on 127.0.0.1
  size        compressed bytes in the registry, and the largest layer of each
  cold pull   containerd (`ctr image pull`, what Kubernetes runs) of each form into an
              empty namespace; Docker Engine 20.10 of the gzip form into an empty second
              daemon, which then runs the smoke suite in it; the same Docker of the
              zstd form, to record that it cannot
  re-push     a one-file change to the image, pushed with zstd: the bytes that travel

Writes docs/evidence/transport-benchmark.json.

    sudo .venv/bin/python scripts/bench-transport.py [--image REF]

Needs root (a second dockerd), skopeo, docker-registry and containerd's ctr:
`scripts/prepare-host.sh --test-tools` installs them. Default image: the default
variant's moving tag as `make image` leaves it (proven-torch:2.9-cu128 or so).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.procs import free_port  # noqa: E402
from pipeline import push  # noqa: E402
from pipeline.docker_env import docker_client  # noqa: E402
from pipeline.registry import MANIFEST_TYPES  # noqa: E402
from pipeline.variants import REPO_ROOT, load_matrix  # noqa: E402

DOCKER = "/usr/bin/docker"  # Debian's 20.10 CLI: the engine's own
CONTAINERD = "/var/run/docker/containerd/containerd.sock"
REPO = "proven-torch-bench"


def say(text: str) -> None:
    print(f"bench-transport: {text}", file=sys.stderr, flush=True)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def timed(argv: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    done = run(argv, **kw)
    return time.monotonic() - start, done


class Registry:
    """An empty docker-registry on 127.0.0.1:PORT (a cold push uploads every blob)."""

    def __init__(self, root: Path):
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.data = root / f"data-{self.port}"
        config = root / f"registry-{self.port}.yml"
        config.write_text(
            f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / f'data-{self.port}'}\n"
            f"http:\n  addr: {self.host}\n"
        )
        self.proc = subprocess.Popen(
            [shutil.which("docker-registry"), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(100):
            try:
                if requests.get(f"http://{self.host}/v2/", timeout=1).ok:
                    return
            except requests.RequestException:
                time.sleep(0.1)
        raise SystemExit(f"registry on {self.host} did not start")

    def manifest(self, tag: str) -> dict:
        resp = requests.get(f"http://{self.host}/v2/{REPO}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=30)
        resp.raise_for_status()
        return resp.json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.data, ignore_errors=True)


def layer_stats(manifest: dict) -> dict:
    sizes = [int(layer["size"]) for layer in manifest["layers"]]
    return {
        "compressed_bytes": sum(sizes),
        "largest_layer_bytes": max(sizes),
        "layers": len(sizes),
        "media_type": manifest["layers"][0]["mediaType"],
    }


def ctr(namespace: str, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return run(["ctr", "--address", CONTAINERD, "-n", namespace, *args], timeout=timeout)


def ctr_cold_pull(ref: str) -> float:
    """Seconds for containerd to pull and unpack `ref` into a namespace of its own, emptied after."""
    namespace = f"bench-{os.getpid()}-{int(time.time())}"
    try:
        seconds, done = timed(
            ["ctr", "--address", CONTAINERD, "-n", namespace, "images", "pull", "--plain-http", ref], timeout=1800
        )
        if done.returncode != 0:
            raise SystemExit(f"ctr pull {ref} failed: {done.stderr.strip()[-300:]}")
        return seconds
    finally:
        for image in ctr(namespace, "images", "ls", "-q").stdout.split():
            ctr(namespace, "images", "rm", "--sync", image)
        digests = [line.split()[0] for line in ctr(namespace, "content", "ls", "-q").stdout.splitlines() if line.strip()]
        if digests:
            ctr(namespace, "content", "rm", *digests)
        ctr(namespace, "namespaces", "rm", namespace)


class SecondDocker:
    """A second Docker Engine (the same 20.10) with an empty store: a cold `docker pull`."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        found = re.search(r"inet (\S+)", run(["ip", "-4", "addr", "show", "docker0"]).stdout)
        self.bridge = found.group(1) if found else None
        self.socket = f"unix://{root}/docker.sock"
        dirs = ["--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile", str(root / "pid")]
        self.proc = subprocess.Popen(
            ["dockerd", *dirs, "-H", self.socket, "--bridge=none", "--iptables=false", "--ip-masq=false"],
            stdout=open(root / "dockerd.log", "w"),
            stderr=subprocess.STDOUT,
        )
        for _ in range(120):
            if run([DOCKER, "-H", self.socket, "info"], timeout=10).returncode == 0:
                return
            time.sleep(0.5)
        raise SystemExit(f"second dockerd did not start; see {root / 'dockerd.log'}")

    def __enter__(self) -> SecondDocker:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def docker(self, *args: str, timeout: int = 1800) -> tuple[float, subprocess.CompletedProcess]:
        return timed([DOCKER, "-H", self.socket, *args], timeout=timeout)

    def stop(self) -> None:
        """Stop it and delete its store (the disk holds one unpacked pull at a time).

        Seen here with Docker 20.10: the second daemon, even with --bridge=none, takes
        the first daemon's docker0 bridge away when it exits, and the first daemon's
        containers and builds then fail to start ("could not find bridge docker0").
        The bridge is put back as it was.
        """
        self.proc.terminate()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.bridge and run(["ip", "link", "show", "docker0"]).returncode != 0:
            run(["ip", "link", "add", "docker0", "type", "bridge"])
            run(["ip", "addr", "add", self.bridge, "dev", "docker0"])
            run(["ip", "link", "set", "docker0", "up"])
            say(f"put the first daemon's docker0 ({self.bridge}) back")


@contextmanager
def phase_registry(work: Path, image, tag: str, *later: str) -> Iterator[tuple[Registry, str]]:
    """A registry of the phase's own and the repository's reference in it, `image` tagged there as `tag`;
    afterwards the registry is stopped and `tag` and the `later` tags are removed."""
    registry = Registry(work)
    ref = f"{registry.host}/{REPO}"
    image.tag(ref, tag)
    try:
        yield registry, ref
    finally:
        registry.stop()
        run([DOCKER, "rmi", *(f"{ref}:{t}" for t in (tag, *later))])


def containerd_pull(out: dict, ref: str, docker_pull: bool, docker_key: str) -> bool:
    """The containerd cold pull of `ref`, timed into `out`; whether the second Docker Engine pulls next
    (not with --no-docker-pull, which `out[docker_key]` then says)."""
    out["containerd_cold_pull_seconds"] = round(ctr_cold_pull(ref), 1)
    if not docker_pull:
        out[docker_key] = "not run (--no-docker-pull)"
    return docker_pull


def gzip_phase(client, image, work: Path, docker_pull: bool = True) -> dict:
    with phase_registry(work, image, "gzip") as (registry, ref):
        say("cold push, gzip (docker push) ...")
        seconds, done = timed([DOCKER, "push", f"{ref}:gzip"], timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"docker push failed: {done.stderr.strip()[-300:]}")
        out = {"cold_push_seconds": round(seconds, 1), **layer_stats(registry.manifest("gzip"))}
        say(f"  {seconds:.0f} s; cold pull with containerd ...")
        if not containerd_pull(out, f"{ref}:gzip", docker_pull, "docker_cold_pull_seconds"):
            return out
        say("cold pull with a second, empty Docker Engine, then the smoke suite in what it pulled ...")
        with SecondDocker(work / "docker2-gzip") as second:
            seconds, done = second.docker("pull", f"{ref}:gzip")
            if done.returncode != 0:
                raise SystemExit(f"docker pull (second daemon) failed: {done.stderr.strip()[-300:]}")
            out["docker_cold_pull_seconds"] = round(seconds, 1)
            out["docker_version"] = second.docker("version", "--format", "{{.Server.Version}}")[1].stdout.strip()
            out["docker_pulled_image_id"] = second.docker("image", "inspect", "--format", "{{.Id}}", f"{ref}:gzip")[
                1
            ].stdout.strip()
            _, smoke = second.docker("run", "--rm", "--network", "none", f"{ref}:gzip", "python", "-m", "smoke", timeout=900)
            out["docker_pulled_smoke_exit"] = smoke.returncode
        return out


def zstd_phase(client, image, work: Path, docker_pull: bool = True) -> dict:
    with phase_registry(work, image, "cold", "changed") as (registry, ref):
        say("cold push, zstd (skopeo, build.py --compression zstd) ...")
        start = time.monotonic()
        digest = push.push_tag_zstd(client, image.id, ref, "cold", "zstd")
        seconds = time.monotonic() - start
        out = {"cold_push_seconds": round(seconds, 1), "level": push.ZSTD_LEVEL, **layer_stats(registry.manifest("zstd"))}
        say(f"  {seconds:.0f} s; a one-file change, re-pushed ...")
        before = {layer["digest"] for layer in registry.manifest("zstd")["layers"]}
        dockerfile = f"FROM {image.id}\nUSER 0\nRUN echo '# bench' >> /opt/proven-torch/smoke/__init__.py\nUSER 1000:100\n"
        changed = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, labels={"io.proven-torch.role": "test"})[
            0
        ]
        changed.tag(ref, "changed")
        start = time.monotonic()
        push.push_tag_zstd(client, changed.id, ref, "changed", "changed")
        manifest = registry.manifest("changed")
        out["repush_after_one_file_change_seconds"] = round(time.monotonic() - start, 1)
        out["repush_after_one_file_change_bytes"] = sum(
            int(layer["size"]) for layer in manifest["layers"] if layer["digest"] not in before
        ) + int(manifest["config"]["size"])
        say("cold pull with containerd ...")
        if not containerd_pull(out, f"{ref}@{digest}", docker_pull, "docker_20_10_pull"):
            return out
        say("the same Docker Engine 20.10, pulling zstd ...")
        with SecondDocker(work / "docker2-zstd") as second:
            _, done = second.docker("pull", f"{ref}:zstd", timeout=1800)
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            out["docker_20_10_pull"] = "pulled" if done.returncode == 0 else f"failed: {last[:200]}"
        return out


def main() -> int:
    matrix = load_matrix()
    default = next(v for v in matrix.variants if v.is_default)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--image", default=f"{matrix.name}:{default.name}", help="local image to measure (default: %(default)s)")
    parser.add_argument(
        "--no-docker-pull",
        dest="docker_pull",
        action="store_false",
        help="skip the second dockerd (its exit takes docker0 away for a moment: not while other containers run)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "evidence" / "transport-benchmark.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench-transport: needs root (it starts a second dockerd for a cold docker pull)")
    client = docker_client()
    image = client.images.get(args.image)
    result: dict = {"image": args.image, "image_id": image.id, "uncompressed_bytes": int(image.attrs["Size"])}
    work = Path(tempfile.mkdtemp(prefix="bench-transport-", dir="/var/tmp"))
    # Two phases, gzip then zstd, each with its own empty registry that is deleted at the end
    # of its phase: the disk holds one compressed copy and one unpacked pull at a time.
    try:
        result["gzip"] = gzip_phase(client, image, work, args.docker_pull)
        result["zstd"] = zstd_phase(client, image, work, args.docker_pull)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    gz, zs = result["gzip"], result["zstd"]
    result["ratios"] = {
        "zstd_push_time_vs_gzip": round(zs["cold_push_seconds"] / gz["cold_push_seconds"], 2),
        "zstd_size_vs_gzip": round(zs["compressed_bytes"] / gz["compressed_bytes"], 3),
        "containerd_zstd_pull_time_vs_gzip": round(zs["containerd_cold_pull_seconds"] / gz["containerd_cold_pull_seconds"], 2),
    }
    result["targets"] = {
        "cold push <= 40% of gzip docker push": result["ratios"]["zstd_push_time_vs_gzip"] <= 0.40,
        "zstd compressed <= 3.8 GB": zs["compressed_bytes"] <= 3.8e9,
        "uncompressed <= 8.0 GB": result["uncompressed_bytes"] <= 8.0e9,
        "containerd zstd pull <= 70% of gzip": result["ratios"]["containerd_zstd_pull_time_vs_gzip"] <= 0.70,
        "code-only re-push < 10 MB": zs["repush_after_one_file_change_bytes"] < 10e6,
    }
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "unknown")
    result["machine"] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "system": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "skopeo": run(["skopeo", "--version"]).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
