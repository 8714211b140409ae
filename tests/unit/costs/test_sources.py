"""Reading the inputs: plan folders placed in time, the layout history they give, and the ledger's activity."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slicewise import store
from slicewise.cluster.base import DEVICE_PLUGIN_CONFIG_LABEL
from slicewise.costs import sources
from slicewise.forecasting.forecasts import Forecasts
from slicewise.planning import storage
from slicewise.planning.storage import run_folder, write_forecasts, write_observations
from slicewise.planning.types import NodeObservation
from slicewise.rollout.ledger import Ledger, NodeStatus, RolloutStatus
from tests.unit.costs.frames import gpu_node

DAY = datetime(2026, 11, 24, tzinfo=UTC)


def test_a_plan_folder_is_placed_at_its_run_time_else_at_its_files_time(tmp_path: Path) -> None:
    root = store.storage_path(tmp_path.as_uri())
    named = run_folder(root, "scheduled__2026-11-24T09:45:00+00:00")
    write_observations(named, [NodeObservation(gpu_node("n", "mps-2"), ())])
    unnamed = run_folder(root, "my-run")
    write_forecasts(unnamed, Forecasts((), (), "p90_last_hour", False))
    stamp = (DAY + timedelta(hours=3)).timestamp()
    os.utime(tmp_path / "plans" / "my-run" / "forecasts.json", (stamp, stamp))
    runs = sources.plan_runs(root)
    assert [r.made_at for r in runs] == [DAY + timedelta(hours=3), DAY + timedelta(hours=9, minutes=45)]
    assert runs[0].observed is None and runs[0].forecasts is not None
    history = sources.layout_history(runs, DAY + timedelta(hours=12), [])
    known = history.at("n", DAY + timedelta(hours=10))
    assert known is not None and known.labels[DEVICE_PLUGIN_CONFIG_LABEL] == "mps-2"
    assert (
        sources.layout_history(runs, DAY + timedelta(hours=9), []).at("n", DAY + timedelta(hours=10)) is None
    )
    assert storage.run_time("manual__2026-11-24T09_45_00.123_00_00_abc") == DAY + timedelta(
        hours=9, minutes=45
    )


def test_the_ledger_gives_kept_changes_and_counts_rollbacks(tmp_path: Path) -> None:
    at = DAY + timedelta(hours=2)
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        kept = ledger.start_rollout(
            "c", "run-1", "plan.json", [["a"]], {"a": {"nvidia.com/mig.config": "all-balanced"}}, at
        )
        ledger.record_snapshot(kept.id, "a", {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}, at)
        ledger.update_node(kept.id, "a", status=NodeStatus.DONE, now=at + timedelta(minutes=5))
        ledger.set_rollout_status(
            kept.id, RolloutStatus.PROMOTED, "all waves passed", at + timedelta(minutes=10)
        )
        undone = ledger.start_rollout(
            "c", "run-2", "plan.json", [["b"]], {"b": {"nvidia.com/device-plugin.config": "mps-4"}}, at
        )
        ledger.update_node(undone.id, "b", status=NodeStatus.DONE, now=at + timedelta(hours=1))
        ledger.set_rollout_status(
            undone.id, RolloutStatus.ROLLING_BACK, "utilisation dropped", at + timedelta(hours=1)
        )
        ledger.update_node(undone.id, "b", status=NodeStatus.RESTORED, now=at + timedelta(hours=1, minutes=5))
        ledger.set_rollout_status(
            undone.id, RolloutStatus.ROLLED_BACK, "restored", at + timedelta(hours=1, minutes=10)
        )
        changes, counts = sources.ledger_activity(ledger, DAY, DAY + timedelta(days=1))
        assert (
            sources.ledger_activity(ledger, DAY + timedelta(days=1), DAY + timedelta(days=2))[1].changes == 0
        )
    (change,) = changes
    assert (change.node, change.rollout_id, change.changed_at) == ("a", kept.id, at + timedelta(minutes=5))
    assert change.before == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert change.after == {"nvidia.com/mig.config": "all-balanced"}
    assert (counts.changes, counts.rollbacks, counts.rolled_back_ids) == (1, 1, (undone.id,))
