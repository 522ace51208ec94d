"""SSH into the image with OpenSSH's own client, as a user would.

One container (JupyterLab + sshd, PUBLIC_KEY given, a named volume on
/workspace) serves most tests; persistence and host identity need containers
of their own, started with the `sshd` command (no JupyterLab: faster).
"""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from tests.image.conftest import TEST_LABELS
from tests.image.service_helpers import (
    LOGIN,
    Jupyter,
    client_options,
    host_keys,
    lab_and_sshd,
    run_command,
    ssh,
    ssh_argv,
    wait_for_sshd,
)
from tests.image.tracked_container import TrackedContainer, wait_until

pytestmark = pytest.mark.image


@pytest.fixture
def volume(docker):
    vol = docker.volumes.create(labels=TEST_LABELS)
    yield vol.name
    vol.remove(force=True)


@pytest.fixture(scope="module")
def box(docker, image, keys):
    """JupyterLab and sshd together, as `docker run -p ... -e PUBLIC_KEY=... IMAGE` makes them."""
    with lab_and_sshd(docker, image, keys["public"], TEST_LABELS) as running:
        yield running


def test_a_batch_job_imports_torch_and_writes_to_workspace(box, keys):
    _, port, _ = box
    job = 'python -c \'import torch; open("/workspace/job.txt", "w").write(torch.__version__)\' && cat /workspace/job.txt'
    result = ssh(port, keys["key"], keys["known_hosts"], job, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("2."), result.stdout


def test_the_recipes_training_command_leaves_its_run_in_the_workspace(box, keys):
    """docs/using-the-image.md's batch job: python -m ppo_bench into runs/, a result, a curve, TensorBoard
    events and a checkpoint under /workspace."""
    _, port, _ = box
    job = "python -m ppo_bench --out-dir runs/recipe --total-timesteps 20000 --no-progress >/dev/null && ls runs/recipe"
    result = ssh(port, keys["key"], keys["known_hosts"], job, timeout=300)
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split()
    assert {"result.json", "learning_curve.png", "checkpoint.pt"} <= set(listed), listed
    assert any(name.startswith("events.out.tfevents.") for name in listed), listed


def test_a_session_has_the_container_environment(box, keys, variant):
    _, port, _ = box
    result = ssh(
        port,
        keys["key"],
        keys["known_hosts"],
        "command -v python; echo $NVIDIA_VISIBLE_DEVICES $PROVEN_TORCH_VARIANT; echo $PATH",
    )
    assert result.returncode == 0, result.stderr
    python, nvidia, path = result.stdout.splitlines()
    assert python == "/opt/venv/bin/python"
    assert nvidia.split() == ["all", variant.name]
    assert path.startswith("/opt/venv/bin:")


def test_a_login_shell_has_the_container_environment(box, keys):
    _, port, _ = box
    # /etc/profile resets PATH in login shells; /etc/profile.d/proven-torch.sh restores it.
    result = ssh(
        port,
        keys["key"],
        keys["known_hosts"],
        ["bash", "-lc", shlex.quote("command -v python; echo $NVIDIA_DRIVER_CAPABILITIES")],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/opt/venv/bin/python", "compute,utility,graphics"]


def test_the_login_is_the_unprivileged_user_in_the_workspace(box, keys, matrix):
    _, port, _ = box
    result = ssh(port, keys["key"], keys["known_hosts"], "id -u; id -un; pwd; echo $HOME")
    assert result.stdout.split() == [str(matrix.uid), matrix.user, "/workspace", f"/home/{matrix.user}"], result.stderr


def test_an_interactive_login_starts_in_the_workspace_and_scripts_stay_where_they_run(box, keys):
    """A login shell (`ssh HOST` then typing) starts in /workspace too; a script the session runs later keeps its own
    working directory (the move happens once per session)."""
    _, port, _ = box
    argv = ssh_argv(port, keys["key"], keys["known_hosts"], [])
    login = subprocess.run([argv[0], "-tt", *argv[1:]], input="echo at:$PWD\nexit\n", capture_output=True, text=True, timeout=60)
    assert "at:/workspace" in login.stdout.replace("\r", ""), (login.stdout, login.stderr)
    nested = ssh(port, keys["key"], keys["known_hosts"], "cd /tmp && bash -c pwd && echo ${PROVEN_TORCH_SSH_WORKDIR:-unset}")
    assert nested.stdout.split() == ["/tmp", "unset"], nested.stderr


def test_scp_copies_into_workspace(box, keys, tmp_path):
    _, port, _ = box
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n")
    argv = [
        "scp",
        "-P",
        str(port),
        *client_options(keys["key"], keys["known_hosts"]),
        str(local),
        f"{LOGIN}@127.0.0.1:/workspace/data.csv",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert ssh(port, keys["key"], keys["known_hosts"], "cat /workspace/data.csv").stdout == "a,b\n1,2\n"


def test_jupyter_serves_beside_sshd(box):
    container, _, token = box
    assert Jupyter(container.ports[8888], token).get("/api/kernels").status_code == 200


def test_healthy_with_both_services(box):
    container, _, _ = box
    wait_until(lambda: container.health() == "healthy", 60, "a healthy container")
    assert "sshd accepts connections" in container.reload().attrs["State"]["Health"]["Log"][-1]["Output"]


def test_healthcheck_probes_leave_no_lines_in_the_logs(box):
    container, _, _ = box
    wait_until(lambda: len(container.reload().attrs["State"]["Health"]["Log"]) >= 3, 60, "three healthcheck probes")
    assert "kex_exchange_identification" not in container.logs()
    assert "Connection closed by 127.0.0.1" not in container.logs()


@pytest.mark.parametrize(
    "options",
    [
        ("PreferredAuthentications=password", "PubkeyAuthentication=no", "NumberOfPasswordPrompts=1"),
        ("PreferredAuthentications=keyboard-interactive", "PubkeyAuthentication=no"),
    ],
    ids=["password", "keyboard-interactive"],
)
def test_a_login_without_the_key_is_refused(box, keys, options):
    _, port, _ = box
    result = ssh(port, None, keys["known_hosts"], "true", options=options)
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


def test_root_login_is_refused_even_with_the_right_key(box, keys):
    _, port, _ = box
    result = ssh(port, keys["key"], keys["known_hosts"], "true", user="root")
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


def test_a_wrong_key_is_refused(box, keys):
    _, port, _ = box
    result = ssh(port, keys["other"], keys["known_hosts"], "true")
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


# --- persistence and identity ---------------------------------------------------------


def test_the_start_log_prints_a_login_line_to_copy(docker, image, keys):
    """No placeholder: with SSH_HOST_PORT the line names the host's port; without it, the command that finds it
    (the container's hostname is its ID, which `docker port` takes)."""
    for environment, want in (({"SSH_HOST_PORT": "2299"}, "SSH: ssh -p 2299 user@127.0.0.1"), ({}, "docker port ")):
        env = {"PUBLIC_KEY": keys["public"], **environment}
        with TrackedContainer(docker, image, command=["sshd"], environment=env) as container:
            container.start(ports=(2222,))
            wait_for_sshd(container)
            line = next(line for line in container.logs().splitlines() if "SSH: ssh -p" in line)
            assert want in line and "<" not in line, line
            if not environment:
                assert f"docker port {container.container.id[:12]} 2222" in line, line


def test_workspace_and_host_identity_survive_a_recreated_container(docker, image, keys, volume):
    mounts = {volume: {"bind": "/workspace", "mode": "rw"}}
    known_hosts = keys["known_hosts"].with_name("known_hosts_recreated")
    with TrackedContainer(docker, image, command=["sshd"], environment={"PUBLIC_KEY": keys["public"]}, volumes=mounts) as first:
        first.start(ports=(2222,))
        port = wait_for_sshd(first)
        identity = host_keys(port)
        job = "python -c 'import torch' && echo kept > /workspace/result.txt"
        result = ssh(port, keys["key"], known_hosts, job, timeout=120, options=("HostKeyAlias=recreated",))
        assert result.returncode == 0, result.stderr
    with TrackedContainer(docker, image, command=["sshd"], environment={"PUBLIC_KEY": keys["public"]}, volumes=mounts) as second:
        second.start(ports=(2222,))
        port = wait_for_sshd(second)
        assert host_keys(port) == identity
        # ssh itself checks the identity: strict, against what the first container showed.
        result = ssh(
            port,
            keys["key"],
            known_hosts,
            "cat /workspace/result.txt",
            options=("StrictHostKeyChecking=yes", "HostKeyAlias=recreated"),
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == "kept\n"


def test_a_dedicated_host_key_volume_keeps_the_identity(docker, image, keys, volume):
    key_dir = "/var/lib/proven-torch/ssh-host-keys"
    options = {
        "environment": {"PUBLIC_KEY": keys["public"], "SSH_HOST_KEY_DIR": key_dir},
        "volumes": {volume: {"bind": key_dir, "mode": "rw"}},
    }
    identities = []
    for _ in range(2):
        with TrackedContainer(docker, image, command=["sshd"], **options) as container:
            container.start(ports=(2222,))
            identities.append(host_keys(wait_for_sshd(container)))
            assert f"host keys in {key_dir}" in container.logs()
    assert identities[0] == identities[1] and len(identities[0]) == 2


def test_two_containers_have_different_host_keys(docker, image, keys, box):
    _, port, _ = box
    with TrackedContainer(docker, image, command=["sshd"], environment={"PUBLIC_KEY": keys["public"]}) as other:
        other.start(ports=(2222,))
        other_port = wait_for_sshd(other)
        mine, theirs = host_keys(port), host_keys(other_port)
        assert len(mine) == 2 and len(theirs) == 2  # ed25519 and ecdsa
        assert not mine & theirs


def test_public_key_file_is_read(docker, image, keys):
    mounts = {str(keys["key"].with_suffix(".pub")): {"bind": "/run/secrets/ssh_key.pub", "mode": "ro"}}
    environment = {"PUBLIC_KEY_FILE": "/run/secrets/ssh_key.pub"}
    with TrackedContainer(docker, image, command=["sshd"], environment=environment, volumes=mounts) as container:
        container.start(ports=(2222,))
        port = wait_for_sshd(container)
        result = ssh(port, keys["key"], keys["known_hosts"].with_name("kh_file"), "echo in")
        assert result.stdout == "in\n", result.stderr


def test_a_mounted_authorized_keys_file_is_used(docker, image, keys, tmp_path, matrix):
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(keys["public"] + "\n")
    authorized.chmod(0o600)
    os.chown(authorized, matrix.uid, matrix.gid)
    mounts = {str(authorized): {"bind": "/home/user/.ssh/authorized_keys", "mode": "ro"}}
    with TrackedContainer(docker, image, command=["sshd"], volumes=mounts) as container:
        container.start(ports=(2222,))
        port = wait_for_sshd(container)
        result = ssh(port, keys["key"], keys["known_hosts"].with_name("kh_mounted"), "echo in")
        assert result.stdout == "in\n", result.stderr + container.logs()


def test_another_uid_logs_in_as_user(docker, image, keys):
    with TrackedContainer(
        docker, image, command=["sshd"], user="1234:1234", environment={"PUBLIC_KEY": keys["public"]}
    ) as container:
        container.start(ports=(2222,))
        port = wait_for_sshd(container)
        result = ssh(port, keys["key"], keys["known_hosts"].with_name("kh_uid"), "id -u; whoami; command -v python")
        assert result.stdout.split() == ["1234", "user", "/opt/venv/bin/python"], result.stderr + container.logs()


# --- nothing secret in the image ---------------------------------------------------------


def test_the_image_holds_no_host_keys_authorized_keys_or_tokens(docker, image):
    # As root, through the entrypoint's command mode, over the image's own files (no key given).
    command = [
        "find", "/", "/workspace", "-xdev", "(",
        "-name", "ssh_host_*", "-o", "-name", "authorized_keys", "-o", "-name", "authorized_keys2", "-o", "-name", ".ssh-host-keys",
        "-o", "-name", "jpserver-*", "-o", "-name", "jupyter_cookie_secret", "-o", "-name", "*.token", ")",
        "-print",
    ]  # fmt: skip # find's tests grouped as on a command line
    code, found = run_command(docker, image, command, user="0")
    assert (code, found) == (0, ""), found
    env = docker.images.get(image).attrs["Config"]["Env"]
    assert not [e for e in env if e.split("=")[0] in ("JUPYTER_TOKEN", "JUPYTER_PASSWORD_HASH", "PUBLIC_KEY")], env
