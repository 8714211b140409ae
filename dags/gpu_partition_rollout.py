"""
### GPU partition rollout

Turns the forecaster's output into a desired MIG layout / MPS sharing per managed GPU node (label
`slicewise.io/managed=true`), through the NVIDIA GPU Operator's labels (`nvidia.com/mig.config`,
`nvidia.com/device-plugin.config`). Runs on each `slicewise_forecaster` event and, as a fallback, every hour at
:45 (skipped when an event-triggered plan was made in the last 50 minutes).

**Mode `recommend` (default): plans and reports, changes nothing in the cluster.**
**Mode `apply`: changes the planned nodes gradually**: a canary node, then growing waves
(`rollout_wave_shares`), each node snapshotted in the ledger, cordoned, drained through the Eviction API,
relabelled, verified (state `success` *and* allocatable resources matching the new layout), uncordoned; after
each wave a bake and an analysis against Prometheus (Argo Rollouts semantics). Failed / Error → every changed
node is restored to its snapshot in reverse order and the run fails; Inconclusive → a person decides in the
`ask_person` task (Required Actions); no answer within 60 minutes → roll back.

| task | does |
|---|---|
| `forecast` | the trusted predictor (the champion, or a baseline when no model beats it) forecasts every GPU / MIG instance and the pending GPU demand for the next `planner_horizon_minutes` |
| `observe_cluster` | reads managed nodes and their GPU pods through the cluster backend (`simulated` or `kubernetes`); reads only |
| `plan_nodes` | policy `packing` or `thresholds` plus guard rails → `plans/<run>/plan.{md,html,parquet,json}` and a table in this task's log |
| `publish_plan` | recommend mode: emits `slicewise_rollout` with the counts per action |
| `start_rollout` | apply mode: takes the cluster lock; resumes this run's rollout, rolls back an abandoned one, or starts the plan's |
| `wave_N.apply` / `.analyse` / `.ask_person` | one wave: change its nodes (at most `rollout_max_in_flight` at once), bake and measure, pause for a person when Inconclusive |
| `finish` | every wave passed → rollout `promoted` |
| `rollback` | runs whatever happened: restores every node of a rollout that is rolling back (or was left running by a failed task) |
| `report_rollout` | emits `slicewise_rollout` with the outcome; fails the run when the rollout was rolled back or failed |

Params: `mode`, `planner_policy` and the other `planner_*` / `rollout_*` / `analysis_*` settings (README).
Connections: `mlflow_default`, `prometheus_default`, `kubernetes_default` (backend `kubernetes`), `slicewise_ledger`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import HITLBranchOperator
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, TaskGroup, dag, task

from slicewise.assets import FORECASTER, ROLLOUT
from slicewise.errors import task_outcome

FALLBACK_QUIET_MINUTES = 50
MAX_WAVES = 6  # = slicewise.rollout.waves.MAX_WAVES (not imported: parsing stays light)
CONTINUE, ROLL_BACK = "Continue the rollout", "Roll back"
APPROVAL_TIMEOUT = timedelta(minutes=60)  # no answer from a person in this time -> roll back


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
        "execution_timeout": timedelta(minutes=60),
    },
    params={
        "mode": Param(
            None,
            type=["null", "string"],
            enum=[None, "recommend", "apply"],
            description="recommend: plan and report only. apply: change nodes gradually (canary waves). "
            "Empty: the setting rollout_mode (recommend unless set to apply for this cluster).",
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
        "rollout_wave_shares": Param(
            None,
            type=["null", "string"],
            description="Cumulative shares after the canary, e.g. 0.1,0.25,0.5,1.0",
        ),
        "rollout_max_in_flight": Param(
            None, type=["null", "integer"], minimum=1, description="Most nodes being changed at once."
        ),
    },
    doc_md=__doc__,
)
def gpu_partition_rollout() -> None:
    @task
    @task_outcome()
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
        # A new install: nothing validated yet is not a failure; NoMetrics skips, saying why.
        return str(run.make_forecasts(settings, root, folder, trust, tracking_uri))

    @task
    @task_outcome()
    def observe_cluster(params: Any = None, run_id: str | None = None) -> str:
        from slicewise import store
        from slicewise.cluster.factory import open_backend
        from slicewise.connections import task_settings
        from slicewise.planning import run, storage

        settings = task_settings(params)
        folder = storage.run_folder(store.storage_path(settings.storage_root), run_id or "manual")
        return str(run.observe(open_backend(settings), folder))

    @task
    @task_outcome()
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
    @task_outcome()
    def publish_plan(
        summary: dict[str, Any],
        params: Any = None,
        run_id: str | None = None,
        dag_run: Any = None,
        outlet_events: Any = None,
    ) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from slicewise import store
        from slicewise.connections import task_settings
        from slicewise.planning import storage

        settings = task_settings(params)
        storage.mark_latest(store.storage_path(settings.storage_root), run_id or "manual", dag_run.run_after)
        if _mode(params, settings) == "apply":
            raise AirflowSkipException("apply mode: report_rollout publishes the outcome")
        extra = {"mode": "recommend", "run_id": run_id, **summary}
        outlet_events[ROLLOUT].extra = extra
        return extra

    @task
    @task_outcome()
    def start_rollout(
        summary: dict[str, Any], params: Any = None, run_id: str | None = None
    ) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from slicewise.connections import task_settings
        from slicewise.planning import storage
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        settings = task_settings(params)
        if _mode(params, settings) != "apply":
            raise AirflowSkipException("recommend mode: nothing is changed")
        plan_path = summary["paths"]["plan.json"]
        plan = storage.read_plan(_path(plan_path))
        return engine.start(rollouts(settings, run_id or "manual"), plan, plan_path)

    @task
    @task_outcome()
    def apply_wave(
        started: dict[str, Any], index: int, params: Any = None, run_id: str | None = None
    ) -> dict[str, Any]:
        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        ctx = rollouts(task_settings(params), run_id or "manual")
        return engine.apply_wave(ctx, started["rollout_id"], index)

    @task
    @task_outcome()
    def analyse_wave(
        started: dict[str, Any], index: int, params: Any = None, run_id: str | None = None
    ) -> dict[str, Any]:
        from slicewise.connections import prometheus_endpoint, task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.checks import load_checks
        from slicewise.rollout.measure import PrometheusMeasurer
        from slicewise.rollout.wiring import rollouts

        settings = task_settings(params)
        ctx = rollouts(settings, run_id or "manual")
        if engine.is_skipped_wave(ctx, started["rollout_id"], index):
            return {"wave": index, "skipped": True}
        measurer = PrometheusMeasurer(
            prometheus_endpoint(settings.prometheus_conn_id), settings.query_timeout_s
        )
        return engine.analyse_wave(
            ctx,
            started["rollout_id"],
            index,
            measurer,
            load_checks(settings),
            bake_s=settings.analysis_bake_s,
        )

    @task.branch
    @task_outcome()
    def route(started: dict[str, Any], index: int, params: Any = None, run_id: str | None = None) -> str:
        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        ctx = rollouts(task_settings(params), run_id or "manual")
        paused = engine.is_paused(ctx, started["rollout_id"])
        return f"wave_{index}.ask_person" if paused else f"wave_{index}.proceed"

    @task
    @task_outcome()
    def answer(started: dict[str, Any], approved: bool, params: Any = None, run_id: str | None = None) -> str:
        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        ctx = rollouts(task_settings(params), run_id or "manual")
        return engine.answer_pause(ctx, started["rollout_id"], approved, "a person in the Airflow UI")

    @task
    @task_outcome()
    def finish(started: dict[str, Any], params: Any = None, run_id: str | None = None) -> str | None:
        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        return engine.finish(rollouts(task_settings(params), run_id or "manual"), started["rollout_id"])

    @task(trigger_rule="all_done", retries=3)
    @task_outcome()
    def rollback(params: Any = None, run_id: str | None = None, ti: Any = None) -> dict[str, Any]:
        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        settings = task_settings(params)
        if _mode(params, settings) != "apply":
            return {"rolled_back": False}
        started = ti.xcom_pull(task_ids="start_rollout") or {}
        ctx = rollouts(settings, run_id or "manual")
        return engine.rollback(ctx, started.get("rollout_id"))

    @task(trigger_rule="all_done", outlets=[ROLLOUT])
    @task_outcome()
    def report_rollout(
        result: dict[str, Any],
        params: Any = None,
        run_id: str | None = None,
        ti: Any = None,
        outlet_events: Any = None,
    ) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from slicewise.connections import task_settings
        from slicewise.rollout import engine
        from slicewise.rollout.wiring import rollouts

        settings = task_settings(params)
        if _mode(params, settings) != "apply":
            raise AirflowSkipException("recommend mode: publish_plan reported the plan")
        started = ti.xcom_pull(task_ids="start_rollout") or {}
        ctx = rollouts(settings, run_id or "manual")
        report = engine.report(ctx, started.get("rollout_id"))
        outlet_events[ROLLOUT].extra = {"mode": "apply", "run_id": run_id, **report}
        # The watcher: a rollback that succeeded is still a failed rollout, and the run must say so.
        if report["outcome"] in ("rolled_back", "failed", "not started"):
            raise AirflowFailException(f"rollout {report['outcome']}: {report['reason']}")
        return report

    forecasts: Any = forecast()
    observed: Any = observe_cluster()
    summary: Any = plan_nodes(forecasts, observed)
    publish_plan(summary)
    started: Any = start_rollout(summary)
    previous: Any = started
    for index in range(MAX_WAVES):
        with TaskGroup(
            group_id=f"wave_{index}", tooltip=f"wave {index} ({'canary' if index == 0 else 'growing'})"
        ):
            applied: Any = apply_wave.override(task_id="apply")(started, index)
            analysed: Any = analyse_wave.override(task_id="analyse")(started, index)
            routed: Any = route.override(task_id="route")(started, index)
            proceed = EmptyOperator(task_id="proceed")
            ask_person = HITLBranchOperator(
                task_id="ask_person",
                subject=f"Wave {index} of the GPU partition rollout is inconclusive: continue or roll back?",
                body=(
                    "The analysis could not decide. Evidence:\n\n```\n"
                    f"{{{{ ti.xcom_pull(task_ids='wave_{index}.analyse') }}}}\n```\n"
                    "No answer before the timeout rolls the rollout back."
                ),
                options=[CONTINUE, ROLL_BACK],
                defaults=[ROLL_BACK],
                response_timeout=APPROVAL_TIMEOUT,
                options_mapping={CONTINUE: f"wave_{index}.approved", ROLL_BACK: f"wave_{index}.rejected"},
            )
            approved: Any = answer.override(task_id="approved")(started, True)
            rejected: Any = answer.override(task_id="rejected")(started, False)
            done = EmptyOperator(task_id="done", trigger_rule="none_failed_min_one_success")
            previous >> applied >> analysed >> routed >> [proceed, ask_person]
            ask_person >> [approved, rejected]
            [proceed, approved, rejected] >> done
        previous = done
    finished: Any = finish(started)
    previous >> finished
    result: Any = rollback()
    finished >> result
    report_rollout(result)


def _mode(params: Any, settings: Any) -> str:
    """The run's Param ``mode``, else the cluster's setting ``rollout_mode``."""
    mode = params.get("mode") or settings.rollout_mode
    if mode not in ("recommend", "apply"):
        raise ValueError(f"rollout_mode must be recommend or apply, got {mode!r}")
    return str(mode)


def _path(url: str) -> Any:
    from slicewise import store

    return store.storage_path(url)


gpu_partition_rollout()
