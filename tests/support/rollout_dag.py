"""Running ``gpu_partition_rollout`` with ``dag.test()`` on validated simulated history, and reading its plan."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slicewise import store
from slicewise.simulator.fleet import Fleet
from tests.support.partitions import publish_hour

DAG_ID = "gpu_partition_rollout"
#: Three weekday hours around the fleet's daily peak: pending demand appears when slots run out.
FIRST = datetime(2026, 11, 24, 11, tzinfo=UTC)
HOURS = 3
RUN_AFTER = FIRST + timedelta(hours=HOURS, minutes=5)
#: dag.test names runs after run_after: each run gets its own second.
_RUN_SECONDS = itertools.count()


def publish_history(root_url: str) -> None:
    root = store.storage_path(root_url)
    fleet = Fleet.default()
    for hour in range(HOURS):
        publish_hour(root, fleet, FIRST + timedelta(hours=hour))


def load_dag() -> Any:
    """The DAG as ``dag.test()`` runs it, with retries off (a failure must show at once)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    for task in dag.tasks:
        task.retries = 0
    return dag


def next_run_after() -> datetime:
    """A distinct run_after per run: ``dag.test()`` derives the run id from it."""
    return RUN_AFTER + timedelta(seconds=next(_RUN_SECONDS))


def states(run: Any) -> dict[str, str]:
    """Task id -> state, plus ``__run__`` (the run's state) and ``__run_id__``."""
    return {ti.task_id: ti.state for ti in run.get_task_instances()} | {
        "__run__": run.state,
        "__run_id__": run.run_id,
    }


def run_dag(**conf: Any) -> dict[str, str]:
    """One run with ``conf`` as its Params (no retries); task id -> state, plus ``__run__``."""
    return states(load_dag().test(run_after=next_run_after(), run_conf=conf))


def read_plan(root: Path) -> dict[str, Any]:
    """The run's ``plan.json`` (the storage root holds one run's plans), after checking its siblings exist."""
    (plan_file,) = root.glob("plans/*/plan.json")
    for name in ("plan.md", "plan.html", "plan.parquet", "forecasts.json", "observed.json"):
        assert (plan_file.parent / name).exists(), name
    return dict(json.loads(plan_file.read_text()))
