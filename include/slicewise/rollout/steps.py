"""The ``gpu_partition_rollout`` DAG's tasks as plain functions: one front door for the DAG file.

Each step takes the run (its settings, id and mode) and what its upstream task returned, and returns what its
downstream tasks receive. Planning itself is :mod:`slicewise.planning.steps`; changing nodes is
:mod:`slicewise.rollout.engine`. Skips are :class:`~slicewise.errors.NotYet`, failures that must not be retried
:class:`~slicewise.errors.PermanentError` (the DAG's ``task_outcome`` maps them onto Airflow).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slicewise.errors import NotYet, PermanentError

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from slicewise.rollout.engine import Rollouts
    from slicewise.settings import Settings

#: An hourly fallback run stays quiet when an event-triggered plan was made this recently.
FALLBACK_QUIET_MINUTES = 50
RECOMMEND, APPLY = "recommend", "apply"


class NothingToDo(NotYet):
    """This task has nothing to do in this run (the other mode's task, a quiet fallback run): it skips."""


class RolloutNotPromoted(PermanentError):
    """The rollout was rolled back, failed or never started: the run must fail, and retrying changes nothing."""


@dataclass(frozen=True)
class RolloutRun:
    """One DAG run: its settings (Params over Variables over defaults), id and mode."""

    settings: Settings
    run_id: str
    mode: str

    @property
    def root(self) -> ObjectStoragePath:
        from slicewise import store

        return store.storage_path(self.settings.storage_root)

    @property
    def folder(self) -> ObjectStoragePath:
        from slicewise.planning import storage

        return storage.run_folder(self.root, self.run_id)

    def rollouts(self) -> Rollouts:
        from slicewise.rollout.wiring import rollouts

        return rollouts(self.settings, self.run_id)

    def applying(self, task: str) -> None:
        """NothingToDo unless the run is in apply mode."""
        if self.mode != APPLY:
            raise NothingToDo(f"recommend mode: {task}")


def rollout_run(params: Mapping[str, Any], run_id: str | None) -> RolloutRun:
    """The run of these Params: the Param ``mode``, else the cluster's setting ``rollout_mode``."""
    from slicewise.connections import task_settings

    settings = task_settings(params)
    mode = params.get("mode") or settings.rollout_mode
    if mode not in (RECOMMEND, APPLY):
        raise PermanentError(f"rollout_mode must be recommend or apply, got {mode!r}")
    return RolloutRun(settings, run_id or "manual", str(mode))


# -- planning ---------------------------------------------------------------------------------------------------
def forecast(run: RolloutRun, events: Sequence[Any], now: datetime) -> str:
    """Forecasts for the plan (``events``: this run's forecaster Asset events, none for a fallback run)."""
    from slicewise.connections import mlflow_tracking_uri
    from slicewise.planning import steps as planning
    from slicewise.planning import storage

    if not events and storage.recent_plan(run.root, now, FALLBACK_QUIET_MINUTES):
        raise NothingToDo(f"fallback run: a plan was made less than {FALLBACK_QUIET_MINUTES} min ago")
    extra = dict(events[-1].extra) if events else None
    tracking_uri = mlflow_tracking_uri(run.settings)
    trust = planning.resolve_trust(run.settings, tracking_uri, extra, now)
    # A new install: nothing validated yet is not a failure; NoMetrics skips, saying why.
    return str(planning.make_forecasts(run.settings, run.root, run.folder, trust, tracking_uri))


def observe(run: RolloutRun) -> str:
    from slicewise.cluster.factory import open_backend
    from slicewise.planning import steps as planning

    return str(planning.observe(open_backend(run.settings), run.folder))


def plan(run: RolloutRun, forecasts: str, observed: str, now: datetime) -> dict[str, Any]:
    """The plan from the forecasts and observations the upstream tasks wrote (both in this run's folder)."""
    from slicewise import store
    from slicewise.planning import steps as planning

    folder = store.storage_path(forecasts).parent
    if store.storage_path(observed).parent != folder:
        raise PermanentError(f"forecasts {forecasts} and observations {observed} belong to different runs")
    return planning.make_plan(run.settings, folder, now)


def publish_plan(run: RolloutRun, summary: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The ``slicewise_rollout`` event's extra in recommend mode (apply mode: ``report`` publishes)."""
    from slicewise.planning import storage

    storage.mark_latest(run.root, run.run_id, now)
    if run.mode == APPLY:
        raise NothingToDo("apply mode: report_rollout publishes the outcome")
    return {"mode": RECOMMEND, "run_id": run.run_id, **summary}


# -- rollout ----------------------------------------------------------------------------------------------------
def start(run: RolloutRun, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Take the cluster lock; resume this run's rollout, roll back an abandoned one, or start the plan's."""
    from slicewise import store
    from slicewise.planning import storage
    from slicewise.rollout import engine

    run.applying("nothing is changed")
    plan_path = str(summary["paths"]["plan.json"])
    return engine.start(run.rollouts(), storage.read_plan(store.storage_path(plan_path)), plan_path)


def apply_wave(run: RolloutRun, started: Mapping[str, Any], index: int) -> dict[str, Any]:
    from slicewise.rollout import engine

    return engine.apply_wave(run.rollouts(), started["rollout_id"], index)


def analyse_wave(run: RolloutRun, started: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Bake, then measure the wave's nodes in Prometheus against the analysis checks."""
    from slicewise.connections import prometheus_endpoint
    from slicewise.rollout import engine
    from slicewise.rollout.checks import load_checks
    from slicewise.rollout.measure import PrometheusMeasurer

    ctx = run.rollouts()
    if engine.is_skipped_wave(ctx, started["rollout_id"], index):
        return {"wave": index, "skipped": True}
    settings = run.settings
    measurer = PrometheusMeasurer(prometheus_endpoint(settings.prometheus_conn_id), settings.query_timeout_s)
    return engine.analyse_wave(
        ctx, started["rollout_id"], index, measurer, load_checks(settings), bake_s=settings.analysis_bake_s
    )


def waits_for_a_person(run: RolloutRun, started: Mapping[str, Any]) -> bool:
    from slicewise.rollout import engine

    return engine.is_paused(run.rollouts(), started["rollout_id"])


def answer(run: RolloutRun, started: Mapping[str, Any], approved: bool) -> str:
    from slicewise.rollout import engine

    return engine.answer_pause(run.rollouts(), started["rollout_id"], approved, "a person in the Airflow UI")


def finish(run: RolloutRun, started: Mapping[str, Any]) -> str | None:
    from slicewise.rollout import engine

    return engine.finish(run.rollouts(), started["rollout_id"])


def rollback(run: RolloutRun, started: Mapping[str, Any]) -> dict[str, Any]:
    """Restore every node of a rollout that is rolling back, or that a failed task left running; the answer
    carries the ``rollout_id`` on to ``report``."""
    from slicewise.rollout import engine

    rollout_id = started.get("rollout_id")
    if run.mode != APPLY:
        return {"rolled_back": False, "rollout_id": rollout_id}
    return {**engine.rollback(run.rollouts(), rollout_id), "rollout_id": rollout_id}


def report(run: RolloutRun, rolled_back: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``slicewise_rollout`` event's extra in apply mode, from ``rollback``'s answer.

    ``rolled_back`` is None when the teardown did not run or failed (``start_rollout`` failed, or the rollback
    gave up): the outcome is then read from this run's rollout in the ledger, or is ``not started``."""
    from slicewise.rollout import engine

    run.applying("publish_plan reported the plan")
    ctx = run.rollouts()
    if rolled_back is not None:
        rollout_id = rolled_back.get("rollout_id")
    else:
        ours = [r for r in ctx.ledger.recent_rollouts(ctx.cluster) if r.run_id == ctx.run_id]
        if not ours:
            reason = "start_rollout or rollback did not finish: their logs say why"
            return {"mode": APPLY, "run_id": run.run_id, "outcome": "not started", "reason": reason}
        rollout_id = ours[0].id
    return {"mode": APPLY, "run_id": run.run_id, **engine.report(ctx, rollout_id)}


def check_promoted(extra: Mapping[str, Any]) -> None:
    """RolloutNotPromoted unless ``report``'s outcome is a promoted rollout or a plan that changes nothing (a
    rollout still running, paused or rolling back when the run ends was left half done: that fails too)."""
    if extra["outcome"] not in ("promoted", "nothing to change"):
        raise RolloutNotPromoted(f"rollout {extra['outcome']}: {extra['reason']}")
