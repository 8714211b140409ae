"""``slicewise rollout apply|status|resume|abort|marks``: one rollout by hand, on the DAG's engine and ledger.

``apply --plan PLAN`` takes the cluster's rollout lock and applies the plan's changes in the same canary waves
as ``gpu_partition_rollout`` in apply mode: snapshot, cordon, drain, label, verify, uncordon, then the analysis
against Prometheus (Connection ``prometheus_default``), then the next wave; a failed wave rolls every changed
node back. ``status`` prints a rollout's story from the ledger (default: the cluster's unfinished rollout, else
its newest). ``resume`` carries on an unfinished rollout as the run that started it (``--approve`` answers a
wave paused on an Inconclusive analysis); ``abort`` rolls an unfinished rollout back now. ``marks`` prints the
cluster's newest changes outside the waves (the ledger's marks: taints, annotations, pod moves, holds, the
autoscaler's ranking), newest first.

Settings and Connections are read as the DAG reads them (``SLICEWISE_*`` env, the Variable
``slicewise_settings``, ``AIRFLOW_CONN_*``). ``resume`` and ``abort`` act as the rollout's own run: never while
that Airflow run is still running. Exit codes: 0 promoted (or nothing to change, or status shown), 1 rolled
back or failed, 2 bad input or the cluster is locked by another run, 3 paused for a person.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXIT_DONE, EXIT_ROLLED_BACK, EXIT_BAD_INPUT, EXIT_PAUSED = 0, 1, 2, 3
#: Lock holder and ledger run id prefix of rollouts started here (the DAG never takes their lock over).
CLI_RUN_PREFIX = "slicewise-cli/"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rollout", help="apply a plan by hand, or inspect, resume or abort a rollout", description=__doc__
    )
    actions = parser.add_subparsers(dest="action", required=True)
    apply = actions.add_parser("apply", help="apply a plan.json in canary waves, with analysis and rollback")
    apply.add_argument("--plan", required=True, help="the planner's plan.json (a path or a storage URL)")
    apply.add_argument("--run-id", help="names this run in the ledger and the lock (default: the time)")
    for name, text in (
        ("status", "print a rollout's story from the ledger"),
        ("resume", "carry on an unfinished rollout as the run that started it"),
        ("abort", "roll an unfinished rollout back now"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "--rollout", type=int, help="the rollout id (default: the cluster's unfinished one)"
        )
        if name == "resume":
            action.add_argument(
                "--approve", action="store_true", help="continue a wave paused on an Inconclusive analysis"
            )
    marks = actions.add_parser("marks", help="print the cluster's newest changes outside the waves")
    marks.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from slicewise.connections import task_settings
    from slicewise.errors import PermanentError
    from slicewise.rollout.engine import RolloutBusy
    from slicewise.rollout.ledger.db import LedgerError

    try:
        settings = task_settings()
        if args.action == "apply":
            return _apply(settings, args.plan, args.run_id)
        actions = {"status": _status, "resume": _resume, "abort": _abort, "marks": _marks}
        return actions[args.action](settings, args)
    except (PermanentError, RolloutBusy, LedgerError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _apply(settings: Any, plan_url: str, run_id: str | None) -> int:
    from slicewise import store
    from slicewise.planning import storage
    from slicewise.rollout import engine
    from slicewise.rollout.wiring import rollouts

    url = plan_url if "://" in plan_url else Path(plan_url).expanduser().resolve().as_uri()
    try:
        plan = storage.read_plan(store.storage_path(url))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {plan_url}: not a readable plan.json ({type(exc).__name__}: {exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    holder = CLI_RUN_PREFIX + (run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    ctx = rollouts(settings, "", holder_id=holder)
    started = engine.start(ctx, plan, url)
    print(f"{started['action']}: rollout {started['rollout_id']}, waves {started['waves']}")
    if started["rollout_id"] is None:
        return EXIT_DONE
    if started["action"] == "recovering":
        # Another run's rollout left unfinished: it is put back, and this plan changes nothing.
        return _settle(ctx, settings, started["rollout_id"])
    return _drive(ctx, settings, started["rollout_id"])


def _drive(ctx: Any, settings: Any, rollout_id: int) -> int:
    """Every wave not yet passed: apply, analyse; stop when paused; then promote or roll back."""
    from slicewise.connections import prometheus_endpoint
    from slicewise.rollout import engine
    from slicewise.rollout.checks import load_checks
    from slicewise.rollout.ledger import WaveStatus
    from slicewise.rollout.measure import PrometheusMeasurer

    measurer = PrometheusMeasurer(prometheus_endpoint(settings.prometheus_conn_id), settings.query_timeout_s)
    checks = load_checks(settings)
    for wave in ctx.ledger.waves(rollout_id):
        if wave.status == WaveStatus.PASSED or engine.is_skipped_wave(ctx, rollout_id, wave.index):
            continue
        applied = engine.apply_wave(ctx, rollout_id, wave.index)
        print(f"wave {wave.index}: {applied.get('nodes', {})}")
        analysed = engine.analyse_wave(
            ctx, rollout_id, wave.index, measurer, checks, bake_s=settings.analysis_bake_s
        )
        if not analysed.get("skipped"):
            print(f"wave {wave.index}: analysis {analysed['outcome']} {'; '.join(analysed['reasons'])}")
        if engine.is_paused(ctx, rollout_id):
            print(ctx.ledger.story(rollout_id))
            print(
                f"paused: a person decides: slicewise rollout resume --rollout {rollout_id} --approve, "
                f"or slicewise rollout abort --rollout {rollout_id}"
            )
            return EXIT_PAUSED
    engine.finish(ctx, rollout_id)
    return _settle(ctx, settings, rollout_id)


def _settle(ctx: Any, settings: Any, rollout_id: int) -> int:
    """Roll back what was not promoted, print the story, exit as the outcome says."""
    from slicewise.rollout import engine

    engine.rollback(ctx, rollout_id)
    report = engine.report(ctx, rollout_id)
    print(ctx.ledger.story(rollout_id))
    print(f"{report['outcome']}: {report['reason']}")
    return EXIT_DONE if report["outcome"] == "promoted" else EXIT_ROLLED_BACK


def _acting_as(settings: Any, rollout: int | None) -> tuple[Any, Any]:
    """A rollout context acting as the run that started ``rollout`` (default: the unfinished one)."""
    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.db import LedgerError
    from slicewise.rollout.ledger.url import ledger_url
    from slicewise.rollout.wiring import cluster_identity, rollouts

    with Ledger.open(ledger_url(settings)) as ledger:
        found = (
            ledger.rollout(rollout)
            if rollout is not None
            else ledger.unfinished_rollout(cluster_identity(settings))
        )
    if found is None:
        raise LedgerError(f"no unfinished rollout on {cluster_identity(settings)}")
    if found.finished:
        raise LedgerError(f"rollout {found.id} is {found.status}: nothing to resume or abort")
    return rollouts(settings, "", holder_id=found.run_id), found


def _resume(settings: Any, args: argparse.Namespace) -> int:
    from slicewise.planning.types import FleetPlan
    from slicewise.rollout import engine
    from slicewise.rollout import ledger as ledger_mod

    ctx, found = _acting_as(settings, args.rollout)
    empty = FleetPlan(
        "packing", "", True, 60, ()
    )  # an unfinished rollout of this run is resumed, never a plan
    started = engine.start(ctx, empty, found.plan_path)
    if started["rollout_id"] != found.id:
        raise ledger_mod.LedgerError(f"rollout {found.id} is not the cluster's unfinished rollout")
    if ctx.ledger.rollout(found.id).status == ledger_mod.RolloutStatus.PAUSED:
        if not args.approve:
            print(f"rollout {found.id} is paused: --approve to continue, or slicewise rollout abort")
            return EXIT_PAUSED
        engine.answer_pause(ctx, found.id, True, "an operator (slicewise rollout resume --approve)")
    if ctx.ledger.rollout(found.id).status == ledger_mod.RolloutStatus.ROLLING_BACK:
        return _settle(ctx, settings, found.id)
    return _drive(ctx, settings, found.id)


def _abort(settings: Any, args: argparse.Namespace) -> int:
    from slicewise.rollout.engine import busy
    from slicewise.rollout.ledger import RolloutStatus

    ctx, found = _acting_as(settings, args.rollout)
    now = ctx.clock.now()
    if not ctx.ledger.acquire_lock(ctx.cluster, ctx.run_id, ctx.lock_ttl_s, now):
        raise busy(ctx, now, "stop that run first")
    if found.status != RolloutStatus.ROLLING_BACK:
        ctx.ledger.set_rollout_status(
            found.id, RolloutStatus.ROLLING_BACK, "aborted by an operator (slicewise rollout abort)", now
        )
    return _settle(ctx, settings, found.id)


def _status(settings: Any, args: argparse.Namespace) -> int:
    from slicewise.rollout.ledger import Ledger, Rollout
    from slicewise.rollout.ledger.db import LedgerError
    from slicewise.rollout.ledger.url import ledger_url
    from slicewise.rollout.wiring import cluster_identity

    cluster = cluster_identity(settings)
    with Ledger.open(ledger_url(settings)) as ledger:
        found: Rollout | None = (
            ledger.rollout(args.rollout)
            if args.rollout is not None
            else ledger.unfinished_rollout(cluster) or next(iter(ledger.recent_rollouts(cluster, 1)), None)
        )
        if found is None:
            raise LedgerError(f"no rollout on {cluster} yet")
        print(f"rollout {found.id} ({found.run_id}): {found.status} - {found.reason}")
        print(ledger.story(found.id))
    return EXIT_DONE


def _marks(settings: Any, args: argparse.Namespace) -> int:
    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.url import ledger_url
    from slicewise.rollout.wiring import cluster_identity

    cluster = cluster_identity(settings)
    with Ledger.open(ledger_url(settings)) as ledger:
        found = ledger.recent_marks(cluster, max(args.limit, 1))
    if not found:
        print(f"no change outside the waves on {cluster} yet")
    for mark in found:
        print(f"{mark.at.isoformat(timespec='seconds')} {mark.run_id} {mark.kind}: {mark.message}")
    return EXIT_DONE
