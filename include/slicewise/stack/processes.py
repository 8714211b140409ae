"""Start and stop local service processes, remembering exactly which ones were started.

Each started process is recorded in a pid file (pid + command line) so that ``stop`` ends exactly what was
started, never a same-named process of someone else, and a second ``start`` reuses a live one. Each is started
as the leader of a session of its own, and ``stop`` ends the whole session: Airflow's task processes put
themselves in process groups of their own, which a signal to the leader's group alone would leave running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Service:
    name: str
    pid: int
    port: int
    url: str
    log: Path

    def alive(self) -> bool:
        return _alive(self.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited child not yet reaped) is not alive for our purposes.
    fields = _stat(pid)
    return fields is None or fields[0] != "Z"


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    url: str,
    run_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Service:
    """Start ``argv`` in its own process group, logging to ``run_dir/<name>.log``; record it in a pid file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    service = Service(name, process.pid, port, url, log)
    (run_dir / f"{name}.pid").write_text(
        json.dumps(
            {
                "pid": process.pid,
                "port": port,
                "url": url,
                "argv": list(argv),
                "start_ticks": _start_ticks(process.pid),
            }
        )
    )
    return service


def recorded(name: str, run_dir: Path) -> Service | None:
    """The live service recorded under ``name``, or None (a stale pid file is removed)."""
    pid_file = run_dir / f"{name}.pid"
    if not pid_file.exists():
        return None
    data = json.loads(pid_file.read_text())
    service = Service(name, int(data["pid"]), int(data["port"]), str(data["url"]), run_dir / f"{name}.log")
    if service.alive() and _start_ticks(service.pid) == data.get("start_ticks"):
        return service
    pid_file.unlink(missing_ok=True)
    return None


def _start_ticks(pid: int) -> int | None:
    """The process' start time in clock ticks since boot: with the pid, it names one process for good
    (a recycled pid has another start time; a process renaming itself with setproctitle keeps it)."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def stop(service: Service, run_dir: Path | None = None, timeout_s: float = 15.0) -> None:
    """SIGTERM the service's session (it was started as its leader), SIGKILL what is left of it after
    ``timeout_s``; remove its pid file."""
    if service.alive():
        _signal_session(service.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while (service.alive() or session_members(service.pid)) and time.monotonic() < deadline:
            _reap(service.pid)
            time.sleep(0.1)
        # Only while something of it lives: then no other process can have been given its pid.
        if service.alive() or session_members(service.pid):
            _signal_session(service.pid, signal.SIGKILL)
        _reap(service.pid)
    if run_dir is not None:
        (run_dir / f"{service.name}.pid").unlink(missing_ok=True)


def session_members(session: int) -> list[int]:
    """The live processes of ``session``, the leader's included. Linux reuses no pid while a live process has it
    as its session id, so these are the leader's descendants that did not start a session of their own."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))  # None: it ended while we looked
        if fields is not None and fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def _signal_session(session: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(session, signum)
    for pid in session_members(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_http(url: str, service: Service | None = None, timeout_s: float = 60.0) -> None:
    """Wait until ``url`` answers 200; fail early with the log tail if the process died."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        if service is not None and not service.alive():
            raise RuntimeError(f"{service.name} exited during start-up; last log lines:\n{tail(service.log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError as exc:
            last_error = str(exc)
        time.sleep(0.3)
    log_tail = tail(service.log) if service is not None else ""
    raise TimeoutError(
        f"{url} not ready after {timeout_s:.0f}s ({last_error}){log_tail and chr(10) + log_tail}"
    )


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
