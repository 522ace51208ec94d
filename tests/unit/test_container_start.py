"""container/start.sh's pure parts, sourced in bash on this host (no Docker):
token handling and public-key checks. The process model itself is tested in
the image (tests/image/test_jupyter_lifecycle.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

START_SH = Path(__file__).resolve().parents[2] / "container" / "start.sh"


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `script` after sourcing start.sh (which then defines its functions only)."""
    full_env = {"PATH": os.environ["PATH"], **(env or {})}
    return subprocess.run(
        ["bash", "-c", f'source "{START_SH}"\n{script}'], capture_output=True, text=True, timeout=60, env=full_env
    )


def test_syntax():
    assert subprocess.run(["bash", "-n", str(START_SH)], capture_output=True, timeout=30).returncode == 0


def test_sourcing_runs_nothing():
    result = bash("echo sourced")
    assert (result.returncode, result.stdout, result.stderr) == (0, "sourced\n", "")


@pytest.mark.parametrize("value", ["", None])
def test_an_empty_or_missing_token_is_generated(value):
    env = {} if value is None else {"JUPYTER_TOKEN": value}
    result = bash('setup_token; echo "$JUPYTER_TOKEN $TOKEN_GENERATED"', env=env)
    token, generated = result.stdout.split()
    assert re.fullmatch(r"[0-9a-f]{48}", token) and generated == "true", result.stderr  # 24 random bytes, hex
    again = bash('setup_token; echo "$JUPYTER_TOKEN"', env=env).stdout.strip()
    assert again != token  # generated anew, not a constant


def test_a_given_token_is_kept():
    result = bash('setup_token; echo "$JUPYTER_TOKEN $TOKEN_GENERATED"', env={"JUPYTER_TOKEN": "mine"})
    assert result.stdout.split() == ["mine", "false"]


def test_a_token_file_is_read(tmp_path):
    (tmp_path / "token").write_text("from-a-file\n")
    result = bash('setup_token; echo "$JUPYTER_TOKEN"', env={"JUPYTER_TOKEN_FILE": str(tmp_path / "token")})
    assert result.stdout == "from-a-file\n"


@pytest.fixture
def public_key(tmp_path):
    if not shutil.which("ssh-keygen"):
        pytest.fail("ssh-keygen is missing on this host (Debian: openssh-client)")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "me@laptop", "-f", str(tmp_path / "k")], check=True, timeout=30
    )
    return (tmp_path / "k.pub").read_text().strip(), (tmp_path / "k").read_text()


def load_ssh_keys():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ssh_keys", START_SH.parent / "ssh_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ssh_keys = load_ssh_keys()


def test_a_valid_key_is_kept(public_key):
    assert ssh_keys.vet("PUBLIC_KEY", public_key[0]) == ([public_key[0]], [])


def test_several_keys_comments_blank_lines_and_options(public_key):
    key = public_key[0]
    keys, bad = ssh_keys.vet("PUBLIC_KEY", f"# mine\n\n{key}\r\nrestrict {key}\n")
    assert (keys, bad) == ([key, f"restrict {key}"], [])


def test_a_malformed_key_is_reported_with_its_line(public_key):
    keys, bad = ssh_keys.vet("PUBLIC_KEY", f"{public_key[0]}\nssh-ed25519 AAAAnotakey me@laptop")
    assert keys == [public_key[0]]
    assert bad == ["PUBLIC_KEY line 2 ('ssh-ed25519 AAAAnotakey ...') is not a valid SSH public key"]


def test_a_private_key_is_refused_whole(public_key):
    keys, bad = ssh_keys.vet("PUBLIC_KEY", public_key[1])
    assert keys == [] and bad == ["PUBLIC_KEY holds a PRIVATE key (give the .pub file)"]


def test_install_writes_the_keys_with_its_header_and_mode_600(public_key, tmp_path):
    ok, lines = ssh_keys.install(tmp_path, {"PUBLIC_KEY": public_key[0]}, os.getuid())
    file = tmp_path / ".ssh" / "authorized_keys"
    assert ok and lines == []
    assert file.read_text() == f"{ssh_keys.HEADER}\n{public_key[0]}\n" and file.stat().st_mode & 0o777 == 0o600


def test_install_keeps_a_mounted_file_and_says_the_given_keys_were_not_added(public_key, tmp_path):
    (tmp_path / ".ssh").mkdir()
    own = tmp_path / ".ssh" / "authorized_keys"
    own.write_text(public_key[0] + "\n")
    own.chmod(0o600)
    ok, lines = ssh_keys.install(tmp_path, {"PUBLIC_KEY": public_key[0]}, os.getuid())
    assert ok and own.read_text() == public_key[0] + "\n"
    assert lines == [
        "SSH: ignored: ~/.ssh/authorized_keys is your own (mounted) file, so the keys from PUBLIC_KEY / PUBLIC_KEY_FILE "
        "were not added to it; nothing else was changed."
    ]


def test_install_with_no_key_leaves_ssh_off_and_removes_old_keys(public_key, tmp_path):
    assert ssh_keys.install(tmp_path, {"PUBLIC_KEY": public_key[0]}, os.getuid())[0]
    ok, lines = ssh_keys.install(tmp_path, {}, os.getuid())
    assert not ok and not (tmp_path / ".ssh" / "authorized_keys").exists()
    assert lines == ["SSH: off (no key given: set PUBLIC_KEY or PUBLIC_KEY_FILE, or mount ~/.ssh/authorized_keys)."]


def test_install_with_only_a_bad_key_is_one_line_saying_the_format(tmp_path):
    ok, lines = ssh_keys.install(tmp_path, {"PUBLIC_KEY": "ssh-ed25519 AAAAnotakey me"}, os.getuid())
    assert not ok and len(lines) == 1
    assert lines[0].startswith("SSH: off: PUBLIC_KEY line 1") and lines[0].endswith("as in ~/.ssh/id_ed25519.pub.")


def test_an_unreadable_key_file_is_named(tmp_path):
    ok, lines = ssh_keys.install(tmp_path, {"PUBLIC_KEY_FILE": str(tmp_path / "missing.pub")}, 1234)
    assert not ok and f"PUBLIC_KEY_FILE={tmp_path / 'missing.pub'} cannot be read" in lines[0] and "UID 1234" in lines[0]


def test_sshd_log_filter_drops_only_the_healthcheck_probe_lines():
    sshd_stderr = (
        "Server listening on 0.0.0.0 port 2222.\r\n"
        "kex_exchange_identification: Connection closed by remote host\r\n"
        "Connection closed by 127.0.0.1 port 54038\r\n"
        "Accepted publickey for user from 172.17.0.1 port 59456 ssh2\r\n"
        "Connection closed by authenticating user user 172.17.0.1 port 59480 [preauth]\r\n"
    )
    result = subprocess.run(
        ["bash", "-c", f'source "{START_SH}"; sed -u -e "$SSHD_LOG_FILTER"'],
        input=sshd_stderr,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stdout.splitlines() == [
        "Server listening on 0.0.0.0 port 2222.",
        "Accepted publickey for user from 172.17.0.1 port 59456 ssh2",
        "Connection closed by authenticating user user 172.17.0.1 port 59480 [preauth]",
    ]


def test_an_unreadable_token_file_gives_a_generated_token_and_a_log_line(tmp_path):
    result = bash('setup_token; echo "$TOKEN_GENERATED"', env={"JUPYTER_TOKEN_FILE": str(tmp_path / "missing")})
    assert result.stdout == "true\n"
    assert "cannot be read" in result.stderr


@pytest.fixture
def examples(tmp_path):
    """(notebooks folder with one example, an empty workspace)."""
    source = tmp_path / "notebooks"
    source.mkdir()
    (source / "ppo-cartpole.ipynb").write_text("{}")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return source, workspace


def test_the_examples_are_copied_into_an_empty_workspace(examples):
    source, workspace = examples
    result = bash(f'EXAMPLES_SRC="{source}"; offer_examples "{workspace}"')
    assert result.returncode == 0 and (workspace / "examples" / "ppo-cartpole.ipynb").is_file()
    assert "copied into the empty workspace" in result.stderr


def test_a_workspace_with_anything_in_it_is_left_alone(examples):
    source, workspace = examples
    (workspace / ".hidden").write_text("mine")
    result = bash(f'EXAMPLES_SRC="{source}"; offer_examples "{workspace}"')
    assert result.returncode == 0 and sorted(p.name for p in workspace.iterdir()) == [".hidden"]
    assert f"cp -r {source} {workspace}/examples" in result.stderr


@pytest.mark.parametrize(
    ("host_port", "line"),
    [("2299", "ssh -p 2299 user@127.0.0.1"),
     (None, "ssh -p PORT user@127.0.0.1, PORT being what `docker port HOSTID 2222` prints on the host"),
     ("22x", "ssh -p PORT user@127.0.0.1, PORT being what `docker port HOSTID 2222`"),
     ("70000", "ssh -p PORT user@127.0.0.1")],
)  # fmt: skip
def test_the_start_logs_ssh_line_is_one_to_copy_or_says_how_to_find_the_port(host_port, line):
    """No <placeholder> to edit: the host's port when SSH_HOST_PORT says it, else the command that finds it."""
    env = {"HOSTNAME": "HOSTID"} if host_port is None else {"SSH_HOST_PORT": host_port}
    result = bash("hostname() { echo HOSTID; }; ssh_line 2222 user", env=env)
    assert result.returncode == 0 and result.stdout.startswith(line) and "<" not in result.stdout, result.stdout
