#!/usr/bin/env python3
"""healthcheck: does this container serve what start.sh started?

Docker runs it (the image's HEALTHCHECK) as the container's user, with the
container's environment (not start.sh's). It reads what start.sh wrote in
/tmp/proven-torch/services:

  jupyter PID  JupyterLab must answer on the port and base URL written in its
               runtime file, $JUPYTER_RUNTIME_DIR/jpserver-PID.json, so a
               changed --port or --ServerApp.base_url is followed.
  ssh PORT     sshd must accept a connection on PORT and greet with "SSH-2.0-".

No services file means the container runs a user command (python x.py): there
is nothing to serve, so it is healthy. Exit 0 healthy, 1 unhealthy (Docker's
convention); one line on stdout says why (`docker inspect` shows it).

`lab-url` (`healthcheck --lab-url`) prints the Lab's address as the Docker host opens it: 127.0.0.1,
the port the host published (JUPYTER_HOST_PORT when the container was told, else the same number as
inside, said so), the base URL and the token. `jupyter server list` names the container's hostname
instead, which only the container itself and its network neighbours can reach.

start.sh also runs `healthcheck --wait-ready SECONDS --pid PID` to wait for
JupyterLab: it prints the server's URL (http://127.0.0.1:PORT/BASE/, PORT the
published one when JUPYTER_HOST_PORT says it) and exits
0 when the server answers, 1 when it died or did not answer in time (an empty
token never gets this far: container/jupyter_token.py refuses it first).
Standard library only: it runs every few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

RUN_DIR = Path("/tmp/proven-torch")
TIMEOUT_S = 3.0


def read_services(run_dir: Path) -> dict[str, str] | None:
    """{"jupyter": PID, "ssh": PORT} from start.sh's services file; None if there is none."""
    try:
        text = (run_dir / "services").read_text()
    except FileNotFoundError:
        return None
    services = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if name:
            services[name] = value.strip()
    return services


def runtime_dir(run_dir: Path) -> Path:
    return Path(os.environ.get("JUPYTER_RUNTIME_DIR") or run_dir / "jupyter")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def server_info(runtime: Path, pid: int) -> dict | None:
    """The runtime file JupyterLab (process `pid`) wrote when it started listening."""
    try:
        return json.loads((runtime / f"jpserver-{pid}.json").read_text())
    except (OSError, ValueError):
        return None


def local_url(info: dict, port: str | None = None) -> str:
    """The server's root URL at 127.0.0.1: its own port (it listens on 0.0.0.0), or `port`, the one the host published."""
    scheme = "https" if info.get("secure") else "http"
    base = "/" + str(info.get("base_url", "/")).strip("/")
    return f"{scheme}://127.0.0.1:{port or info['port']}{base.rstrip('/')}/"


def probe_jupyter(info: dict, timeout: float = TIMEOUT_S) -> str | None:
    """None when GET <base>/api (no auth needed) answers 200 with a version, else why not."""
    url = local_url(info) + "api"
    context = ssl._create_unverified_context() if info.get("secure") else None  # its own certificate
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        return f"{url} answered HTTP {err.code}"
    except (OSError, ValueError) as err:
        return f"{url} did not answer: {err}"
    if "version" not in body:
        return f"{url} answered without a version: {body!r}"
    return None


def probe_ssh(port: int, timeout: float = TIMEOUT_S) -> str | None:
    """None when sshd accepts a connection on `port` and sends its SSH-2.0 banner."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256)
    except OSError as err:
        return f"sshd on port {port}: {err}"
    if not banner.startswith(b"SSH-2.0-"):
        return f"sshd on port {port} sent {banner[:40]!r}, not an SSH-2.0 banner"
    return None


def check_jupyter(run_dir: Path, pid_text: str) -> str | None:
    try:
        pid = int(pid_text)
    except ValueError:
        return f"bad JupyterLab pid {pid_text!r} in {run_dir / 'services'}"
    if not pid_alive(pid):
        return f"JupyterLab (pid {pid}) is not running"
    info = server_info(runtime_dir(run_dir), pid)
    if info is None:
        return f"JupyterLab (pid {pid}) has not written {runtime_dir(run_dir)}/jpserver-{pid}.json yet"
    return probe_jupyter(info)


def check(run_dir: Path = RUN_DIR) -> tuple[bool, str]:
    """(healthy, one line saying why)."""
    services = read_services(run_dir)
    if services is None:
        return True, "no services: this container runs a user command"
    problems, fine = [], []
    if "jupyter" in services:
        problem = check_jupyter(run_dir, services["jupyter"])
        (problems.append(problem) if problem else fine.append("JupyterLab answers"))
    if "ssh" in services:
        try:
            problem = probe_ssh(int(services["ssh"]))
        except ValueError:
            problem = f"bad SSH port {services['ssh']!r} in {run_dir / 'services'}"
        (problems.append(problem) if problem else fine.append("sshd accepts connections"))
    if not services:
        problems.append("start.sh is starting (no service yet)")
    if problems:
        return False, "unhealthy: " + "; ".join(problems)
    return True, "healthy: " + ", ".join(fine)


HOST_PORT_ENV = "JUPYTER_HOST_PORT"


def published_port() -> str | None:
    """The port the Docker host published the Lab on, when the container was told (-e JUPYTER_HOST_PORT)."""
    return os.environ.get(HOST_PORT_ENV, "").strip() or None


def host_url(info: dict, host_port: str | None) -> str:
    """The Lab's URL from the Docker host: 127.0.0.1, the published port (else the one inside), the token."""
    return f"{local_url(info, host_port)}lab?token={info.get('token', '')}"


def lab_url(run_dir: Path) -> int:
    """`lab-url`: the URL on stdout, what to map on stderr when the published port is not known; 1 when no Lab runs."""
    pid = (read_services(run_dir) or {}).get("jupyter", "")
    info = server_info(runtime_dir(run_dir), int(pid)) if pid.isdigit() and pid_alive(int(pid)) else None
    if info is None:
        print("lab-url: no JupyterLab runs in this container (it was started with a command of its own?)", file=sys.stderr)
        return 1
    published = published_port()
    print(host_url(info, published))
    if not published:
        print(
            f"lab-url: that is port {info['port']} inside the container; the URL works as it is when the host published it as "
            f"-p 127.0.0.1:{info['port']}:{info['port']}, else use the host port `docker port CONTAINER {info['port']}` names "
            f"(or start the container with -e {HOST_PORT_ENV}=PORT)",
            file=sys.stderr,
        )
    return 0


def wait_ready(run_dir: Path, pid: int, seconds: float) -> int:
    """Wait until JupyterLab `pid` answers; print its URL (with the published port when told). 0 ready, 1 otherwise."""
    deadline = time.monotonic() + seconds
    runtime = runtime_dir(run_dir)
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return 1
        info = server_info(runtime, pid)
        if info is not None and probe_jupyter(info, timeout=2.0) is None:
            print(local_url(info, published_port()))
            return 0
        time.sleep(0.25)
    print(f"JupyterLab (pid {pid}) did not answer within {seconds:.0f}s", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wait-ready", type=float, metavar="SECONDS", help="wait for JupyterLab and print its URL")
    parser.add_argument("--pid", type=int, help="JupyterLab's pid (with --wait-ready)")
    parser.add_argument("--lab-url", action="store_true", help="print the Lab's URL as the Docker host opens it (lab-url)")
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if (args.wait_ready is None) != (args.pid is None):
        parser.error("--wait-ready and --pid go together")
    if args.lab_url and args.wait_ready is not None:
        parser.error("--lab-url and --wait-ready are different questions: ask one")
    if args.lab_url:
        return lab_url(args.run_dir)
    if args.wait_ready is not None:
        return wait_ready(args.run_dir, args.pid, args.wait_ready)
    healthy, message = check(args.run_dir)
    print(message)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
