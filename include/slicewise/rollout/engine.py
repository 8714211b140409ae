"""The rollout of one plan, as steps the DAG's tasks call: start or recover, apply a wave, analyse it, settle a
pause, finish, roll back. State lives in the ledger, never in the task: any step can be re-run after a crash.

Statuses (ledger): RUNNING → (wave by wave) → PROMOTED; an analysis Failed/Error or a failed node → ROLLING_BACK
→ ROLLED_BACK (every changed node back at its snapshot) or FAILED (a restore failed: a person must look);
Inconclusive → PAUSED until a person answers in the Airflow UI (approve → RUNNING, reject or timeout →
ROLLING_BACK).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slicewise.catalog import Catalog
from slicewise.cluster.base import ClusterBackend
from slicewise.planning.node_groups import NodeGroup
from slicewise.planning.types import CHANGE, FleetPlan
from slicewise.rollout import analysis, intents
from slicewise.rollout.checks import Check
from slicewise.rollout.holds import Holds, settle_holds
from slicewise.rollout.ledger import Ledger, MarkKind, NodeStatus, RolloutStatus, WaveStatus
from slicewise.rollout.measure import Measurer, take_baseline, take_measurement
from slicewise.rollout.moves import move_pods
from slicewise.rollout.node_groups import UNCHANGED, rank_node_groups
from slicewise.rollout.procedure import Clock, Procedure, Timing
from slicewise.rollout.scale_down import mark_scale_down_disabled
from slicewise.rollout.standby import mark_standby
from slicewise.rollout.waves import batches, order_changes, plan_waves

log = logging.getLogger(__name__)


class RolloutBusy(RuntimeError):
    """Another run holds the cluster's rollout lock."""


def busy(ctx: Rollouts, now: datetime, advice: str) -> RolloutBusy:
    """The error for a lock another run holds: who, and until when, unless it is released sooner or refreshed
    (its holder refreshes it at every step)."""
    held = ctx.ledger.lock(ctx.cluster, now)
    if held is None:  # released or expired since: say so, the caller may simply try again
        return RolloutBusy(f"cluster {ctx.cluster} was locked by another run a moment ago; try again")
    holder, expires = held
    return RolloutBusy(
        f"cluster {ctx.cluster} is locked by {holder} until {expires.isoformat(timespec='seconds')} "
        f"(rollout_lock_ttl_s after its last step, unless it ends sooner): {advice}"
    )


@dataclass(frozen=True)
class Rollouts:
    """Everything a rollout step needs; built by the DAG task from settings and connections."""

    backend: ClusterBackend
    ledger: Ledger
    catalog: Catalog
    clock: Clock
    timing: Timing
    cluster: str  # identity of the cluster the lock and the ledger rows belong to
    run_id: str
    shares: tuple[float, ...]
    max_in_flight: int
    lock_ttl_s: float
    takeover_prefix: str = ""  # lock holders with this prefix ended (same DAG, one run at a time)
    node_groups: tuple[NodeGroup, ...] = ()  # cluster-autoscaler's GPU node groups to rank (none: not ranked)
    autoscaler_namespace: str = "kube-system"  # where the priority expander's ConfigMap is
    keep_history_s: float = 0.0  # ended rollouts and marks older than this are pruned at each start (0: kept)

    def procedure(self, rollout_id: int) -> Procedure:
        return Procedure(self.backend, self.ledger, rollout_id, self.catalog, self.timing, self.clock)

    def event(self, rollout_id: int, message: str, wave: int | None = None) -> None:
        log.info("%s", message)
        self.ledger.add_event(rollout_id, message, self.clock.now(), wave=wave)


def start(ctx: Rollouts, plan: FleetPlan, plan_path: str) -> dict[str, Any]:
    """Take the cluster's lock, then resume this run's rollout, recover an abandoned one, or start the plan's.

    An unfinished rollout of another run is rolled back, never resumed: its plan is stale, and the nodes it
    touched must first return to a known state. This run then changes nothing else (the next run plans anew).
    """
    now = ctx.clock.now()
    if not ctx.ledger.acquire_lock(ctx.cluster, ctx.run_id, ctx.lock_ttl_s, now):
        holder = ctx.ledger.lock_holder(ctx.cluster, now) or ""
        if not (ctx.takeover_prefix and holder.startswith(ctx.takeover_prefix)):
            raise busy(ctx, now, "one rollout at a time")
        # A run of this same DAG, which runs one at a time: the holder has ended without releasing it.
        ctx.ledger.release_lock(ctx.cluster, holder)
        if not ctx.ledger.acquire_lock(ctx.cluster, ctx.run_id, ctx.lock_ttl_s, now):
            raise RolloutBusy(f"cluster {ctx.cluster}: could not take over the lock of {holder}")
    for mark in ctx.ledger.settle_abandoned_steps(ctx.cluster, ctx.run_id, now):
        log.warning("run %s, %s: %s", mark.run_id, mark.kind, mark.message)
    if ctx.keep_history_s > 0:
        pruned = ctx.ledger.prune(ctx.cluster, now - timedelta(seconds=ctx.keep_history_s))
        log.info(
            "ledger: %d ended rollouts and %d marks older than %g days pruned",
            pruned.rollouts,
            pruned.marks,
            ctx.keep_history_s / 86400,
        )
    unfinished = ctx.ledger.unfinished_rollout(ctx.cluster)
    if unfinished is not None and unfinished.run_id == ctx.run_id:
        ctx.event(
            unfinished.id, f"run {ctx.run_id} resumes its rollout {unfinished.id} ({unfinished.status})"
        )
        return {"rollout_id": unfinished.id, "action": "resumed", "waves": _wave_nodes(ctx, unfinished.id)}
    if unfinished is not None:
        if unfinished.status != RolloutStatus.ROLLING_BACK:
            ctx.ledger.set_rollout_status(
                unfinished.id,
                RolloutStatus.ROLLING_BACK,
                f"left unfinished by run {unfinished.run_id}; found by run {ctx.run_id}: rolling back",
                now,
            )
        return {"rollout_id": unfinished.id, "action": "recovering", "waves": _wave_nodes(ctx, unfinished.id)}
    marks, told = _outside_the_waves(ctx, plan, now)
    changes = order_changes([p for p in plan.nodes if p.action == CHANGE])
    if not changes:
        ctx.ledger.release_lock(ctx.cluster, ctx.run_id)
        return {"rollout_id": None, "action": "nothing to change", "waves": [], **marks}
    waves = plan_waves([p.node for p in changes], ctx.shares)
    desired = {
        p.node: {
            # A node whose GPUs have no MIG carries no mig.config label: none is written.
            "nvidia.com/mig.config": p.desired.mig_config or None,
            "nvidia.com/device-plugin.config": p.desired.device_plugin_config,
        }
        for p in changes
    }
    rollout = ctx.ledger.start_rollout(ctx.cluster, ctx.run_id, plan_path, waves, desired, now)
    ctx.event(rollout.id, f"rollout {rollout.id} started: {len(changes)} nodes in waves {waves}")
    for _, message in told:
        ctx.event(rollout.id, message)
    return {"rollout_id": rollout.id, "action": "started", "waves": waves, **marks}


def _outside_the_waves(
    ctx: Rollouts, plan: FleetPlan, now: datetime
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The plan's changes that need no wave, under the lock and before any wave, and the lines the ledger's
    marks keep of them. Each step is begun in the ledger with what it is to do and closed with what it did
    (:func:`_step`), so a process killed inside a step leaves a line the next run turns into a mark."""
    told: list[tuple[str, str]] = []
    ranking = None
    # The ranking, the taints and the annotation move no pod, and the waves' nodes are on no list. The ranking
    # goes first: a ConfigMap that is missing fails before any node write.
    if ctx.node_groups:
        intent = intents.node_groups(ctx.node_groups, ctx.autoscaler_namespace)
        with _step(ctx, MarkKind.NODE_GROUPS, intent, told) as lines:
            ranking = rank_node_groups(ctx.backend, plan, ctx.node_groups, ctx.autoscaler_namespace)
            if ranking.outcome != UNCHANGED:  # written, or left to the person who edited it
                lines.append(ranking.describe())
    with _step(ctx, MarkKind.STANDBY, intents.standby(plan), told) as lines:
        marked = mark_standby(ctx.backend, plan)
        lines.extend(m.describe() for m in marked if m.added or m.removed)
    with _step(ctx, MarkKind.SCALE_DOWN, intents.scale_down(plan), told) as lines:
        kept = mark_scale_down_disabled(ctx.backend, plan)
        if kept.added or kept.removed:
            lines.append(kept.describe())
    # Evictions of single pods onto MPS nodes no wave changes: no node is relabelled.
    with _step(ctx, MarkKind.MOVES, intents.moves(plan), told) as lines:
        moved = move_pods(ctx.backend, plan)
        if plan.moves:  # evicted, or skipped with the reason
            lines.append(moved.describe())
    # Cordons that wait for pods to finish, and their release: no pod is evicted, no node relabelled.
    with _step(ctx, MarkKind.HOLDS, intents.holds(plan), told) as lines:
        holds = settle_holds(ctx.backend, plan, ctx.catalog, now)
        if holds != Holds():  # held, released, cleared, or refused with the reason
            lines.append(holds.describe())
    marks = {
        "holds": holds.to_dict(),
        "standby": {m.taint.key: {"added": list(m.added), "removed": list(m.removed)} for m in marked},
        "scale_down_disabled": {"added": list(kept.added), "removed": list(kept.removed)},
        "moves": {"evicted": list(moved.evicted), "skipped": list(moved.skipped)},
        "node_groups": ranking.to_dict() if ranking else None,
    }
    return marks, told


@contextmanager
def _step(ctx: Rollouts, kind: MarkKind, intent: str, told: list[tuple[str, str]]) -> Iterator[list[str]]:
    """One step outside the waves, write-ahead: begun in the ledger with its ``intent`` before its first write,
    closed with the lines the body appends (also added to ``told``). A step that raises is closed with a line
    saying so, since what it changed before failing is not known here; a killed process closes nothing, and the
    next run's :func:`start` settles the step it left open."""
    step = ctx.ledger.begin_step(ctx.cluster, ctx.run_id, kind, intent, ctx.clock.now())
    lines: list[str] = []
    try:
        yield lines
    except Exception as exc:
        lines.append(
            f"failed inside this step ({type(exc).__name__}: {exc}); it was to {intent}. "
            "What it changed before failing is not told; the next plan reads the cluster as it is"
        )
        # The ledger down too: the step stays open for the next run, and the step's own error is raised.
        try:
            ctx.ledger.end_step(step, lines, ctx.clock.now())
        except Exception:
            log.exception("could not close the %s step in the ledger", kind)
        raise
    ctx.ledger.end_step(step, lines, ctx.clock.now())
    told.extend((kind, line) for line in lines)


def _wave_nodes(ctx: Rollouts, rollout_id: int) -> list[list[str]]:
    return [list(w.nodes) for w in ctx.ledger.waves(rollout_id)]


def _running(ctx: Rollouts, rollout_id: int | None, index: int) -> list[str] | None:
    """The wave's nodes if the rollout is running and has that wave; None means: nothing to do."""
    if rollout_id is None:
        return None
    rollout = ctx.ledger.rollout(rollout_id)
    waves = ctx.ledger.waves(rollout_id)
    if rollout.status != RolloutStatus.RUNNING or index >= len(waves):
        return None
    return list(waves[index].nodes)


def apply_wave(ctx: Rollouts, rollout_id: int | None, index: int) -> dict[str, Any]:
    """Change the wave's nodes batch by batch (at most ``max_in_flight`` at once). A failed node sends the
    whole rollout to ROLLING_BACK; an aborted node (drain deadline, labels changed) is left as it was."""
    nodes = _running(ctx, rollout_id, index)
    if nodes is None or rollout_id is None:
        return {"wave": index, "skipped": True}
    ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.APPLYING, ctx.clock.now())
    procedure = ctx.procedure(rollout_id)
    outcome: dict[str, str] = {}
    for batch in batches(nodes, ctx.max_in_flight):
        outcome.update(procedure.apply(batch))
        if NodeStatus.FAILED in outcome.values():
            break  # no further batch once one node failed: the rollout is going back
    failed = sorted(n for n, status in outcome.items() if status == NodeStatus.FAILED)
    if failed:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.FAILED, ctx.clock.now())
        ctx.ledger.set_rollout_status(
            rollout_id,
            RolloutStatus.ROLLING_BACK,
            f"wave {index}: change failed on {', '.join(failed)}",
            ctx.clock.now(),
        )
    else:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.ANALYSING, ctx.clock.now())
    for node in nodes:
        record = ctx.ledger.node(rollout_id, node)
        before = (record.snapshot or {}).get("labels")
        log.info(
            "wave %d %s: %s -> %s: %s (%s)", index, node, before, record.desired, record.status, record.detail
        )
    return {"wave": index, "skipped": False, "nodes": outcome}


def analyse_wave(
    ctx: Rollouts,
    rollout_id: int | None,
    index: int,
    measurer: Measurer,
    checks: Sequence[Check],
    *,
    bake_s: float,
    min_window_s: float = 30.0,
) -> dict[str, Any]:
    """Bake, then measure every check on every changed node of the wave until each metric is decided
    (Argo semantics); Successful → RUNNING, Failed/Error → ROLLING_BACK, Inconclusive → PAUSED."""
    nodes = _running(ctx, rollout_id, index)
    if nodes is None or rollout_id is None:
        return {"wave": index, "skipped": True}
    changed = [n for n in nodes if ctx.ledger.node(rollout_id, n).status == NodeStatus.DONE]
    if not changed:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.PASSED, ctx.clock.now())
        ctx.event(rollout_id, f"wave {index}: no node changed (all aborted): nothing to analyse", index)
        return {"wave": index, "skipped": False, "outcome": analysis.Outcome.SUCCESSFUL.value, "reasons": []}
    ctx.event(rollout_id, f"wave {index}: baking {bake_s:g} s before analysis", index)
    ctx.clock.sleep(bake_s)
    targets = _targets(ctx, rollout_id, changed, checks)
    changed_at = min(at for _, _, at in targets) if targets else ctx.clock.now()

    def window() -> float:
        # The window is the time since the change: a check sees only the node's new configuration, and its
        # baseline the same length of time just before the change.
        return max(min_window_s, (ctx.clock.now() - changed_at).total_seconds())

    first_window = window()
    baselines = {
        (check.name, node): take_baseline(measurer, check, node, first_window, at)
        for check, node, at in targets
        if check.baseline_query
    }
    measurements: list[analysis.Measurement] = []
    decided: dict[tuple[str, str], analysis.Outcome] = {}
    # Errors do not count towards a check's count (Argo): allow the extra rounds an error streak may take.
    rounds = max((c.count + c.consecutive_error_limit + 1 for c in checks), default=0)
    for round_index in range(rounds):
        pending = [(c, n) for c, n, _ in targets if (c.name, n) not in decided]
        if not pending:
            break
        if round_index:
            ctx.clock.sleep(min(check.interval_s for check, _ in pending))
        span = window()
        for check, node in pending:
            key = (check.name, node)
            taken = take_measurement(measurer, check, node, span, baselines.get(key), ctx.clock.now())
            measurements.append(taken)
            log.info(
                "wave %d %s on %s: %s (value %s) %s",
                index,
                check.name,
                node,
                taken.outcome.value,
                taken.value,
                taken.detail,
            )
            ctx.ledger.add_measurement(
                rollout_id,
                index,
                check.name,
                node,
                taken.outcome.value,
                taken.value,
                taken.detail,
                ctx.clock.now(),
            )
            done = analysis.metric_outcome(
                check, [m.outcome for m in measurements if (m.check, m.node) == key]
            )
            if done is not None:
                decided[key] = done
        if any(o != analysis.Outcome.SUCCESSFUL and not _dry(checks, k[0]) for k, o in decided.items()):
            break  # Argo terminates the run once a metric is Failed, Error or Inconclusive
    result = analysis.verdict(checks, measurements, nodes=changed)
    _settle(ctx, rollout_id, index, result)
    return {
        "wave": index,
        "skipped": False,
        "outcome": result.outcome.value,
        "reasons": list(result.reasons),
        "measurements": len(measurements),
    }


def _dry(checks: Sequence[Check], name: str) -> bool:
    return any(c.name == name and c.dry_run for c in checks)


def _targets(
    ctx: Rollouts, rollout_id: int, nodes: Sequence[str], checks: Sequence[Check]
) -> list[tuple[Check, str, datetime]]:
    """(check, node, baseline time) to measure: per changed node, or once for the pool (node "*")."""
    taken = {n: _snapshot_time(ctx, rollout_id, n) for n in nodes}
    out = []
    for check in checks:
        if check.scope == "pool":
            out.append((check, "*", min(taken.values())))
        else:
            out.extend((check, n, taken[n]) for n in nodes)
    return out


def _snapshot_time(ctx: Rollouts, rollout_id: int, node: str) -> datetime:
    snapshot = ctx.ledger.node(rollout_id, node).snapshot or {}
    raw = snapshot.get("taken_at")
    return datetime.fromisoformat(str(raw)) if raw else ctx.clock.now()


def _settle(ctx: Rollouts, rollout_id: int, index: int, result: analysis.Verdict) -> None:
    now = ctx.clock.now()
    why = "; ".join(result.reasons) or "every check successful"
    log.info("wave %d decision: %s (%s)", index, result.outcome.value, why)
    if result.outcome == analysis.Outcome.SUCCESSFUL:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.PASSED, now)
        ctx.event(rollout_id, f"wave {index}: analysis Successful", index)
    elif result.outcome == analysis.Outcome.INCONCLUSIVE:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.INCONCLUSIVE, now)
        ctx.ledger.set_rollout_status(
            rollout_id, RolloutStatus.PAUSED, f"wave {index} inconclusive: {why}", now
        )
    else:
        ctx.ledger.set_wave_status(rollout_id, index, WaveStatus.FAILED, now)
        ctx.ledger.set_rollout_status(
            rollout_id,
            RolloutStatus.ROLLING_BACK,
            f"wave {index} analysis {result.outcome.value}: {why}",
            now,
        )


def is_paused(ctx: Rollouts, rollout_id: int | None) -> bool:
    return rollout_id is not None and ctx.ledger.rollout(rollout_id).status == RolloutStatus.PAUSED


def answer_pause(ctx: Rollouts, rollout_id: int, approved: bool, who: str) -> str:
    """A person's answer to an Inconclusive wave: continue, or roll back (also the answer on timeout)."""
    status = RolloutStatus.RUNNING if approved else RolloutStatus.ROLLING_BACK
    verb = "approved: continuing" if approved else "rejected (or timed out): rolling back"
    if ctx.ledger.rollout(rollout_id).status == RolloutStatus.PAUSED:
        now = ctx.clock.now()
        if approved:  # the person's approval is the wave's verdict
            for wave in ctx.ledger.waves(rollout_id):
                if wave.status == WaveStatus.INCONCLUSIVE:
                    ctx.ledger.set_wave_status(rollout_id, wave.index, WaveStatus.PASSED, now)
        ctx.ledger.set_rollout_status(rollout_id, status, f"{who} {verb}", now)
    return status


def finish(ctx: Rollouts, rollout_id: int | None) -> str | None:
    """After the last wave: a RUNNING rollout whose every wave passed is PROMOTED and the lock released.
    Anything else is left for ``rollback`` (a wave that never finished means a task failed)."""
    if rollout_id is None:
        return None
    rollout = ctx.ledger.rollout(rollout_id)
    passed = all(w.status == WaveStatus.PASSED for w in ctx.ledger.waves(rollout_id))
    if rollout.status == RolloutStatus.RUNNING and passed:
        ctx.ledger.set_rollout_status(
            rollout_id, RolloutStatus.PROMOTED, "every wave analysed Successful", ctx.clock.now()
        )
        ctx.ledger.release_lock(ctx.cluster, ctx.run_id)
    return ctx.ledger.rollout(rollout_id).status


def rollback(ctx: Rollouts, rollout_id: int | None) -> dict[str, Any]:
    """Restore every node this rollout touched, newest first, when the rollout is ROLLING_BACK — or still
    RUNNING/PAUSED: this runs after ``finish``, so a rollout that is not promoted by now was cut short by a
    failed or killed task, and must not leave nodes half changed."""
    if rollout_id is None:
        return {"rolled_back": False}
    rollout = ctx.ledger.rollout(rollout_id)
    if rollout.status in (RolloutStatus.RUNNING, RolloutStatus.PAUSED):
        ctx.ledger.set_rollout_status(
            rollout_id,
            RolloutStatus.ROLLING_BACK,
            "the run ended before the rollout finished",
            ctx.clock.now(),
        )
        rollout = ctx.ledger.rollout(rollout_id)
    if rollout.status != RolloutStatus.ROLLING_BACK:
        return {"rolled_back": False, "status": rollout.status}
    order = [node for wave in reversed(ctx.ledger.waves(rollout_id)) for node in reversed(list(wave.nodes))]
    outcome = ctx.procedure(rollout_id).restore(order)
    failed = sorted(n for n, status in outcome.items() if status == NodeStatus.RESTORE_FAILED)
    final = RolloutStatus.FAILED if failed else RolloutStatus.ROLLED_BACK
    ending = (
        f"restore failed on {', '.join(failed)}: a person must look"
        if failed
        else "every node at its snapshot"
    )
    # Keep why it rolled back next to how it ended.
    ctx.ledger.set_rollout_status(rollout_id, final, f"{rollout.reason}; {ending}", ctx.clock.now())
    ctx.ledger.release_lock(ctx.cluster, ctx.run_id)
    log.info("%s", ctx.ledger.story(rollout_id))
    return {"rolled_back": True, "status": final, "nodes": outcome}


def is_skipped_wave(ctx: Rollouts, rollout_id: int | None, index: int) -> bool:
    """True when the wave has nothing to analyse (no rollout, not running, or no such wave)."""
    return _running(ctx, rollout_id, index) is None


def report(ctx: Rollouts, rollout_id: int | None) -> dict[str, Any]:
    """The outcome for the ``slicewise_rollout`` Asset event and the run's last log lines."""
    if rollout_id is None:
        return {"outcome": "nothing to change", "reason": "the plan changes no node", "rollout_id": None}
    rollout = ctx.ledger.rollout(rollout_id)
    nodes = ctx.ledger.nodes(rollout_id)
    counts: dict[str, int] = {}
    for record in nodes:
        counts[record.status] = counts.get(record.status, 0) + 1
    outcomes: dict[str, str] = {
        RolloutStatus.PROMOTED: "promoted",
        RolloutStatus.ROLLED_BACK: "rolled_back",
        RolloutStatus.FAILED: "failed",
        RolloutStatus.PAUSED: "paused",
    }
    outcome = outcomes.get(rollout.status, rollout.status.lower())
    log.info("%s", ctx.ledger.story(rollout_id))
    return {
        "outcome": outcome,
        "reason": rollout.reason,
        "rollout_id": rollout_id,
        "waves": len(ctx.ledger.waves(rollout_id)),
        "nodes": counts,
        "changed": sorted(r.node for r in nodes if r.status == NodeStatus.DONE),
    }
