"""The desktop's and `ssh -X`'s pieces on this host (no Docker): the Jupyter config that starts
the desktop and gives the Lab its DISPLAY, start-desktop.sh's usage, start.sh's X11 switch.
The desktop itself runs in the image (tests/image/test_desktop.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONTAINER = Path(__file__).resolve().parents[2] / "container"
START_SH = CONTAINER / "start.sh"
START_DESKTOP = CONTAINER / "desktop" / "start-desktop.sh"

LOAD_CONFIG = """
import json, os, sys
from traitlets.config import Config
c = Config()
namespace = {"get_config": lambda: c, "__file__": sys.argv[1]}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), namespace)
servers = c.ServerProxy.servers
print(json.dumps({"DISPLAY": os.environ.get("DISPLAY"), "XAUTHORITY": os.environ.get("XAUTHORITY"),
                  "desktop": servers["desktop-websockify"], "names": sorted(servers)}))
"""


def load_config(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XAUTHORITY")}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_CONFIG, str(CONTAINER / "jupyter_server_config.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_lab_gets_the_desktops_display_and_cookie():
    config = load_config()
    assert config["DISPLAY"] == ":1" and config["XAUTHORITY"] == "/tmp/proven-torch/desktop/Xauthority"


def test_a_display_the_container_was_given_is_kept():
    config = load_config(DISPLAY=":0", XAUTHORITY="/home/user/.Xauthority")
    assert (config["DISPLAY"], config["XAUTHORITY"]) == (":0", "/home/user/.Xauthority")


def test_the_desktop_server_starts_the_images_launcher_on_a_private_socket():
    desktop = load_config()["desktop"]
    assert desktop["command"] == [
        "/opt/proven-torch/container/desktop/start-desktop.sh",
        ":1",
        "{unix_socket}",  # jupyter-server-proxy's socket in a folder of its own (mkdtemp, 0700)
        "/tmp/proven-torch/desktop/Xauthority",
    ]
    assert desktop["unix_socket"] is True and desktop["raw_socket_proxy"] is True and "port" not in desktop
    assert desktop["launcher_entry"] == {"enabled": False}  # jupyter-remote-desktop-proxy's own entry draws the tile


def test_tensorboard_is_still_served():
    assert load_config()["names"] == ["desktop-websockify", "tensorboard"]


def test_start_desktop_syntax_and_usage():
    assert subprocess.run(["bash", "-n", str(START_DESKTOP)], capture_output=True, timeout=30).returncode == 0
    done = subprocess.run(["bash", str(START_DESKTOP)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "usage: start-desktop.sh DISPLAY SOCKET XAUTHORITY" in done.stderr


def x11_line(value: str | None) -> str:
    env = {"PATH": os.environ["PATH"], **({} if value is None else {"SSH_X11_FORWARDING": value})}
    done = subprocess.run(
        ["bash", "-c", f'source "{START_SH}"\nx11_forwarding_line'], capture_output=True, text=True, timeout=30, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("value", [None, "", "yes", "1", "on"])
def test_ssh_x11_forwarding_stays_as_the_policy_says(value):
    assert x11_line(value).startswith("#")  # a comment: sshd_config's `X11Forwarding yes` applies


@pytest.mark.parametrize("value", ["no", "No", "off", "false", "0"])
def test_ssh_x11_forwarding_off_comes_before_the_policy(value):
    assert x11_line(value) == "X11Forwarding no"


def test_the_policy_forwards_x11_on_the_loopback_only():
    policy = (CONTAINER / "sshd_config").read_text().splitlines()
    assert {"X11Forwarding yes", "X11UseLocalhost yes", "AddressFamily inet"} <= set(policy)
    assert "X11Forwarding no" not in policy


def test_ssh_sessions_keep_the_display_sshd_gives_them():
    """~/.ssh/environment would override the DISPLAY of an `ssh -X` session: start.sh leaves it out."""
    skip = subprocess.run(
        ["bash", "-c", f'source "{START_SH}"\necho "$SSH_ENV_SKIP"'], capture_output=True, text=True, timeout=30
    ).stdout.split()
    assert {"DISPLAY", "XAUTHORITY"} <= set(skip)
