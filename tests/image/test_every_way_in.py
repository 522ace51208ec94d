"""Every way into a container keeps the image's environment: the venv's python and
the pinned torch, whether through `bash -lc` (Slurm job scripts, Kubernetes
`command: [bash, -lc, ...]`), `docker exec ... bash -l`, SSH or a Jupyter terminal.

/etc/profile resets PATH in login shells; /etc/profile.d/proven-torch.sh puts
the image's back. One container (JupyterLab + sshd) serves the module.
"""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest
import websocket

from tests.image.service_helpers import FAST_HEALTHCHECK, make_keypair, run_command, ssh, wait_for_jupyter, wait_for_sshd
from tests.image.tracked_container import TrackedContainer

pytestmark = pytest.mark.image

# 'PRO' + 'BE': a terminal echoes the command line, and only the output may match.
PROBE = "import sys, torch; print('PRO' + 'BE', sys.executable, torch.__version__)"
SHELL_PROBE = f"python -c {shlex.quote(PROBE)}"


def probe_line(output: str) -> tuple[str, str]:
    """(python executable, torch.__version__) from the probe's output."""
    line = next(line for line in output.splitlines() if line.startswith("PROBE "))
    _, executable, version = line.split()
    return executable, version


@pytest.fixture(scope="module")
def expected(docker, image) -> tuple[str, str]:
    """What a plain `docker run IMAGE python ...` sees: the reference every other way must equal."""
    code, output = run_command(docker, image, ["python", "-c", PROBE], timeout=120)
    assert code == 0, output
    return probe_line(output)


@pytest.fixture(scope="module")
def box(docker, image, tmp_path_factory):
    directory = tmp_path_factory.mktemp("ways-in")
    key, public = make_keypair(directory)
    with TrackedContainer(docker, image, environment={"PUBLIC_KEY": public}, healthcheck=FAST_HEALTHCHECK) as container:
        container.start(ports=(8888, 2222))
        token = wait_for_jupyter(container)
        wait_for_sshd(container)
        yield {"container": container, "token": token, "key": key, "known_hosts": directory / "known_hosts"}


def test_the_reference_is_the_venv_and_the_pin(expected, variant):
    assert expected == ("/opt/venv/bin/python", expected[1]) and expected[1].split("+")[0] == variant.torch


def test_bash_lc_through_docker_run(docker, image, expected):
    code, output = run_command(docker, image, ["bash", "-lc", SHELL_PROBE], timeout=120)
    assert code == 0, output
    assert probe_line(output) == expected


def test_bash_lc_as_another_uid(docker, image, expected):
    """Apptainer and OpenShift run images as an arbitrary UID."""
    code, output = run_command(docker, image, ["bash", "-lc", SHELL_PROBE], timeout=120, user="4321:0")
    assert code == 0, output
    assert probe_line(output) == expected


def test_docker_exec_bash_login_shell(box, expected):
    code, output = box["container"].exec(["bash", "-l", "-c", SHELL_PROBE], timeout=120)
    assert code == 0, output
    assert probe_line(output) == expected


def test_ssh_login_shell(box, expected):
    container = box["container"]
    result = ssh(container.ports[2222], box["key"], box["known_hosts"], ["bash", "-lc", shlex.quote(SHELL_PROBE)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert probe_line(result.stdout) == expected


def test_jupyter_terminal(box, expected):
    """A terminal of JupyterLab (bash, a login shell), driven over its websocket as the browser does."""
    import requests

    port, token = box["container"].ports[8888], box["token"]
    headers = {"Authorization": f"token {token}"}
    name = requests.post(f"http://127.0.0.1:{port}/api/terminals", headers=headers, timeout=30).json()["name"]
    url = f"ws://127.0.0.1:{port}/terminals/websocket/{name}"
    ws = websocket.create_connection(url, header=[f"Authorization: token {token}"], timeout=5)
    output, sent, deadline = "", False, time.monotonic() + 120
    try:
        # the probe's whole line, newline included: a websocket message can end inside it ("PROBE /opt/venv/bin/python ")
        while time.monotonic() < deadline and not re.search(r"^PROBE \S+ \S+\n", output.replace("\r", ""), re.M):
            try:
                message = json.loads(ws.recv())
            except websocket.WebSocketTimeoutException:
                continue  # every wait is bounded by the deadline, not by the server's pings
            if message[0] == "stdout":
                output += message[1]
                if not sent:  # the prompt is there: the shell reads its input now
                    ws.send(json.dumps(["stdin", "echo SHELL-IS-$0; " + SHELL_PROBE + "\r"]))
                    sent = True
    finally:
        ws.close()
        requests.delete(f"http://127.0.0.1:{port}/api/terminals/{name}", headers=headers, timeout=30)
    text = output.replace("\r", "")
    assert "SHELL-IS--bash" in text or "SHELL-IS-/bin/bash" in text, text[-2000:]
    assert probe_line(text) == expected
