"""Import something in a fresh interpreter that refuses network, Connection and Variable access, and report
how long it took, which modules it pulled in and what it tried to touch (DAG files and the plugin alike)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

_TEMPLATE = """
import json, socket, sys, time
from airflow.sdk import Connection, Variable
{setup}
touched = []
def refuse(*args, **kwargs):
    touched.append(repr(args[:2]))
    raise RuntimeError("network, Connection or Variable access while importing")
socket.socket.connect = refuse
Connection.get = classmethod(lambda cls, *a, **k: refuse("Connection.get", a))
Variable.get = staticmethod(lambda *a, **k: refuse("Variable.get", a))
extra = {{}}
before = set(sys.modules)
start = time.perf_counter()
{measured}
elapsed = time.perf_counter() - start
print(json.dumps({{"elapsed": elapsed, "new_modules": sorted(set(sys.modules) - before), "touched": touched,
                  **extra}}))
"""


def isolated_import(setup: str, measured: str, *argv: str) -> dict[str, Any]:
    """Run ``setup`` (not measured), then ``measured`` (which may fill the dict ``extra``) in a fresh Python;
    returns ``elapsed``, ``new_modules``, ``touched`` and ``extra``'s keys."""
    script = _TEMPLATE.format(setup=setup, measured=measured)
    probe = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    result: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])
    return result
