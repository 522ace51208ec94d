"""Real clients for the image's services: OpenSSH's `ssh`, Jupyter's REST API and
kernel websocket. Used by test_ssh.py, test_jupyter*.py, test_image_facts.py and
test_browser.py; every call is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import subprocess
import time
from pathlib import Path

import requests
import websocket
from jupyter_client.session import Session

from tests.image.tracked_container import TrackedContainer, wait_until

LOGIN = "user"
READY_LINE = "JupyterLab is ready: "
TOKEN_RE = re.compile(r"JupyterLab is ready: \S+/lab\?token=([0-9a-f]+)")
# Docker's HEALTHCHECK every second in tests (the image says every 10 s).
FAST_HEALTHCHECK = {
    "test": ["CMD", "healthcheck"],
    "interval": 1_000_000_000,
    "timeout": 5_000_000_000,
    "retries": 2,
    "start_period": 60_000_000_000,
}


# --- SSH --------------------------------------------------------------------------


def make_keypair(directory: Path, name: str = "id_ed25519") -> tuple[Path, str]:
    """A new ed25519 key pair without passphrase: (private key path, public key line)."""
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"test-{name}", "-f", str(key)], check=True, timeout=30)
    return key, key.with_suffix(".pub").read_text().strip()


def client_options(key: Path | None, known_hosts: Path, options: tuple[str, ...] = ()) -> list[str]:
    """OpenSSH client options (ssh, scp) that trust nothing on this host: only `key`, a known_hosts file in tmp."""
    argv: list[str] = []
    for option in options:  # OpenSSH keeps the first value of an option: these come first
        argv += ["-o", option]
    argv += [
        "-F", "/dev/null",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "ConnectTimeout=10",
        "-o", "IdentitiesOnly=yes",
        "-o", "IdentityAgent=none",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip # an option and its value a line
    if key is not None:
        argv += ["-i", str(key)]
    return argv


def ssh_argv(
    port: int, key: Path | None, known_hosts: Path, command: list[str] | str, user: str = LOGIN, options: tuple[str, ...] = ()
) -> list[str]:
    argv = ["ssh", "-p", str(port), *client_options(key, known_hosts, options), f"{user}@127.0.0.1"]
    return argv + ([command] if isinstance(command, str) else command)


def ssh(
    port: int, key: Path | None, known_hosts: Path, command: list[str] | str, timeout: int = 60, **kwargs
) -> subprocess.CompletedProcess:
    argv = ssh_argv(port, key, known_hosts, command, **kwargs)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def host_keys(port: int) -> set[str]:
    """The host keys sshd on 127.0.0.1:`port` offers (ssh-keyscan), as 'type base64' strings."""
    result = subprocess.run(
        ["ssh-keyscan", "-T", "10", "-p", str(port), "-t", "ed25519,ecdsa", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return {" ".join(line.split()[1:3]) for line in result.stdout.splitlines() if line and not line.startswith("#")}


def wait_for_sshd(container: TrackedContainer, timeout: float = 60) -> int:
    """Wait until sshd greets on the published port; return that host port."""
    port = container.ports[2222]
    wait_until(lambda: host_keys(port), timeout, f"sshd on 127.0.0.1:{port}", interval=1)
    return port


@contextlib.contextmanager
def lab_and_sshd(client, image: str, public_key: str, labels: dict[str, str]):
    """JupyterLab and sshd together on a fresh /workspace volume, as `docker run -p ... -e PUBLIC_KEY=...
    -v VOLUME:/workspace IMAGE` makes them: yields (container, host port of sshd, Jupyter's token)."""
    vol = client.volumes.create(labels=labels)
    try:
        mounts = {vol.name: {"bind": "/workspace", "mode": "rw"}}
        with TrackedContainer(
            client, image, environment={"PUBLIC_KEY": public_key}, volumes=mounts, healthcheck=FAST_HEALTHCHECK
        ) as container:
            container.start(ports=(8888, 2222))
            token = wait_for_jupyter(container)
            wait_for_sshd(container)
            yield container, container.ports[2222], token
    finally:
        vol.remove(force=True)


def run_command(client, image: str, command: list[str], timeout: float = 120, **kwargs) -> tuple[int, str]:
    """Run `command` through the image's entrypoint to its end: (exit status, output)."""
    with TrackedContainer(client, image, command=command, **kwargs) as container:
        container.start()
        code = container.wait_exit(timeout=timeout)
        return code, container.logs()


# --- Jupyter ----------------------------------------------------------------------


def wait_for_jupyter(container: TrackedContainer, timeout: float = 120) -> str:
    """Wait for start.sh's ready line; return the token it printed (the generated one)."""
    logs = container.wait_for_log(READY_LINE, timeout=timeout)
    match = TOKEN_RE.search(logs)
    return match.group(1) if match else ""


class Jupyter:
    """Jupyter Server's REST API and kernel websocket on 127.0.0.1:`port`."""

    def __init__(self, port: int, token: str):
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def get(self, path: str, token: str | None = "the right one", **kwargs) -> requests.Response:
        """GET with the server's token, another `token`, or none (token=None)."""
        token = self.token if token == "the right one" else token
        headers = {"Authorization": f"token {token}"} if token else {}
        return requests.get(self.base + path, headers=headers, timeout=20, allow_redirects=False, **kwargs)

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(method, self.base + path, headers=headers, timeout=60, **kwargs)

    def start_kernel(self) -> str:
        response = self.request("POST", "/api/kernels", json={"name": "python3"})
        response.raise_for_status()
        return response.json()["id"]

    def shutdown_kernel(self, kernel_id: str) -> None:
        self.request("DELETE", f"/api/kernels/{kernel_id}")

    def run_in_new_kernel(self, code: str) -> dict:
        """Start a kernel, execute `code` in it, shut it down; the execution's outcome."""
        kernel = self.start_kernel()
        try:
            return self.execute(kernel, code)
        finally:
            self.shutdown_kernel(kernel)

    def execute(self, kernel_id: str, code: str, timeout: float = 120) -> dict:
        """Run `code` in the kernel over /api/kernels/<id>/channels.

        Returns {"stdout": ..., "stderr": ..., "result": text/plain of the last expression or None,
        "status": "ok" | "error", "error": traceback text, "display": [MIME types of each display_data]}.
        """
        url = self.base.replace("http://", "ws://") + f"/api/kernels/{kernel_id}/channels"
        ws = websocket.create_connection(url, header=[f"Authorization: token {self.token}"], timeout=timeout)
        try:
            session = Session(key=secrets.token_bytes(16), username="test")  # signs nothing over the websocket
            msg = session.msg(
                "execute_request",
                content={
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
            )
            msg["channel"] = "shell"
            ws.send(json.dumps(msg, default=str))
            out = {"stdout": "", "stderr": "", "result": None, "status": None, "error": "", "display": []}
            deadline = time.monotonic() + timeout
            idle = False
            while time.monotonic() < deadline and not (idle and out["status"]):
                reply = json.loads(ws.recv())
                if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                    continue
                kind, content = reply["msg_type"], reply["content"]
                if kind == "stream" and content.get("name") in ("stdout", "stderr"):
                    out[content["name"]] += content["text"]
                elif kind == "display_data":
                    out["display"].append(sorted(content["data"]))  # the MIME types a front end is offered
                elif kind == "execute_result":
                    out["result"] = content["data"].get("text/plain")
                elif kind == "error":
                    out["error"] = "\n".join(content.get("traceback", [])) or content.get("evalue", "")
                elif kind == "execute_reply":
                    out["status"] = content["status"]
                elif kind == "status" and content.get("execution_state") == "idle":
                    idle = True
            if not (idle and out["status"]):
                raise TimeoutError(f"no execute_reply within {timeout}s: {out}")
            return out
        finally:
            ws.close()
