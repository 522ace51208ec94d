"""Facts about a running container of the image, read like a spec sheet (pytest-testinfra).

One fact per test. The container is the image's default command with a public
key given, so JupyterLab and sshd both run.
"""

from __future__ import annotations

import pytest
import testinfra

from tests.image.service_helpers import make_keypair, wait_for_jupyter, wait_for_sshd
from tests.image.tracked_container import TrackedContainer

pytestmark = pytest.mark.image

SSHD_CONFIG = "/tmp/proven-torch/sshd_config"  # what start.sh generated (it includes the image's policy)


@pytest.fixture(scope="module")
def container(docker, image, tmp_path_factory):
    _, public = make_keypair(tmp_path_factory.mktemp("facts"))
    with TrackedContainer(docker, image, environment={"PUBLIC_KEY": public}) as tracked:
        tracked.start(ports=(8888, 2222))
        wait_for_jupyter(tracked)
        wait_for_sshd(tracked)
        yield tracked


@pytest.fixture(scope="module")
def host(container):
    """The container as its own user (docker exec, like the healthcheck)."""
    return testinfra.get_host(f"docker://{container.container.id}")


@pytest.fixture(scope="module")
def root_host(container):
    return testinfra.get_host(f"docker://root@{container.container.id}")


@pytest.fixture(scope="module")
def sshd_settings(host):
    """`sshd -T`: the settings sshd really uses, lower-cased keys."""
    settings: dict[str, str] = {}
    for line in host.check_output(f"/usr/sbin/sshd -T -f {SSHD_CONFIG}").splitlines():
        key, _, value = line.partition(" ")
        settings.setdefault(key, value)
    return settings


# --- the user ---------------------------------------------------------------------


def test_runs_as_user(host):
    assert host.user().name == "user"


def test_user_has_the_matrixs_uid_and_gid(host, matrix):
    assert (host.user(matrix.user).uid, host.user(matrix.user).gid) == (matrix.uid, matrix.gid)


def test_workspace_belongs_to_the_user(host, matrix):
    assert host.file("/workspace").uid == matrix.uid


def test_workspace_is_group_writable_setgid(host):
    assert host.file("/workspace").mode == 0o2775


def test_no_sudo(host):
    assert not host.exists("sudo")


def test_root_has_no_password(root_host):
    assert root_host.check_output("getent shadow root | cut -d: -f2") in ("*", "!", "!*")


def test_no_process_runs_as_root(host):
    assert set(host.check_output("ps -e -o user=").split()) == {"user"}


def test_pid_1_is_tini(host):
    assert host.process.get(pid=1).comm == "tini"


# --- SSH files ----------------------------------------------------------------------


def test_ssh_dir_mode_0700(host):
    assert host.file("/home/user/.ssh").mode == 0o700


def test_authorized_keys_mode_0600(host):
    assert host.file("/home/user/.ssh/authorized_keys").mode == 0o600


def test_authorized_keys_belongs_to_the_user(host):
    assert host.file("/home/user/.ssh/authorized_keys").user == "user"


def test_ssh_environment_mode_0600(host):
    assert host.file("/home/user/.ssh/environment").mode == 0o600


def test_host_key_dir_mode_0700(host):
    assert host.file("/workspace/.ssh-host-keys").mode == 0o700


def test_host_private_key_mode_0600(host):
    assert host.file("/workspace/.ssh-host-keys/ssh_host_ed25519_key").mode == 0o600


def test_dedicated_host_key_dir_belongs_to_the_user(host):
    key_dir = host.file("/var/lib/proven-torch/ssh-host-keys")
    assert (key_dir.user, key_dir.mode) == ("user", 0o700)


def test_no_host_keys_in_etc_ssh(host):
    assert host.check_output("find /etc/ssh -name 'ssh_host_*'") == ""


# --- sshd settings that matter ------------------------------------------------------


def test_sshd_password_authentication_no(sshd_settings):
    assert sshd_settings["passwordauthentication"] == "no"


def test_sshd_permit_root_login_no(sshd_settings):
    assert sshd_settings["permitrootlogin"] == "no"


def test_sshd_kbd_interactive_authentication_no(sshd_settings):
    assert sshd_settings["kbdinteractiveauthentication"] == "no"


def test_sshd_pubkey_authentication_yes(sshd_settings):
    assert sshd_settings["pubkeyauthentication"] == "yes"


def test_sshd_authentication_methods_publickey(sshd_settings):
    assert sshd_settings["authenticationmethods"] == "publickey"


def test_sshd_permit_empty_passwords_no(sshd_settings):
    assert sshd_settings["permitemptypasswords"] == "no"


def test_sshd_port_2222(sshd_settings):
    assert sshd_settings["port"] == "2222"


def test_sshd_allows_only_the_user(sshd_settings):
    assert sshd_settings["allowusers"] == "user"


def test_sshd_runs_as_the_user(host):
    # One `ps` snapshot: testinfra's process.filter lists PIDs, then asks each for its user, and a
    # per-connection sshd (a health check's) that ended in between failed this test now and then.
    users = set(host.check_output("ps -C sshd -o user=").split())
    assert users == {"user"}


# --- what listens -------------------------------------------------------------------


def test_jupyter_listens_on_8888(host):
    assert host.socket("tcp://0.0.0.0:8888").is_listening


def test_sshd_listens_on_2222(host):
    assert host.socket("tcp://0.0.0.0:2222").is_listening


def test_nothing_else_listens(host):
    assert {s.split(":")[-1] for s in host.socket.get_listening_sockets() if s.startswith("tcp")} == {"8888", "2222"}


@pytest.mark.parametrize("package", ["pip", "jupyterlab", "gymnasium", "tqdm"])
def test_package_is_the_pinned_version(host, variant, package):
    """pip included: the seed pip that python3-venv puts in the venv is replaced by the matrix's."""
    assert host.pip.get_packages(pip_path="/opt/venv/bin/pip")[package]["version"] == dict(variant.packages)[package]


# --- NCCL's inter-node transports ------------------------------------------------------


@pytest.mark.parametrize("package", ["libibverbs1", "ibverbs-providers", "librdmacm1"])
def test_rdma_user_space_is_installed(host, package):
    """Debian's rdma-core libraries: NCCL opens libibverbs at run time for InfiniBand/RoCE."""
    assert host.package(package).is_installed


def test_verbs_providers_include_mellanox(host):
    assert host.run("ls /usr/lib/x86_64-linux-gnu/libibverbs/").stdout.count("libmlx5-rdmav") == 1


def test_the_start_up_report_names_nccls_transports(container):
    """The libraries are there; the devices are the host's (none on the machines CI runs on)."""
    from pathlib import Path

    line = next(ln for ln in container.logs().splitlines() if ln.startswith("NCCL transports: "))
    if any(Path("/sys/class/infiniband").glob("*")):  # a host with RDMA, not passed in with --device
        assert "/dev/infiniband is not passed in, so NCCL falls back to TCP" in line
    else:
        assert line == (
            "NCCL transports: TCP sockets; no InfiniBand/RoCE device visible (rdma-core is installed for hosts that have one)"
        )
