"""container/healthcheck.py against fake runtime files, a real HTTP server and a
fake sshd on 127.0.0.1 (no Docker)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from common.procs import free_port

pytestmark = pytest.mark.unit

HEALTHCHECK = Path(__file__).resolve().parents[2] / "container" / "healthcheck.py"
spec = importlib.util.spec_from_file_location("healthcheck", HEALTHCHECK)
healthcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(healthcheck)


class FakeJupyter(BaseHTTPRequestHandler):
    base_url = "/"

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == self.base_url + "api":
            body, code = json.dumps({"version": "2.0"}).encode(), 200
        else:
            body, code = b"{}", 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def jupyter_server():
    """A local HTTP server answering <base_url>api like Jupyter Server does."""
    servers = []

    def start(base_url: str = "/"):
        handler = type("Handler", (FakeJupyter,), {"base_url": base_url})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_sshd():
    """A TCP server on 127.0.0.1 that greets each connection with `banner`."""
    listeners = []

    def start(banner: bytes = b"SSH-2.0-OpenSSH_9.2\r\n"):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        listeners.append(sock)

        def serve():
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(banner)

        threading.Thread(target=serve, daemon=True).start()
        return sock.getsockname()[1]

    yield start
    for sock in listeners:
        sock.close()


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter"))
    (tmp_path / "jupyter").mkdir()
    return tmp_path


def write_services(run_dir: Path, *lines: str) -> None:
    (run_dir / "services").write_text("".join(line + "\n" for line in lines))


def write_server_info(run_dir: Path, pid: int, port: int, base_url: str = "/") -> None:
    info = {
        "pid": pid,
        "port": port,
        "base_url": base_url,
        "secure": False,
        "token": "t" * 48,
        "url": f"http://hostname:{port}{base_url}",
    }
    (run_dir / "jupyter" / f"jpserver-{pid}.json").write_text(json.dumps(info))


def test_a_user_command_container_is_healthy(run_dir):
    assert healthcheck.check(run_dir) == (True, "no services: this container runs a user command")


def test_starting_is_not_healthy(run_dir):
    write_services(run_dir)
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and "starting" in message


def test_jupyter_answering_is_healthy(run_dir, jupyter_server):
    write_services(run_dir, f"jupyter {os.getpid()}")
    write_server_info(run_dir, os.getpid(), jupyter_server())
    assert healthcheck.check(run_dir) == (True, "healthy: JupyterLab answers")


def test_a_changed_base_url_is_followed(run_dir, jupyter_server):
    write_services(run_dir, f"jupyter {os.getpid()}")
    write_server_info(run_dir, os.getpid(), jupyter_server("/lab-base/"), base_url="/lab-base/")
    assert healthcheck.check(run_dir)[0]


def test_a_dead_jupyter_is_unhealthy(run_dir, jupyter_server):
    dead_pid = 2**22 + 17  # above Linux's pid_max default: no such process
    write_services(run_dir, f"jupyter {dead_pid}")
    write_server_info(run_dir, dead_pid, jupyter_server())
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and "is not running" in message


def test_jupyter_without_runtime_file_is_unhealthy(run_dir):
    write_services(run_dir, f"jupyter {os.getpid()}")
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and "jpserver-" in message


def test_jupyter_not_answering_is_unhealthy(run_dir):
    write_services(run_dir, f"jupyter {os.getpid()}")
    write_server_info(run_dir, os.getpid(), free_port())
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and "did not answer" in message


def test_sshd_greeting_is_healthy(run_dir, jupyter_server, fake_sshd):
    write_services(run_dir, f"jupyter {os.getpid()}", f"ssh {fake_sshd()}")
    write_server_info(run_dir, os.getpid(), jupyter_server())
    assert healthcheck.check(run_dir) == (True, "healthy: JupyterLab answers, sshd accepts connections")


def test_sshd_not_listening_is_unhealthy(run_dir, jupyter_server):
    write_services(run_dir, f"jupyter {os.getpid()}", f"ssh {free_port()}")
    write_server_info(run_dir, os.getpid(), jupyter_server())
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and message.startswith("unhealthy: sshd on port")


def test_a_non_ssh_banner_is_unhealthy(run_dir, fake_sshd):
    write_services(run_dir, f"ssh {fake_sshd(b'HTTP/1.1 400 Bad Request')}")
    healthy, message = healthcheck.check(run_dir)
    assert not healthy and "not an SSH-2.0 banner" in message


def test_wait_ready_prints_the_url(run_dir, jupyter_server, capsys):
    port = jupyter_server("/base/")
    write_server_info(run_dir, os.getpid(), port, base_url="/base/")
    assert healthcheck.wait_ready(run_dir, os.getpid(), 10) == 0
    assert capsys.readouterr().out == f"http://127.0.0.1:{port}/base/\n"


def test_wait_ready_gives_up_when_jupyter_died(run_dir):
    assert healthcheck.wait_ready(run_dir, 2**22 + 17, 10) == 1


def test_main_exit_status(run_dir, capsys):
    write_services(run_dir, f"ssh {free_port()}")
    assert healthcheck.main(["--run-dir", str(run_dir)]) == 1
    assert capsys.readouterr().out.startswith("unhealthy:")


def test_the_lab_url_is_the_hosts_address_with_the_published_port_and_the_token():
    info = {"port": 8888, "base_url": "/", "token": "t0k", "secure": False}
    assert healthcheck.host_url(info, None) == "http://127.0.0.1:8888/lab?token=t0k"
    assert healthcheck.host_url({**info, "base_url": "/lab-base/"}, "49152") == "http://127.0.0.1:49152/lab-base/lab?token=t0k"


def test_wait_ready_names_the_published_port_when_told(run_dir, jupyter_server, capsys, monkeypatch):
    port = jupyter_server()
    write_server_info(run_dir, os.getpid(), port)
    monkeypatch.setenv("JUPYTER_HOST_PORT", "49152")
    assert healthcheck.wait_ready(run_dir, os.getpid(), 10) == 0
    assert capsys.readouterr().out == "http://127.0.0.1:49152/\n"


@pytest.mark.parametrize(
    "argv", [["--pid", "7"], ["--wait-ready", "5"], ["--lab-url", "--wait-ready", "5", "--pid", "7"]], ids=str
)
def test_options_that_do_not_go_together_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        healthcheck.main(argv)
    assert stopped.value.code == 2
    assert "--" in capsys.readouterr().err
