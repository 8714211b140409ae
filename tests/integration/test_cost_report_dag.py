"""``gpu_cost_report`` end to end with ``dag.test()``: four validated hours of the simulated fleet, the planner's
observations and forecasts, and a SQLite ledger holding one promoted change and one rollback. A partial report
of the day so far, then the daily report replacing it; a day without data fails clearly."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from slicewise import store
from slicewise.forecasting.forecasts import Forecasts, SeriesForecast
from slicewise.planning.storage import run_folder, write_forecasts, write_observations
from slicewise.planning.types import NodeObservation
from slicewise.rollout.ledger import Ledger, NodeStatus, RolloutStatus
from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import gpu_samples
from tests.support.partitions import publish_hour

pytestmark = pytest.mark.integration

DAG_ID = "gpu_cost_report"
DAY = datetime(2026, 11, 24, tzinfo=UTC)
HOURS = 4
CHANGE_AT = DAY + timedelta(hours=1, minutes=30)  # sim-a100-40-0: all-1g.5gb -> all-balanced, kept
FLEET_GPUS = 24
#: dag.test names runs after run_after: each run gets its own second so run ids never collide.
_RUN_SECONDS = itertools.count()


@dataclass(frozen=True)
class Setup:
    home: Path

    @property
    def report(self) -> Path:
        return self.home / "store" / "reports" / DAY.date().isoformat()

    def summary(self) -> dict[str, Any]:
        return dict(json.loads((self.report / "summary.json").read_text()))


def _forecasts(fleet: Fleet) -> Forecasts:
    """The champion's forecasts made at 01:45 from the hour before: last hour's mean, P90 a bit above."""
    stamps = [int((DAY + timedelta(minutes=m)).timestamp()) for m in range(60)]
    means = (
        gpu_samples(fleet, stamps)
        .groupby(["hostname", "gpu", "gpu_instance_id", "mig_profile"])["engine_active"]
        .mean()
    )
    series = tuple(
        SeriesForecast(
            str(host), int(gpu), str(instance), str(profile), float(p50), min(1.0, float(p50) + 0.2)
        )
        for (host, gpu, instance, profile), p50 in means.items()
    )
    return Forecasts(series, (), "champion v1", True, horizon_minutes=60)


def _ledger(path: Path) -> None:
    """One change applied and kept (PROMOTED), one rolled back."""
    with Ledger.open(f"sqlite:///{path}") as ledger:
        kept = ledger.start_rollout(
            "simulated:test",
            "scheduled__2026-11-24T01:15:00+00:00",
            "plans/x/plan.json",
            [["sim-a100-40-0"]],
            {"sim-a100-40-0": {"nvidia.com/mig.config": "all-balanced"}},
            CHANGE_AT - timedelta(minutes=10),
        )
        ledger.record_snapshot(
            kept.id, "sim-a100-40-0", {"labels": {"nvidia.com/mig.config": "all-1g.5gb"}}, CHANGE_AT
        )
        ledger.update_node(kept.id, "sim-a100-40-0", status=NodeStatus.DONE, now=CHANGE_AT)
        ledger.set_rollout_status(
            kept.id, RolloutStatus.PROMOTED, "every wave passed", CHANGE_AT + timedelta(minutes=10)
        )
        undone = ledger.start_rollout(
            "simulated:test",
            "scheduled__2026-11-24T02:15:00+00:00",
            "plans/y/plan.json",
            [["sim-h100-0"]],
            {"sim-h100-0": {"nvidia.com/device-plugin.config": "mps-2"}},
            DAY + timedelta(hours=2, minutes=15),
        )
        at = DAY + timedelta(hours=2, minutes=20)
        ledger.record_snapshot(
            undone.id, "sim-h100-0", {"labels": {"nvidia.com/device-plugin.config": None}}, at
        )
        ledger.update_node(undone.id, "sim-h100-0", status=NodeStatus.DONE, now=at)
        ledger.set_rollout_status(
            undone.id, RolloutStatus.ROLLING_BACK, "utilisation-drop failed", at + timedelta(minutes=5)
        )
        ledger.update_node(
            undone.id, "sim-h100-0", status=NodeStatus.RESTORED, now=at + timedelta(minutes=10)
        )
        ledger.set_rollout_status(
            undone.id, RolloutStatus.ROLLED_BACK, "restored", at + timedelta(minutes=12)
        )


@pytest.fixture
def setup(tmp_path: Path, airflow_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    fleet = Fleet.default()
    root = store.storage_path((tmp_path / "store").as_uri())
    for hour in range(HOURS):
        publish_hour(root, fleet, DAY + timedelta(hours=hour))
    # The planner observed the cluster just before the day began (sim-h100-1 runs mps-4) and forecast at 01:45.
    nodes = SimulatedCluster.open(tmp_path / "cluster" / "state.json", fleet=fleet).list_nodes()
    observed = run_folder(root, "scheduled__2026-11-23T23:45:00+00:00")
    write_observations(observed, [NodeObservation(node, ()) for node in nodes])
    write_forecasts(run_folder(root, "scheduled__2026-11-24T01:45:00+00:00"), _forecasts(fleet))
    _ledger(tmp_path / "ledger.db")
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))  # the ledger's default SQLite file lives here
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", root.as_uri())
    monkeypatch.delenv("AIRFLOW_CONN_SLICEWISE_LEDGER", raising=False)
    yield Setup(tmp_path)


def run_dag(run_after: datetime, **conf: Any) -> dict[str, str]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    for task in dag.tasks:
        task.retries = 0
    run = dag.test(run_after=run_after + timedelta(seconds=next(_RUN_SECONDS)), run_conf=conf)
    return {ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state}


def _reconciles(summary: dict[str, Any], allocation: pd.DataFrame, capacity: float) -> None:
    totals = summary["totals"]
    assert totals["gpuHours"] == pytest.approx(capacity) == pytest.approx(totals["capacityGpuHours"])
    assert totals["gpuHours"] == pytest.approx(
        totals["usedGpuHours"] + totals["idleGpuHours"] + totals["unmeasuredGpuHours"]
    )
    namespaces = summary["namespaces"]
    assert sum(n["gpuHours"] for n in namespaces) == pytest.approx(totals["gpuHours"])
    assert sum(n["gpuCost"] for n in namespaces) == pytest.approx(totals["gpuCost"])
    unallocated = next(n for n in namespaces if n["namespace"] == "__idle__")
    assert unallocated["gpuHours"] == pytest.approx(totals["unallocatedGpuHours"])
    # Per row: allocated = used + idle (+ not measured), and the CSV sums to the summary.
    per_row = allocation["usedGpuHours"] + allocation["idleGpuHours"] + allocation["unmeasuredGpuHours"]
    assert (allocation["gpuHours"] - per_row).abs().max() < 1e-5
    assert allocation["gpuHours"].sum() == pytest.approx(totals["gpuHours"], rel=1e-5)
    assert allocation["gpuCost"].sum() == pytest.approx(totals["gpuCost"], rel=1e-5)


def test_partial_then_daily_report_reconciles_with_plots_savings_and_accuracy(setup: Setup) -> None:
    # A rollout event at 02:05 asks for the day so far: 00:00-02:00.
    states = run_dag(DAY + timedelta(hours=2, minutes=5), mode="partial")
    assert states["__run__"] == "success", states
    partial = setup.summary()
    assert partial["partial"] is True and partial["window"]["end"] == "2026-11-24T02:00:00+00:00"
    _reconciles(partial, pd.read_csv(setup.report / "allocation.csv"), FLEET_GPUS * 2)

    # The daily run at 00:15 the next day covers the whole day and replaces the partial report.
    states = run_dag(DAY + timedelta(days=1, minutes=15))
    assert states == {
        "collect_inputs": "success",
        "allocate": "success",
        "attribute": "success",
        "publish_report": "success",
        "__run__": "success",
    }
    assert sorted(p.name for p in setup.report.iterdir()) == [
        "_MANIFEST.json",
        "allocation.csv",
        "report.html",
        "summary.json",
    ]
    assert list((setup.home / "store" / "_staging" / "cost_report").iterdir()) == []  # work folders removed
    summary = setup.summary()
    assert summary["partial"] is False and summary["date"] == "2026-11-24"
    assert summary["window"] == {"start": "2026-11-24T00:00:00+00:00", "end": "2026-11-25T00:00:00+00:00"}
    assert summary["hours"]["published"] == HOURS and len(summary["hours"]["missing"]) == 24 - HOURS
    assert summary["currency"] == "USD" and summary["default_price_per_gpu_hour"] == 0.95
    allocation = pd.read_csv(setup.report / "allocation.csv")
    _reconciles(summary, allocation, FLEET_GPUS * HOURS)

    # MPS replicas of sim-h100-1 come from the planner's observation; every tenant's usage is an estimate.
    mps = allocation[allocation["node"] == "sim-h100-1"]
    assert set(mps["mps_replicas"]) == {4} and set(mps["replicas_method"]) == {"observed"}
    assert mps.loc[mps["namespace"] != "__idle__", "usage_estimate"].all()
    # MIG slices count g/7: the H200's 3g+3g leaves 1/7 of each GPU uncovered, unallocated.
    h200 = allocation[(allocation["node"] == "sim-h200-0") & (allocation["sharing"] == "uncovered")]
    assert h200["gpuHours"].sum() == pytest.approx(4 * HOURS / 7, rel=1e-5)

    assert (summary["changes"], summary["rollbacks"]) == (1, 1)
    (change,) = summary["savings"]["changes"]
    assert change["node"] == "sim-a100-40-0" and change["status"] == "estimated"
    assert (change["hours_before"], change["hours_after"]) == (1, 2)
    assert summary["savings"]["estimate"] is True and "estimate" in summary["savings"]["method"]

    accuracy = summary["forecast_accuracy"]
    assert accuracy["champion"]["predictors"] == ["champion v1"]
    assert accuracy["champion"]["count"] == 64 and accuracy["champion"]["mae_p50"] >= 0
    assert {f["category"] for f in summary["idle_attribution"]} == {
        "allocated_but_idle",
        "memory_bound",
        "input_bound",
        "could_share",
    }
    assert any("A30" not in p["price_source"] for p in summary["price_sources"])

    page = (setup.report / "report.html").read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 4  # cost over time, allocated/used/idle, savings, forecast vs actual
    assert all(len(image) > 1000 for image in images)
    assert page.count("<table>") >= 6 and "team-llm" in page and "sim-h100-1" in page


def test_a_day_that_lost_its_validated_partitions_fails_clearly(setup: Setup) -> None:
    # Slicewise collected on DAY, so a later day with no validated hour is lost data: red in the UI.
    later = (DAY + timedelta(days=2)).date().isoformat()
    states = run_dag(DAY + timedelta(days=3, minutes=15), report_date=later)
    assert states["collect_inputs"] == "failed" and states["__run__"] == "failed"
    assert not (setup.home / "store" / "reports" / later).exists()


def test_a_day_before_the_first_validated_hour_is_skipped_not_failed(setup: Setup) -> None:
    # A new install's first daily run reports a day from before it collected anything: nothing is missing.
    states = run_dag(DAY + timedelta(days=1, minutes=15), report_date="2026-11-20")
    assert states["collect_inputs"] == "skipped" and states["__run__"] == "success"
    assert states["publish_report"] == "skipped"
    assert not (setup.home / "store" / "reports" / "2026-11-20").exists()
