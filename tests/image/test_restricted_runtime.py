"""The image under the runtime constraints of restricted clusters, proven with Docker.

- Kubernetes' restricted profile (OpenShift alike): an arbitrary UID in group 0, a
  read-only root file system with a writable /tmp, every capability dropped, no new
  privileges. JupyterLab answers with its token, SSH logs in, `proof` passes.
- Apptainer's defaults, emulated: the entrypoint bypassed (`apptainer exec`), a
  read-only root, the calling user's UID and a bind-mounted HOME. Apptainer itself
  does not run on these machines.
"""

from __future__ import annotations

import pytest
import requests

from tests.image.conftest import EXEC_TMP, RESTRICTED
from tests.image.service_helpers import make_keypair, run_command, ssh, wait_for_jupyter, wait_for_sshd
from tests.image.tracked_container import TrackedContainer

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def restricted(docker, image, tmp_path_factory):
    directory = tmp_path_factory.mktemp("restricted")
    key, public = make_keypair(directory)
    with TrackedContainer(docker, image, environment={"PUBLIC_KEY": public}, tmpfs=EXEC_TMP, **RESTRICTED) as container:
        container.start(ports=(8888, 2222))
        token = wait_for_jupyter(container)
        wait_for_sshd(container)
        yield {"container": container, "token": token, "key": key, "known_hosts": directory / "known_hosts"}


def test_jupyterlab_answers_with_its_token_only(restricted):
    base = f"http://127.0.0.1:{restricted['container'].ports[8888]}"
    assert (
        requests.get(f"{base}/api/status", headers={"Authorization": f"token {restricted['token']}"}, timeout=20).status_code
        == 200
    )
    assert requests.get(f"{base}/api/status", timeout=20).status_code in (401, 403)


def test_ssh_logs_in_as_the_arbitrary_uid_and_imports_torch(restricted):
    port = restricted["container"].ports[2222]
    done = ssh(
        port,
        restricted["key"],
        restricted["known_hosts"],
        "id -u; python -c 'import torch; print(torch.__version__)'",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    uid, version = done.stdout.split()
    assert uid == "4321" and version.startswith("2.")


def test_proof_passes_under_the_restricted_profile(docker, image):
    code, logs = run_command(docker, image, ["proof"], timeout=600, tmpfs=EXEC_TMP, **RESTRICTED)
    assert code == 0, logs[-3000:]
    assert "proof: PROVEN on the CPU only" in logs


def test_a_noexec_tmp_is_named_in_one_line(docker, image):
    """Docker's plain --tmpfs /tmp is noexec: the compile check says so instead of failing deep in Inductor."""
    code, logs = run_command(
        docker, image, ["python", "-m", "smoke", "--only", "compile"], timeout=300, tmpfs={"/tmp": ""}, **RESTRICTED
    )
    assert code == 1
    assert "/tmp is mounted noexec" in logs and "--tmpfs /tmp:exec" in logs


def test_apptainer_like_exec_runs_the_proof(docker, image, tmp_path):
    """`apptainer exec IMAGE proof`: no entrypoint, read-only root, the caller's UID, HOME bind-mounted."""
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    code, logs = run_command(
        docker,
        image,
        [],
        timeout=600,
        entrypoint=["proof"],
        user="4321:4321",
        read_only=True,
        tmpfs=EXEC_TMP,
        shm_size="1g",
        volumes={str(home): {"bind": "/home/caller", "mode": "rw"}},
        environment={"HOME": "/home/caller", "USER": "caller", "LOGNAME": "caller"},
    )
    assert code == 0, logs[-3000:]
    assert "proof: PROVEN on the CPU only" in logs
