"""
### GPU partition rollout

Plans MIG layouts / MPS sharing per managed GPU node (`slicewise.io/managed=true`) on each `slicewise_forecaster`
event (fallback: hourly at :45, skipped after a plan in the last 50 min) and applies them through GPU Operator labels.

- **`recommend`** (default): forecast, observe, plan (`plans/<run>/plan.{md,html,json}`), publish; no changes.
- **`apply`**: each `wave_N` changes its nodes (snapshot, cordon, drain, relabel, verify, uncordon), then bakes
  and analyses them; Inconclusive asks a person (`ask_person`; no answer in 60 min rolls back); `rollback`, the
  teardown of `start_rollout`, restores a failed rollout's nodes (also when the run is marked failed by hand);
  `report_rollout` publishes the outcome, whatever it is, and `watch_rollout` fails the run unless it promoted.

Tasks, Params, settings and Connections: docs/planner.md and docs/rollout.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, TaskGroup, dag, task

from slicewise.assets import FORECASTER, ROLLOUT
from slicewise.errors import task_outcome
from slicewise.rollout import approval
from slicewise.rollout.params import rollout_params
from slicewise.rollout.waves import MAX_WAVES


def step(decorator: Any = task, **kwargs: Any) -> Any:
    """A TaskFlow task whose errors follow ``slicewise.errors``: skip, fail at once, or retry."""
    return lambda body: decorator(**kwargs)(task_outcome()(body))


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
    params=rollout_params(),
    doc_md=__doc__,
)
def gpu_partition_rollout() -> None:
    @step()
    def forecast(triggering_asset_events: Any = None, dag_run: Any = None, **context: Any) -> str:
        events = (triggering_asset_events or {}).get(FORECASTER, [])
        return _steps().forecast(_run(context), events, dag_run.run_after)

    @step()
    def observe_cluster(**context: Any) -> str:
        return _steps().observe(_run(context))

    @step()
    def plan_nodes(forecasts: str, observed: str, dag_run: Any = None, **context: Any) -> dict[str, Any]:
        return _steps().plan(_run(context), forecasts, observed, dag_run.run_after)

    @step(outlets=[ROLLOUT])
    def publish_plan(summary: dict[str, Any], dag_run: Any = None, **context: Any) -> dict[str, Any]:
        extra = _steps().publish_plan(_run(context), summary, dag_run.run_after)
        context["outlet_events"][ROLLOUT].extra = extra
        return extra

    @step()
    def start_rollout(summary: dict[str, Any], **context: Any) -> dict[str, Any]:
        return _steps().start(_run(context), summary)

    @step()
    def apply_wave(started: dict[str, Any], index: int, **context: Any) -> dict[str, Any]:
        return _steps().apply_wave(_run(context), started, index)

    @step()
    def analyse_wave(started: dict[str, Any], index: int, **context: Any) -> dict[str, Any]:
        return _steps().analyse_wave(_run(context), started, index)

    @step(task.branch)
    def route(started: dict[str, Any], index: int, **context: Any) -> str:
        paused = _steps().waits_for_a_person(_run(context), started)
        return f"wave_{index}.ask_person" if paused else f"wave_{index}.proceed"

    @step()
    def answer(started: dict[str, Any], approved: bool, **context: Any) -> str:
        return _steps().answer(_run(context), started, approved)

    @step()
    def finish(started: dict[str, Any], **context: Any) -> str | None:
        return _steps().finish(_run(context), started)

    @step(retries=3)
    def rollback(started: dict[str, Any], **context: Any) -> dict[str, Any]:
        return _steps().rollback(_run(context), started)

    @step(trigger_rule="all_done", outlets=[ROLLOUT])
    def report_rollout(rolled_back: dict[str, Any] | None, **context: Any) -> dict[str, Any]:
        extra = _steps().report(_run(context), rolled_back)  # None: the teardown did not answer
        context["outlet_events"][ROLLOUT].extra = extra  # emitted only if this task succeeds: every outcome
        return extra

    @step()
    def watch_rollout(extra: dict[str, Any]) -> None:
        _steps().check_promoted(extra)  # a rollback that succeeded still fails the run

    def wave(index: int, started: Any, previous: Any) -> Any:
        with TaskGroup(group_id=f"wave_{index}", tooltip="the canary" if index == 0 else f"wave {index}"):
            applied: Any = apply_wave.override(task_id="apply")(started, index)
            analysed: Any = analyse_wave.override(task_id="analyse")(started, index)
            routed: Any = route.override(task_id="route")(started, index)
            proceed = EmptyOperator(task_id="proceed")
            ask_person = approval.ask_person(index)
            approved: Any = answer.override(task_id="approved")(started, True)
            rejected: Any = answer.override(task_id="rejected")(started, False)
            done = EmptyOperator(task_id="done", trigger_rule="none_failed_min_one_success")
            previous >> applied >> analysed >> routed >> [proceed, ask_person]
            ask_person >> [approved, rejected]
            [proceed, approved, rejected] >> done
        return done

    summary: Any = plan_nodes(forecast(), observe_cluster())
    publish_plan(summary)
    # A failed start changed no layout (taints at most; the next start rolls back what it left): no teardown.
    started: Any = start_rollout(summary).as_setup()
    previous: Any = started
    for index in range(MAX_WAVES):
        previous = wave(index, started, previous)
    result: Any = rollback(started).as_teardown(setups=started, on_failure_fail_dagrun=True)
    previous >> finish(started) >> result
    watch_rollout(report_rollout(result))  # after the teardown: only all_success tasks may follow a setup


def _steps() -> Any:
    from slicewise.rollout import steps  # inside tasks only: parsing stays light

    return steps


def _run(context: dict[str, Any]) -> Any:
    return _steps().rollout_run(context.get("params") or {}, context.get("run_id"))


gpu_partition_rollout()
