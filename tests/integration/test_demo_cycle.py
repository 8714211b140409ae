"""End to end, as ``make demo`` runs it: the embedded stack started from nothing, one hourly cycle through the
real scheduler (ingest → forecaster → rollout in apply mode → cost report, chained by Assets), then
``demo down`` stops exactly what it started. Asserts the pieces agree with each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from slicewise.stack import processes

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def demo(action: str, home: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLICEWISE_HOME": str(home)}  # the demo's own settings, as `make demo` runs it
    return subprocess.run(
        [sys.executable, "-m", "slicewise.demo", action, "--timeout", "600"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=REPO,
    )


@pytest.mark.timeout(1500)  # the whole cycle on 2 cores: about 6 minutes alone, more when the machine is busy
def test_make_demo_runs_the_whole_loop_and_stop_stops_it(tmp_path: Path) -> None:
    home = tmp_path / "var"
    try:
        result = demo("up", home, timeout_s=1500)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-6000:]
        for step in ("1/4", "2/4", "3/4", "4/4", "cycle done", "rollout #", "champion", "cost report"):
            assert step in output, (step, output[-4000:])

        from slicewise.rollout import ledger as ledger_mod
        from slicewise.rollout.ledger import Ledger
        from slicewise.simulator.cluster import SimulatedCluster

        # The ledger and the simulated fleet's labels agree.
        # (More forecaster versions may start more rollouts after the demo returns; dwell time keeps them off
        # the nodes the first one changed.)
        with Ledger.open(f"sqlite:///{home / 'ledger.db'}") as ledger:
            promoted = [r for r in ledger.recent_rollouts() if r.status == ledger_mod.RolloutStatus.PROMOTED]
            assert promoted, [ledger.story(r.id) for r in ledger.recent_rollouts()]
            rollout = promoted[-1]  # the oldest: the demo's cycle
            cluster = SimulatedCluster.open(home / "cluster" / "state.json")
            for record in ledger.nodes(rollout.id):
                node = cluster.get_node(record.node)
                assert record.status == ledger_mod.NodeStatus.DONE
                for label, value in record.desired.items():
                    assert node.labels.get(label) == value, (record.node, label)
                assert not node.unschedulable
        # A validated partition, a registered model, and a report that counts the change.
        assert list((home / "store" / "metrics").glob("date=*/hour=*/_MANIFEST.json"))
        assert list((home / "mlflow").rglob("*")), "MLflow stored nothing"
        (summary_file,) = sorted((home / "store" / "reports").glob("*/summary.json"))[-1:]
        summary = json.loads(summary_file.read_text())
        totals = summary["totals"]
        measured = totals["usedGpuHours"] + totals["idleGpuHours"] + (totals.get("unmeasuredGpuHours") or 0)
        assert abs(totals["gpuHours"] - measured) < 1e-6
        # The partial report covers the validated hours; it counts the changes made inside them.
        start, end = (datetime.fromisoformat(summary["window"][k]) for k in ("start", "end"))
        with Ledger.open(f"sqlite:///{home / 'ledger.db'}") as ledger:
            inside = [
                r
                for promoted_rollout in ledger.recent_rollouts()
                if promoted_rollout.status == ledger_mod.RolloutStatus.PROMOTED
                for r in ledger.nodes(promoted_rollout.id)
                if r.changed_at is not None and start <= r.changed_at < end
            ]
        assert summary["changes"] == len(inside)
    finally:
        stopped = demo("down", home, timeout_s=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    for name, run_dir in (("prometheus", home / "prometheus" / "run"), ("simulator", home / "run")):
        assert processes.recorded(name, run_dir) is None, f"{name} still running"
