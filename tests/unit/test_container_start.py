"""container/start.sh's pure parts, sourced in bash on this host (no Docker):
token handling and public-key checks. The process model itself is tested in
the image (tests/image/test_jupyter_lifecycle.py)."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("flags", [
    ["--IdentityProvider.token="],
    ["--ServerApp.token=''"],
    ["--NotebookApp.token=\"\""],
    ["--port=9999", "--IdentityProvider.token", ""],
    ["--token="],
])  # fmt: skip
def test_flags_that_disable_the_token_are_refused(flags):
    quoted = " ".join(f"'{f}'" if "'" not in f else f'"{f}"' for f in flags)
    result = bash(f"refuse_empty_token_flags {quoted}; echo started")
    assert result.returncode == 2 and "started" not in result.stdout
    assert "refusing to start JupyterLab without a token" in result.stderr


@pytest.mark.parametrize("flags", [[], ["--port=9999"], ["--IdentityProvider.token=abc"], ["--ServerApp.base_url=/x/"]])
def test_other_flags_pass(flags):
    result = bash("refuse_empty_token_flags " + " ".join(f"'{f}'" for f in flags) + "; echo started")
    assert result.stdout == "started\n", result.stderr


@pytest.mark.parametrize("value", ["", None])
def test_an_empty_or_missing_token_is_generated(value):
    env = {} if value is None else {"JUPYTER_TOKEN": value}
    result = bash('setup_token; echo "$JUPYTER_TOKEN $TOKEN_GENERATED"', env=env)
    token, generated = result.stdout.split()
    assert len(token) == 48 and int(token, 16) >= 0 and generated == "true", result.stderr


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


def check_keys(text: str) -> tuple[list[str], list[str]]:
    result = bash(
        'check_keys PUBLIC_KEY "$KEY_TEXT"; printf "K:%s\\n" "${KEYS[@]}"; printf "B:%s\\n" "${BAD_KEYS[@]}"',
        env={"KEY_TEXT": text},
    )
    lines = result.stdout.splitlines()
    return [line[2:] for line in lines if line.startswith("K:") and line != "K:"], [
        line[2:] for line in lines if line.startswith("B:") and line != "B:"
    ]


def test_a_valid_key_is_kept(public_key):
    assert check_keys(public_key[0]) == ([public_key[0]], [])


def test_several_keys_comments_blank_lines_and_options(public_key):
    key = public_key[0]
    keys, bad = check_keys(f"# mine\n\n{key}\r\nrestrict {key}\n")
    assert (keys, bad) == ([key, f"restrict {key}"], [])


def test_a_malformed_key_is_reported_with_its_line(public_key):
    keys, bad = check_keys(f"{public_key[0]}\nssh-ed25519 AAAAnotakey me@laptop")
    assert keys == [public_key[0]]
    assert bad == ["PUBLIC_KEY line 2 ('ssh-ed25519 AAAAnotakey ...') is not a valid SSH public key"]


def test_a_private_key_is_refused_whole(public_key):
    keys, bad = check_keys(public_key[1])
    assert keys == [] and bad == ["PUBLIC_KEY holds a PRIVATE key (give the .pub file)"]


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
        input=sshd_stderr, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.stdout.splitlines() == [
        "Server listening on 0.0.0.0 port 2222.",
        "Accepted publickey for user from 172.17.0.1 port 59456 ssh2",
        "Connection closed by authenticating user user 172.17.0.1 port 59480 [preauth]",
    ]


def test_an_unreadable_token_file_gives_a_generated_token_and_a_log_line(tmp_path):
    result = bash('setup_token; echo "$TOKEN_GENERATED"', env={"JUPYTER_TOKEN_FILE": str(tmp_path / "missing")})
    assert result.stdout == "true\n"
    assert "cannot be read" in result.stderr
