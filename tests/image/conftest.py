"""The default image (2.9-cu128), built, validated and pushed once per test session.

The session fixture runs the real pipeline (build.py's stages): BuildKit build,
validation inside containers, tagging, push to the registry on 127.0.0.1:5000, signed with a
key made for the session (its log kept, to check the key never shows in it).
Every other image test uses the image it produced.

Set PROVEN_TORCH_TEST_IMAGE=<image id or ref> to reuse an image while
developing; CI never sets it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.attest import KeySource
from pipeline.docker_env import docker_client
from pipeline.errors import DockerUnavailable
from pipeline.line import RunResult, run
from pipeline.request import Request
from pipeline.variants import load_matrix, resolve
from tests.conftest import docker_required

REGISTRY = os.environ.get("TEST_REGISTRY", "localhost:5000")
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def registry_manifest(ref: str):
    """GET the manifest of REGISTRY/REPO:TAG from the test registry, as a client pulling it would."""
    import requests

    from pipeline.registry import MANIFEST_TYPES

    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    return requests.get(f"http://{REGISTRY}/v2/{repo}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=30)


def manifest_inspect(ref: str) -> subprocess.CompletedProcess:
    """`docker manifest inspect` of a ref on the test registry, as a user would read an index
    (plain HTTP on 127.0.0.1; the command is experimental in Docker 20.10's CLI)."""
    env = {"DOCKER_CLI_EXPERIMENTAL": "enabled", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(
        ["docker", "manifest", "inspect", "--insecure", ref], capture_output=True, text=True, timeout=60, env=env
    )


def ca_cert() -> Path | None:
    if os.environ.get("BUILD_CA_CERT"):
        return Path(os.environ["BUILD_CA_CERT"])
    return SYSTEM_CA if SYSTEM_CA.is_file() else None


TEST_LABELS = {"io.proven-torch.role": "test"}  # what scripts/ci-cleanup.sh removes
# chromium as the report and browser tests start it: headless, no sandbox, no background traffic
HEADLESS_CHROMIUM = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def need_chromium() -> str:
    """The chromium to start; the test fails (never skips) on a host without one."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed on this host (scripts/prepare-host.sh --test-tools installs it)")
    return CHROMIUM


# Kubernetes' restricted profile as Docker says it (test_restricted_runtime.py, test_desktop.py):
# an arbitrary UID in group 0, a read-only root, no capability, no new privileges.
RESTRICTED = dict(user="4321:0", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"], shm_size="1g")
EXEC_TMP = {"/tmp": "exec"}  # Docker's --tmpfs is noexec unless told; a Kubernetes emptyDir is not


def opened(digest: str, ref: str, public_path) -> list[dict]:
    """The statements about `digest` whose signature the public key verifies, as JSON."""
    from pipeline import attest, referrers, registry

    key = attest.load_public_key(public_path)
    client = registry.Registry(registry.parse_ref(f"{ref}@{digest}"))
    return [json.loads(attest.open_envelope(json.loads(e), key, "test")) for e in referrers.envelopes_about(client, digest)]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A key pair the container authorizes, one it does not, and a known_hosts file of the test's own."""
    from tests.image.service_helpers import make_keypair

    directory = tmp_path_factory.mktemp("ssh")
    key, public = make_keypair(directory, "id_ed25519")
    other, _ = make_keypair(directory, "not_authorized")
    return {"key": key, "public": public, "other": other, "known_hosts": directory / "known_hosts"}


@pytest.fixture(scope="session")
def docker():
    try:
        return docker_client()
    except DockerUnavailable as err:
        if docker_required():
            pytest.fail(f"Docker is required here (CI): {err}")
        pytest.skip(f"no Docker: {err}")


@pytest.fixture(scope="session")
def matrix():
    return load_matrix()


@pytest.fixture(scope="session")
def variant(matrix):
    return resolve(matrix, matrix.default_cuda)


class _Tee:
    """stdout to the terminal (pytest's capture) and to a file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding: the terminal's
        return getattr(self.streams[0], name)


@pytest.fixture(scope="session")
def sign_keys(tmp_path_factory) -> dict[str, Path]:
    """The session's signing key pair (build.py keygen --encrypt's, made by the signer), outside the checkout;
    its passphrase in a file of its own."""
    from pipeline.attest import keygen

    folder = tmp_path_factory.mktemp("signing")
    passphrase = folder / "passphrase"
    passphrase.write_text("a session passphrase\n")
    passphrase.chmod(0o600)
    private, public, _ = keygen(folder / "keys", encrypt=True, passphrase_file=passphrase)
    return {"private": private, "public": public, "passphrase": passphrase}


@pytest.fixture(scope="session")
def run_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run-log") / "pipeline.log"


def pushed_request(matrix, variant, repo: str, report_dir: Path, sign_keys: dict | None = None, **more) -> Request:
    """A run of `variant` that pushes to the test registry's `repo`, validated on the CPU, signed with the
    session's keys where given."""
    key = KeySource(sign_keys["private"], sign_keys["passphrase"]) if sign_keys else None
    return Request(
        matrix=matrix,
        variant=variant,
        push=True,
        registry=REGISTRY,
        repo=repo,
        ca_cert=ca_cert(),
        allow_cpu_validation=True,
        report_dir=report_dir,
        sign_key=key,
        **more,
    )


@pytest.fixture(scope="session")
def pipeline_run(docker, matrix, variant, tmp_path_factory, sign_keys, run_log) -> RunResult | None:
    """Build, validate, push and sign the default variant through the real pipeline."""
    if os.environ.get("PROVEN_TORCH_TEST_IMAGE"):
        return None
    config = pushed_request(
        matrix,
        variant,
        "proven-torch-test",
        tmp_path_factory.mktemp("reports"),
        sign_keys,
        command=("python", "build.py", "--push", "--registry", REGISTRY, "--repo", "proven-torch-test", "--sign-key", "KEY"),
    )
    with run_log.open("w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)):
        return run(config)


@pytest.fixture(scope="session")
def run_result(pipeline_run) -> RunResult:
    """The session's pipeline run; its tests skip where PROVEN_TORCH_TEST_IMAGE replaced it."""
    if pipeline_run is None:
        pytest.skip("PROVEN_TORCH_TEST_IMAGE given: the pipeline run was skipped")
    return pipeline_run


@pytest.fixture(scope="session")
def report(run_result) -> dict:
    """The session's report.json (test_rlhf_flavor.py has its own: the flavor's)."""
    return json.loads(run_result.report_path.read_text())


@pytest.fixture(scope="session")
def image(docker, pipeline_run) -> str:
    """The ID of the validated (and stamped) default image."""
    if pipeline_run is None:
        return docker.images.get(os.environ["PROVEN_TORCH_TEST_IMAGE"]).id
    return pipeline_run.stamped_id


@pytest.fixture
def readonly_registry(tmp_path):
    """A real registry (Debian's docker-registry) in read-only mode: it answers every upload with an error.
    Yields its host:port."""
    import shutil
    import subprocess

    import requests

    from tests.image.tracked_container import free_port, wait_until

    exe = shutil.which("docker-registry")
    assert exe, "Debian's docker-registry is needed (scripts/prepare-host.sh --test-tools installs it)"
    port = free_port()
    config = tmp_path / "readonly.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
        f"  maintenance:\n    readonly:\n      enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    server = subprocess.Popen([exe, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).ok, 30, "the read-only registry")
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)
