"""The one container wrapper the image tests use.

Created lazily, always removed, every wait bounded by a deadline, ports
published on 127.0.0.1 only. On failure the container's logs are printed so a
red test shows what the container said.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.procs import free_port  # noqa: F401  (the one helper; tests import it from here too)


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.5):
    """Poll `predicate` until it returns a truthy value; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as err:  # keep polling; report the last error
            last_error = err
        time.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
    )


class TrackedContainer:
    """A container of the image under test; use as a context manager."""

    def __init__(self, client, image: str, **kwargs):
        self.client = client
        self.image = image
        self.kwargs = kwargs
        self.container = None
        self.ports: dict[int, int] = {}

    def start(self, *, ports: tuple[int, ...] = (), **overrides):
        """Start the container; `ports` are container ports published on 127.0.0.1 free ports."""
        kwargs = {**self.kwargs, **overrides}
        self.ports = {port: free_port() for port in ports}
        if ports:
            kwargs["ports"] = {f"{p}/tcp": ("127.0.0.1", host) for p, host in self.ports.items()}
        kwargs.setdefault("labels", {"io.proven-torch.role": "test"})
        self.container = self.client.containers.run(self.image, detach=True, **kwargs)
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.container is not None:
            print(f"--- logs of {self.container.short_id} ---\n{self.logs()[-6000:]}")
        self.remove()

    def remove(self):
        if self.container is not None:
            try:
                self.container.remove(force=True, v=True)
            except Exception:
                pass
            self.container = None

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace") if self.container else ""

    def reload(self):
        self.container.reload()
        return self.container

    def exec(
        self, cmd: list[str], timeout: int = 60, user: str | None = None, environment: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Run a command inside (bypasses the entrypoint); bounded by `timeout` seconds. `environment`
        replaces the variables it names (the container's own are kept otherwise)."""
        full = ["timeout", str(timeout), *cmd]
        result = self.container.exec_run(full, user=user or "", demux=False, environment=environment)
        return result.exit_code, result.output.decode(errors="replace")

    def exec_background(self, cmd: list[str], timeout: int, environment: dict[str, str] | None = None) -> None:
        """Start a command inside without waiting for it; `timeout` still ends it."""
        self.container.exec_run(["timeout", str(timeout), *cmd], detach=True, environment=environment)

    def wait_for_log(self, text: str, timeout: float = 90) -> str:
        return wait_until(lambda: text in self.logs() and self.logs(), timeout, f"{text!r} in the container's logs")

    def wait_exit(self, timeout: float = 120) -> int:
        return self.container.wait(timeout=timeout)["StatusCode"]

    def health(self) -> str:
        return self.reload().attrs["State"].get("Health", {}).get("Status", "none")
