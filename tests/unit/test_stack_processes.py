"""Stopping a service ends its whole session: also a child that moved to a process group of its own (as
Airflow's task processes do), and nothing outside the session."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from slicewise.stack import processes

#: A service whose child leaves the service's process group, stays in its session, and writes its pid.
SERVICE = """
import os, subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(300)"], process_group=0
)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(300)
"""


def _wait_for(condition: Callable[[], object], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_stop_ends_a_child_in_a_process_group_of_its_own_and_nothing_else(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    service = processes.start(
        "stray",
        [sys.executable, "-c", SERVICE, str(child_pid_file)],
        port=0,
        url="",
        run_dir=tmp_path / "run",
    )
    try:
        assert _wait_for(lambda: child_pid_file.exists() and child_pid_file.read_text())
        child = int(child_pid_file.read_text())
        assert child in processes.session_members(service.pid)
        group = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[2])
        assert group == child != service.pid  # out of the leader's group: killpg alone would miss it

        processes.stop(service, tmp_path / "run", timeout_s=5)

        assert not service.alive()
        assert _wait_for(lambda: not processes._alive(child))
        assert processes.session_members(service.pid) == []
        assert outsider.poll() is None  # not in the session: left alone
        assert not (tmp_path / "run" / "stray.pid").exists()
    finally:
        outsider.kill()
        outsider.wait()
