"""
### GPU partition rollout

Turns the forecaster's output into a desired MIG layout / MPS sharing per managed GPU node (label
`slicewise.io/managed=true`), through the NVIDIA GPU Operator's labels (`nvidia.com/mig.config`,
`nvidia.com/device-plugin.config`). Runs on each `slicewise_forecaster` event and, as a fallback, every hour at
:45 (skipped when an event-triggered plan was made in the last 50 minutes).

**Mode `recommend` (default): plans and reports, changes nothing in the cluster.**

| task | does |
|---|---|
| `forecast` | the trusted predictor (the champion, or a baseline when no model beats it) forecasts every GPU / MIG instance and the pending GPU demand for the next `planner_horizon_minutes` |
| `observe_cluster` | reads managed nodes and their GPU pods through the cluster backend (`simulated` or `kubernetes`); reads only |
| `plan_nodes` | policy `packing` or `thresholds` plus guard rails (hysteresis, dwell time, evictability, change budget, forecaster trust) → `plans/<run>/plan.{md,html,parquet,json}` and a table in this task's log |
| `publish_plan` | emits `slicewise_rollout` with the counts per action |

Params: `mode`, `planner_policy` and the other `planner_*` settings (README, *Planner*). Connections:
`mlflow_default`, `kubernetes_default` (backend `kubernetes`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from slicewise.assets import FORECASTER, ROLLOUT

FALLBACK_QUIET_MINUTES = 50


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("45 * * * *", timezone="UTC"), assets=FORECASTER
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,  # a plan is for now: planning past hours helps nobody
    max_active_runs=1,  # two rollouts must never race on the same nodes
    tags=["slicewise", "rollout", "kubernetes"],
    default_args={
        "owner": "slicewise",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "execution_timeout": timedelta(minutes=30),
    },
    params={
        "mode": Param(
            "recommend",
            enum=["recommend", "apply"],
            description="recommend: plan and report only. apply: change nodes gradually (canary waves).",
        ),
        "planner_policy": Param(
            None, type=["null", "string"], enum=[None, "packing", "thresholds"], description="Planner policy."
        ),
        "planner_fallback": Param(
            None,
            type=["null", "string"],
            enum=[None, "none", "baseline"],
            description="When the forecaster is not trusted: none (change nothing) or baseline (act on it).",
        ),
        "planner_cordon_to_drain": Param(
            None, type=["null", "boolean"], description="Cordon nodes blocked by non-evictable GPU pods."
        ),
        "cluster_backend": Param(
            None,
            type=["null", "string"],
            enum=[None, "simulated", "kubernetes"],
            description="Cluster backend.",
        ),
    },
    doc_md=__doc__,
)
def gpu_partition_rollout() -> None:
    @task
    def forecast(
        triggering_asset_events: Any = None,
        params: Any = None,
        run_id: str | None = None,
        dag_run: Any = None,
    ) -> str:
        from airflow.sdk.exceptions import AirflowSkipException

        from slicewise import store
        from slicewise.connections import mlflow_tracking_uri, task_settings
        from slicewise.planning import run, storage

        settings = task_settings(params)
        root = store.storage_path(settings.storage_root)
        events = (triggering_asset_events or {}).get(FORECASTER, [])
        now = dag_run.run_after
        if not events and storage.recent_plan(root, now, FALLBACK_QUIET_MINUTES):
            raise AirflowSkipException(
                f"fallback run: a plan was made less than {FALLBACK_QUIET_MINUTES} min ago"
            )
        extra = dict(events[-1].extra) if events else None
        tracking_uri = mlflow_tracking_uri(settings)
        trust = run.resolve_trust(settings, tracking_uri, extra, now)
        folder = storage.run_folder(root, run_id or "manual")
        return str(run.make_forecasts(settings, root, folder, trust, tracking_uri))

    @task
    def observe_cluster(params: Any = None, run_id: str | None = None) -> str:
        from slicewise import store
        from slicewise.cluster.factory import open_backend
        from slicewise.connections import task_settings
        from slicewise.planning import run, storage

        settings = task_settings(params)
        folder = storage.run_folder(store.storage_path(settings.storage_root), run_id or "manual")
        return str(run.observe(open_backend(settings), folder))

    @task
    def plan_nodes(
        forecasts: str, observed: str, params: Any = None, run_id: str | None = None, dag_run: Any = None
    ) -> dict[str, Any]:
        from slicewise import store
        from slicewise.connections import task_settings
        from slicewise.planning import run, storage

        settings = task_settings(params)
        folder = storage.run_folder(store.storage_path(settings.storage_root), run_id or "manual")
        return run.make_plan(settings, folder, dag_run.run_after)

    @task(outlets=[ROLLOUT])
    def publish_plan(
        summary: dict[str, Any],
        params: Any = None,
        run_id: str | None = None,
        dag_run: Any = None,
        outlet_events: Any = None,
    ) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from slicewise import store
        from slicewise.connections import task_settings
        from slicewise.planning import storage

        if params["mode"] == "apply":
            raise AirflowFailException("mode=apply is not available yet: this version plans and reports only")
        settings = task_settings(params)
        storage.mark_latest(store.storage_path(settings.storage_root), run_id or "manual", dag_run.run_after)
        extra = {"mode": params["mode"], "run_id": run_id, **summary}
        outlet_events[ROLLOUT].extra = extra
        return extra

    # TaskFlow calls return XComArgs that resolve to the annotated values when the tasks run.
    forecasts: Any = forecast()
    observed: Any = observe_cluster()
    summary: Any = plan_nodes(forecasts, observed)
    publish_plan(summary)


gpu_partition_rollout()
