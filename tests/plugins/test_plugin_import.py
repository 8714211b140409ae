"""Every Airflow component imports plugins/ (the scheduler, the DAG processor and each task too): the plugin
must load through Airflow's own loader, fast, without importing the pages' stack or touching the network."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: What the pages need and nothing else should pay for: imported on the first request to the app only.
DEFERRED = [
    "fastapi",
    "starlette",
    "jinja2",
    "pandas",
    "numpy",
    "pyarrow",
    "kubernetes",
    "matplotlib",
    "slicewise.ui.app",
    "slicewise.ui.sources",
    "slicewise.cluster",
    "slicewise.rollout",
    "slicewise.planning",
]

PROBE = """
import json, socket, sys, time
from airflow import plugins_manager
from airflow.sdk import Connection, Variable

touched = []
def refuse(*args, **kwargs):
    touched.append(repr(args[:2]))
    raise RuntimeError("network access while loading plugins")
socket.socket.connect = refuse
Connection.get = classmethod(lambda cls, *a, **k: refuse("Connection.get", a))
Variable.get = staticmethod(lambda *a, **k: refuse("Variable.get", a))
before = set(sys.modules)
start = time.perf_counter()
plugins, errors = plugins_manager._get_plugins()
elapsed = time.perf_counter() - start
print(json.dumps({
    "elapsed": elapsed,
    "plugins": [p.name for p in plugins],
    "errors": errors,
    "new_modules": sorted(set(sys.modules) - before),
    "touched": touched,
}))
"""


def test_airflow_loads_the_plugin_fast_and_light() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert "slicewise" in result["plugins"]
    assert result["touched"] == []
    heavy = [m for m in result["new_modules"] if any(m == d or m.startswith(d + ".") for d in DEFERRED)]
    assert heavy == [], f"loading the plugin imported {heavy}"
    # The whole plugins folder (this plugin and Airflow's loader) in well under a DAG file's parse budget.
    assert result["elapsed"] < 1.0, result["elapsed"]
