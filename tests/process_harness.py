"""A helper process the tests run on loopback: its binary, its ports, its log, its liveness, its stop.

The Jaeger, Collector and ``memtrace serve`` harnesses share this: a process is
started with its output appended to a log file (:func:`spawn_logged`), polled
until it is ready (:meth:`LoggedProcess.wait_ready`) while checking it has not
exited, and stopped with a grace period before SIGKILL (:func:`stop_process`).
Every failure message carries the log tail. A Go binary built by an install
script (:class:`CachedBinary`) is skipped with the reason when absent, and is a
failure on CI (``CI=true``): CI must not go green on tests that silently did not run.

Not thread-safe: each process is driven by the one test thread that started it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

__all__ = [
    "LOG_TAIL_LINES",
    "CachedBinary",
    "LoggedProcess",
    "accepts",
    "free_ports",
    "loopback_env",
    "spawn_logged",
    "stop_process",
]

LOG_TAIL_LINES = 60
_LOOPBACK = "127.0.0.1,localhost,::1"


@dataclass(frozen=True)
class CachedBinary:
    """A binary built by ``.ci/install-<name>.sh`` into ``~/.cache/memtrace/<name>``.

    ``env_var`` names another path; ``title`` names the binary in the skip reason and
    ``tests`` the tests CI must run (``"Jaeger"``: "CI must run the Jaeger tests").
    """

    name: str
    env_var: str
    title: str
    tests: str

    def default_path(self) -> Path:
        return Path.home() / ".cache" / "memtrace" / self.name

    def find(self) -> Path | None:
        """The binary named by ``env_var`` (else the install default), if it is an executable file."""
        configured = os.environ.get(self.env_var)
        path = Path(configured).expanduser() if configured else self.default_path()
        return path if path.is_file() and os.access(path, os.X_OK) else None

    def require(self) -> Path:
        """The binary, or skip (fail on CI) saying how to get it."""
        path = self.find()
        if path is not None:
            return path
        where = os.environ.get(self.env_var) or str(self.default_path())
        reason = f"{self.title} not found at {where}: run `bash .ci/install-{self.name}.sh` (Go build)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI must run the {self.tests} tests", pytrace=False)
        pytest.skip(reason)


class LoggedProcess:
    """A running process whose output goes to ``log_path`` (a base of the harnesses' records).

    Subclasses (dataclasses) have the fields ``process`` and ``log_path`` (and ``log_offset``
    when several runs append to one log), and set ``label`` (how messages name the process)
    and ``failure`` (what :meth:`assert_alive` and :meth:`wait_ready` raise).
    """

    label: ClassVar[str] = "the process"
    failure: ClassVar[type[Exception]] = AssertionError
    process: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int = 0
    """Where this run's lines begin in the log."""

    def log(self) -> str:
        """This run's log, or a line saying why it cannot be read."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError as error:
            return f"(no log {self.log_path}: {error})"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def assert_alive(self) -> None:
        """Raise ``failure`` with the exit code and the log tail if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise self.failure(f"{self.label} exited with code {code}; log tail:\n{self.log_tail()}")

    def wait_ready(self, ready: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> None:
        """Poll ``ready`` until it holds; raise ``failure`` if the process exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            if ready():
                return
            time.sleep(interval)
        raise self.failure(f"{self.label} was not ready within {timeout:g} s; log tail:\n{self.log_tail()}")


def spawn_logged(command: Sequence[str], log_path: Path, *, cwd: Path, env: Mapping[str, str] | None = None,
                 stdout_to_log: bool = True) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``command`` with stderr (and stdout, unless ``stdout_to_log`` is false: then it is
    discarded) appended to ``log_path``. Returns the process and where its lines begin in the log."""
    with open(log_path, "ab") as log:
        offset = log.tell()
        stdout = log if stdout_to_log else subprocess.DEVNULL
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=stdout, stderr=log,
                                   cwd=cwd, env=None if env is None else dict(env))
    return process, offset


def stop_process(process: subprocess.Popen[bytes], *, timeout: float, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (SIGTERM lets it drain), wait ``timeout``, SIGKILL if it does not end; the exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    return process.returncode


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (free when chosen; a race stays possible)."""
    # Hold every socket open until all are chosen so the ports are distinct.
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                   for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port`` now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def loopback_env(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` with ``overrides``, and loopback never through a proxy a developer's shell may set."""
    return {**os.environ, "NO_PROXY": _LOOPBACK, "no_proxy": _LOOPBACK, **(overrides or {})}


MEM0_VENVS = Path(os.environ.get("MEMTRACE_MEM0_VENVS", Path.home() / ".cache" / "memtrace" / "venvs"))
"""Where ``.ci/install-mem0-venvs.sh`` builds the mem0ai venvs (``MEMTRACE_MEM0_VENVS``)."""


def pytest_in_venv(python: Path, tests: Path, label: str, missing: str) -> str:
    """Run the pytest suite ``tests`` with another venv's ``python`` (mem0ai cannot share ours) and
    return its summary line; an absent venv skips with ``missing`` locally and fails under CI."""
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(missing + ": CI must install it")
        pytest.skip(missing)
    env = {**os.environ, "MEM0_TELEMETRY": "False", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header", str(tests)]
    done = subprocess.run(command, cwd=tests.parent.parent, capture_output=True, text=True, env=env,
                          timeout=600)
    summary = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    output = f"{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{label} failed:\n{output}"
    assert summary and " passed" in summary[0], f"{label}: no test ran: {done.stdout[-2000:]}"
    return summary[0]
