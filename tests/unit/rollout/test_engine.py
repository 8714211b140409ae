"""Rollouts end to end on the simulated cluster: waves, verification, analysis, rollback, crash and resume."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slicewise.planning.types import BLOCKED
from slicewise.rollout import engine
from slicewise.rollout import ledger as ledger_mod
from slicewise.rollout.engine import RolloutBusy, Rollouts

from .conftest import CHANGES, ENGINE, Harness, fleet_plan


def run_all(ctx: Rollouts, h: Harness, plan_nodes: list[str] | None = None) -> tuple[int | None, str | None]:
    """What the DAG does: start, every wave (apply, analyse), finish, rollback; returns (rollout, status)."""
    started = engine.start(ctx, fleet_plan(plan_nodes), "plan.json")
    rollout_id = started["rollout_id"]
    for index in range(6):
        engine.apply_wave(ctx, rollout_id, index)
        engine.analyse_wave(ctx, rollout_id, index, h.prometheus, h.checks, bake_s=60)
    engine.finish(ctx, rollout_id)
    engine.rollback(ctx, rollout_id)
    return rollout_id, ctx.ledger.rollout(rollout_id).status if rollout_id else None


def assert_at_snapshot_or_plan(h: Harness, rollout_id: int) -> None:
    """Every node ends at its planned state or its snapshot, uncordoned, and the ledger says which."""
    for record in h.ledger.nodes(rollout_id):
        node = h.cluster.get_node(record.node)
        assert not node.unschedulable, record
        before = (record.snapshot or {}).get("labels") or {
            "nvidia.com/mig.config": CHANGES[record.node][0],
            "nvidia.com/device-plugin.config": CHANGES[record.node][1],
        }
        expected = dict(record.desired) if record.status == ledger_mod.NodeStatus.DONE else dict(before)
        got = {k: node.labels.get(k) for k in expected}
        assert got == expected, (record.status, record.detail)
        assert node.mig_config_state == "success"


def test_every_wave_promotes_and_the_nodes_end_as_planned(harness: Harness) -> None:
    ctx = harness.rollouts()
    rollout_id, status = run_all(ctx, harness)
    assert status == ledger_mod.RolloutStatus.PROMOTED
    assert rollout_id is not None
    waves = harness.ledger.waves(rollout_id)
    assert [len(w.nodes) for w in waves] == [1, 1, 2]  # canary, then 50 %, then 100 % of 4 nodes
    for name, (_, _, mig, plugin) in CHANGES.items():
        assert harness.labels(name) == (mig, plugin)
        node = harness.cluster.get_node(name)
        assert not node.unschedulable
        assert "slicewise.io/last-change" in node.annotations
    assert {r.status for r in harness.ledger.nodes(rollout_id)} == {ledger_mod.NodeStatus.DONE}
    story = harness.ledger.story(rollout_id)
    assert "sim-a100-80-0" in story and "all-3g.40gb" in story
    # Every check measured every changed node (or the pool), and the baselines were read before the change.
    assert any(before for query, before in harness.prometheus.queries if ENGINE in query)
    assert harness.ledger.lock_holder("simulated:test", ctx.clock.now()) is None


def test_a_failed_mig_reconfiguration_rolls_every_changed_node_back(harness: Harness) -> None:
    harness.cluster.inject_fault("sim-a100-80-0", "fail")
    ctx = harness.rollouts(shares=(1.0,))
    rollout_id, status = run_all(ctx, harness, ["sim-a100-40-0", "sim-a100-80-0", "sim-h200-0"])
    assert status == ledger_mod.RolloutStatus.ROLLED_BACK
    assert rollout_id is not None
    assert_at_snapshot_or_plan(harness, rollout_id)
    statuses = {r.node: r.status for r in harness.ledger.nodes(rollout_id)}
    assert statuses["sim-a100-80-0"] == ledger_mod.NodeStatus.RESTORED
    assert (
        statuses["sim-a100-40-0"] == ledger_mod.NodeStatus.RESTORED
    )  # the canary was changed, then put back
    assert harness.labels("sim-a100-40-0") == ("all-1g.5gb", "default")
    assert "failed" in harness.ledger.rollout(rollout_id).reason


def test_a_mig_manager_stuck_in_pending_times_out_and_is_rolled_back(harness: Harness) -> None:
    harness.cluster.inject_fault("sim-a100-80-0", "stuck")
    ctx = harness.rollouts()
    rollout_id, status = run_all(ctx, harness, ["sim-a100-80-0"])
    assert rollout_id is not None
    record = harness.ledger.node(rollout_id, "sim-a100-80-0")
    assert "pending" in " ".join(e.message for e in harness.ledger.events(rollout_id))
    assert status == ledger_mod.RolloutStatus.ROLLED_BACK, harness.ledger.story(rollout_id)
    assert record.status == ledger_mod.NodeStatus.RESTORED
    assert_at_snapshot_or_plan(harness, rollout_id)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        # utilisation drops from 50 % to 40 %: more than the 10 % rule allows -> Failed -> roll back
        (
            lambda q, before: (0.5 if before else 0.4) if ENGINE in q else None,
            ledger_mod.RolloutStatus.ROLLING_BACK,
        ),
        # Prometheus errors on every query: consecutive errors -> Error -> roll back
        (lambda q, before: RuntimeError("connection refused"), ledger_mod.RolloutStatus.ROLLING_BACK),
        # NaN engine activity: the utilisation check says Inconclusive -> pause for a person
        (
            lambda q, before: float("nan") if ENGINE in q and not before else 0.5 if ENGINE in q else None,
            ledger_mod.RolloutStatus.PAUSED,
        ),
        # Empty engine activity after the change: Inconclusive as well (and the liveness check fails)
        (lambda q, before: 0.5 if ENGINE in q and before else None, ledger_mod.RolloutStatus.ROLLING_BACK),
    ],
)
def test_analysis_outcomes_decide_the_rollout(harness: Harness, answer: Any, expected: str) -> None:
    harness.prometheus.answer = answer
    ctx = harness.rollouts()
    started = engine.start(ctx, fleet_plan(["sim-a100-80-0", "sim-h200-0"]), "plan.json")
    rollout_id = started["rollout_id"]
    engine.apply_wave(ctx, rollout_id, 0)
    result = engine.analyse_wave(ctx, rollout_id, 0, harness.prometheus, harness.checks, bake_s=60)
    assert harness.ledger.rollout(rollout_id).status == expected, result
    assert harness.ledger.measurements(rollout_id, 0), "every measurement is in the ledger"
    if expected != ledger_mod.RolloutStatus.PAUSED:
        engine.rollback(ctx, rollout_id)
        assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.ROLLED_BACK
        assert_at_snapshot_or_plan(harness, rollout_id)


def test_a_person_approves_or_rejects_an_inconclusive_wave(harness: Harness) -> None:
    harness.prometheus.answer = lambda q, before: (
        float("nan") if ENGINE in q and not before else 0.5 if ENGINE in q else None
    )
    ctx = harness.rollouts()
    rollout_id = engine.start(ctx, fleet_plan(["sim-a100-80-0", "sim-h200-0"]), "plan.json")["rollout_id"]
    engine.apply_wave(ctx, rollout_id, 0)
    engine.analyse_wave(ctx, rollout_id, 0, harness.prometheus, harness.checks, bake_s=60)
    assert engine.is_paused(ctx, rollout_id)
    assert engine.answer_pause(ctx, rollout_id, True, "alice") == ledger_mod.RolloutStatus.RUNNING
    harness.prometheus.answer = lambda q, before: (
        float("nan") if ENGINE in q and not before else 0.5 if ENGINE in q else None
    )
    engine.apply_wave(ctx, rollout_id, 1)
    engine.analyse_wave(ctx, rollout_id, 1, harness.prometheus, harness.checks, bake_s=60)
    assert engine.answer_pause(ctx, rollout_id, False, "bob") == ledger_mod.RolloutStatus.ROLLING_BACK
    engine.rollback(ctx, rollout_id)
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.ROLLED_BACK
    assert_at_snapshot_or_plan(harness, rollout_id)


def test_one_rollout_at_a_time_and_an_abandoned_one_is_rolled_back_by_the_next_run(harness: Harness) -> None:
    first = harness.rollouts(run_id="gpu_partition_rollout/run-1")
    rollout_id = engine.start(first, fleet_plan(), "plan.json")["rollout_id"]
    engine.apply_wave(first, rollout_id, 0)  # then the run dies: no analysis, no finish, no rollback

    other_dag = harness.rollouts(run_id="someone-else/run-9", takeover_prefix="someone-else/")
    with pytest.raises(RolloutBusy):
        engine.start(other_dag, fleet_plan(), "plan.json")

    second = harness.rollouts(run_id="gpu_partition_rollout/run-2")
    started = engine.start(second, fleet_plan(), "plan.json")
    assert started == {"rollout_id": rollout_id, "action": "recovering", "waves": started["waves"]}
    assert engine.apply_wave(second, rollout_id, 1)["skipped"]  # nothing new is applied on top
    engine.rollback(second, rollout_id)
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.ROLLED_BACK
    assert_at_snapshot_or_plan(harness, rollout_id)


def test_nothing_to_change_starts_nothing(harness: Harness) -> None:
    ctx = harness.rollouts()
    empty = fleet_plan([])
    started = engine.start(ctx, empty.__class__(empty.policy, empty.predictor, True, 60, ()), "plan.json")
    assert started["rollout_id"] is None
    assert engine.report(ctx, None)["outcome"] == "nothing to change"


def test_a_blocked_verdict_is_a_recommendation_the_rollout_leaves_alone(harness: Harness) -> None:
    """Without ``planner_cordon_to_drain`` a blocked node is advice: nothing cordons the node or changes it (with
    it, the verdict is cordon-to-drain and the node is held: test_holds)."""
    ctx = harness.rollouts()
    plan = fleet_plan(["sim-a100-80-0"])
    recommended = dataclasses.replace(plan, nodes=(dataclasses.replace(plan.nodes[0], action=BLOCKED),))
    before = harness.labels("sim-a100-80-0")
    started = engine.start(ctx, recommended, "plan.json")
    assert (started["rollout_id"], started["action"]) == (None, "nothing to change")
    assert harness.labels("sim-a100-80-0") == before
    assert not harness.cluster.get_node("sim-a100-80-0").unschedulable


def test_an_approved_wave_counts_as_passed_and_the_rollout_is_promoted(harness: Harness) -> None:
    harness.prometheus.answer = lambda q, before: (
        float("nan") if ENGINE in q and not before else 0.5 if ENGINE in q else None
    )
    ctx = harness.rollouts(shares=(1.0,))
    rollout_id = engine.start(ctx, fleet_plan(["sim-a100-80-0"]), "plan.json")["rollout_id"]
    engine.apply_wave(ctx, rollout_id, 0)
    engine.analyse_wave(ctx, rollout_id, 0, harness.prometheus, harness.checks, bake_s=60)
    engine.answer_pause(ctx, rollout_id, True, "alice")
    assert engine.finish(ctx, rollout_id) == ledger_mod.RolloutStatus.PROMOTED
    assert harness.ledger.waves(rollout_id)[0].status == ledger_mod.WaveStatus.PASSED


def test_a_consolidation_drains_the_node_and_leaves_its_configuration_as_it_was(harness: Harness) -> None:
    # The planner's consolidation is a change to the configuration the node already has: cordon, evict its GPU
    # pods through the Eviction API, verify, bake, uncordon. Nothing is relabelled.
    import dataclasses

    from slicewise.planning.types import DesiredState

    ctx = harness.rollouts(shares=(1.0,))
    before = harness.labels("sim-h100-1")
    (plan,) = fleet_plan(["sim-h100-1"]).nodes
    same = dataclasses.replace(plan, desired=DesiredState(*before), rule="packing: consolidate")
    started = engine.start(ctx, dataclasses.replace(fleet_plan([]), nodes=(same,)), "plan.json")
    rollout_id = started["rollout_id"]
    assert rollout_id is not None and started["waves"] == [["sim-h100-1"]]
    engine.apply_wave(ctx, rollout_id, 0)
    engine.analyse_wave(ctx, rollout_id, 0, harness.prometheus, harness.checks, bake_s=60)
    engine.finish(ctx, rollout_id)
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.PROMOTED
    assert harness.labels("sim-h100-1") == before
    assert not harness.cluster.get_node("sim-h100-1").unschedulable
    assert "evicted" in harness.ledger.story(rollout_id)
