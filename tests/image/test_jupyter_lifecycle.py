"""The container's process model: tini runs start.sh; a user command runs directly;
the services stop cleanly on a signal; a crashed JupyterLab stops the container;
a bad key or another UID does not stop JupyterLab.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.image.service_helpers import FAST_HEALTHCHECK, Jupyter, make_keypair, wait_for_jupyter, wait_for_sshd
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image


# --- user commands run directly -----------------------------------------------------


def test_a_user_command_keeps_its_exit_status_and_output(docker, image):
    with TrackedContainer(
        docker, image, command=["python", "-c", "import sys; print('hello from x.py'); sys.exit(7)"]
    ) as container:
        container.start()
        assert container.wait_exit(timeout=120) == 7
        assert container.logs() == "hello from x.py\n"


def test_a_user_command_output_is_unbuffered(docker, image):
    command = ["python", "-c", "import time; print('step 1', flush=False); time.sleep(120)"]
    with TrackedContainer(docker, image, command=command) as container:
        container.start()
        container.wait_for_log("step 1", timeout=60)


def test_a_user_command_replaces_start_sh_under_tini(docker, image):
    with TrackedContainer(docker, image, command=["bash", "-c", "cat /proc/1/comm /proc/$PPID/comm"]) as container:
        container.start()
        assert container.wait_exit(timeout=60) == 0
        assert container.logs().split() == ["tini", "tini"]  # start.sh exec'd the command


def test_another_uid_gets_a_home_and_a_login_name(docker, image):
    command = ["bash", "-c", 'whoami && echo "$HOME" && touch "$HOME/x" && python -c "import getpass; print(getpass.getuser())"']
    with TrackedContainer(docker, image, command=command, user="1234:1234") as container:
        container.start()
        assert container.wait_exit(timeout=60) == 0, container.logs()
        assert container.logs().split() == ["user", "/tmp/proven-torch/home", "user"]


# --- signals and crashes ------------------------------------------------------------


def test_docker_stop_stops_everything_cleanly(docker, image, tmp_path):
    _, public = make_keypair(tmp_path)
    with TrackedContainer(docker, image, environment={"PUBLIC_KEY": public}) as container:
        container.start(ports=(8888, 2222))
        wait_for_jupyter(container)
        wait_for_sshd(container)
        started = time.monotonic()
        container.container.stop(timeout=30)
        assert container.wait_exit(timeout=60) == 0, container.logs()[-3000:]
        assert time.monotonic() - started < 20  # well before Docker's SIGKILL
        assert "got SIGTERM; stopping JupyterLab and sshd" in container.logs()


def test_a_killed_jupyter_stops_the_container_with_its_status(docker, image):
    with TrackedContainer(docker, image) as container:
        container.start()
        wait_for_jupyter(container)
        code, out = container.exec(["bash", "-c", "kill -KILL $(sed -n 's/^jupyter //p' /tmp/proven-torch/services)"])
        assert code == 0, out
        assert container.wait_exit(timeout=60) == 137
        assert "JupyterLab exited with status 137; stopping the container" in container.logs()


def test_a_dead_sshd_turns_the_container_unhealthy(docker, image, tmp_path):
    _, public = make_keypair(tmp_path)
    with TrackedContainer(docker, image, environment={"PUBLIC_KEY": public}, healthcheck=FAST_HEALTHCHECK) as container:
        container.start(ports=(8888, 2222))
        wait_for_jupyter(container)
        wait_until(lambda: container.health() == "healthy", 60, "a healthy container")
        code, out = container.exec(["bash", "-c", "kill -KILL $(cat /tmp/proven-torch/sshd.pid)"])
        assert code == 0, out
        wait_until(lambda: container.health() == "unhealthy", 60, "an unhealthy container")
        assert container.reload().status == "running"  # JupyterLab keeps serving


def test_an_empty_token_flag_is_refused(docker, image):
    with TrackedContainer(docker, image, command=["jupyter-lab", "--IdentityProvider.token="]) as container:
        container.start()
        assert container.wait_exit(timeout=60) == 2
        assert "refusing to start JupyterLab without a token (IdentityProvider.token is empty)" in container.logs()


def test_an_empty_token_in_a_config_file_is_refused_before_the_server_starts(docker, image, tmp_path):
    (tmp_path / "jupyter_server_config.py").write_text('c.ServerApp.token = ""\n')
    tmp_path.chmod(0o755)
    volumes = {str(tmp_path): {"bind": "/config", "mode": "ro"}}
    with TrackedContainer(docker, image, environment={"JUPYTER_CONFIG_DIR": "/config"}, volumes=volumes) as container:
        container.start()
        assert container.wait_exit(timeout=60) == 2
        logs = container.logs()
        # Jupyter itself maps the deprecated ServerApp.token onto IdentityProvider.token.
        assert "refusing to start JupyterLab without a token (IdentityProvider.token is empty)" in logs
        assert "Jupyter Server" not in logs and "is running at" not in logs  # no server ever listened


# --- a bad key, another UID: JupyterLab still serves --------------------------------


def test_a_malformed_public_key_gives_one_log_line_and_jupyter_serves(docker, image):
    with TrackedContainer(
        docker, image, environment={"PUBLIC_KEY": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAthisisnotakey me@laptop"}
    ) as container:
        container.start(ports=(8888,))
        token = wait_for_jupyter(container)
        ssh_lines = [line for line in container.logs().splitlines() if line.startswith("start.sh: SSH")]
        assert len(ssh_lines) == 1, ssh_lines
        assert "PUBLIC_KEY line 1" in ssh_lines[0] and "is not a valid SSH public key" in ssh_lines[0]
        assert Jupyter(container.ports[8888], token).get("/api/kernels").status_code == 200


@pytest.mark.parametrize("user", ["1234:1234", "1234:100"])
def test_another_uid_with_a_bind_mount_serves_and_writes(docker, image, tmp_path, user):
    uid, gid = (int(x) for x in user.split(":"))
    host_dir = tmp_path / "work"
    host_dir.mkdir()
    os.chown(host_dir, uid, gid)
    volumes = {str(host_dir): {"bind": "/workspace", "mode": "rw"}}
    with TrackedContainer(docker, image, user=user, volumes=volumes) as container:
        container.start(ports=(8888,))
        token = wait_for_jupyter(container)
        jupyter = Jupyter(container.ports[8888], token)
        response = jupyter.request(
            "PUT", "/api/contents/from-jupyter.txt", json={"type": "file", "format": "text", "content": "written by JupyterLab\n"}
        )
        assert response.status_code == 201, response.text
        written = host_dir / "from-jupyter.txt"
        assert written.read_text() == "written by JupyterLab\n"
        assert (written.stat().st_uid, written.stat().st_gid) == (uid, gid)
        assert "Permission denied" not in container.logs()
