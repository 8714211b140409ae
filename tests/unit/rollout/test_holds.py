"""Holds in apply mode (``planner_cordon_to_drain``): the rollout cordons a cordon-to-drain node with
slicewise.io/held-for in one write, keeps the hold across runs, lifts it when the plan says uncordon, never holds
a node someone else cordoned, and a later change takes the hold over and ends with the node uncordoned."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from slicewise.cluster.base import HOLD_ANNOTATION, ClusterError, Hold
from slicewise.planning.types import CHANGE, DRAIN, UNCORDON, DesiredState, FleetPlan
from slicewise.rollout import engine
from slicewise.rollout import ledger as ledger_mod
from slicewise.rollout.holds import Holds

from .conftest import CHANGES, Harness, fleet_plan, healthy

NODE = "sim-a100-80-0"
_, _, WANTED_MIG, WANTED_PLUGIN = CHANGES[NODE]


def _plan(action: str, desired: DesiredState | None = None) -> FleetPlan:
    plan = fleet_plan([NODE])
    (node,) = plan.nodes
    return dataclasses.replace(
        plan, nodes=(dataclasses.replace(node, action=action, desired=desired or node.desired),)
    )


def _now(harness: Harness) -> datetime:
    return datetime.fromtimestamp(harness.clock.now, UTC)


def test_a_cordon_to_drain_node_is_held_with_the_change_it_waits_for_and_nothing_else_happens(
    harness: Harness,
) -> None:
    before = harness.labels(NODE)
    pods = harness.cluster.list_gpu_pods(NODE)
    assert pods  # the hold is for a node that still runs pods

    started = engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")

    assert (started["rollout_id"], started["action"]) == (None, "nothing to change")
    assert started["holds"]["held"] == [NODE]
    node = harness.cluster.get_node(NODE)
    assert node.unschedulable and node.held
    assert node.hold() == Hold(WANTED_MIG, WANTED_PLUGIN, _now(harness))
    assert harness.labels(NODE) == before  # no label written
    assert harness.cluster.list_gpu_pods(NODE) == pods  # no pod evicted
    # No rollout, yet the ledger tells it: the hold is a change of the cluster.
    ((kind, run, message),) = [(m.kind, m.run_id, m.message) for m in harness.ledger.recent_marks()]
    assert (kind, run) == (ledger_mod.MarkKind.HOLDS, harness.rollouts().run_id) and NODE in message


def test_a_hold_is_written_once_and_keeps_its_start_when_the_wanted_state_moves(harness: Harness) -> None:
    engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")
    first = harness.cluster.get_node(NODE)
    held_at = first.hold()
    assert held_at is not None

    harness.clock.now += 3600
    again = engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-2"), _plan(DRAIN), "plan.json")
    assert again["holds"]["held"] == []
    assert harness.cluster.get_node(NODE).resource_version == first.resource_version  # nothing written
    assert len(harness.ledger.recent_marks()) == 1  # and nothing told

    harness.clock.now += 3600
    other = DesiredState("all-1g.10gb", "default")
    moved = engine.start(
        harness.rollouts(run_id="gpu_partition_rollout/run-3"), _plan(DRAIN, other), "plan.json"
    )
    assert moved["holds"]["held"] == [NODE]
    assert harness.cluster.get_node(NODE).hold() == Hold("all-1g.10gb", "default", held_at.since)


def test_a_node_someone_else_cordoned_is_never_held(harness: Harness) -> None:
    harness.cluster.cordon(NODE)

    started = engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")

    assert started["holds"]["held"] == []
    (refused,) = started["holds"]["refused"]
    assert refused.startswith(NODE) and "cordoned by someone else" in refused
    node = harness.cluster.get_node(NODE)
    assert node.unschedulable and HOLD_ANNOTATION not in node.annotations


def test_an_uncordon_verdict_lifts_the_hold_in_one_write(harness: Harness) -> None:
    engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")

    started = engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-2"), _plan(UNCORDON), "p")

    assert started["holds"]["released"] == [NODE]
    node = harness.cluster.get_node(NODE)
    assert not node.unschedulable and HOLD_ANNOTATION not in node.annotations


def test_a_held_node_that_does_not_advertise_its_labels_stays_held(harness: Harness) -> None:
    engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")
    # Someone relabels the held node: its GPUs are being reconfigured, not yet what the labels promise.
    harness.cluster.set_labels(NODE, {"nvidia.com/mig.config": "all-1g.10gb"}, expected={})

    started = engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-2"), _plan(UNCORDON), "p")

    assert started["holds"]["released"] == []
    (refused,) = started["holds"]["refused"]
    assert "left held" in refused and "its labels promise" in refused
    assert harness.cluster.get_node(NODE).held


def test_an_annotation_left_on_a_node_someone_uncordoned_is_removed_and_nothing_else(
    harness: Harness,
) -> None:
    engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")
    harness.cluster.uncordon(NODE)  # the simulated API drops the annotation with it, as Slicewise would
    harness.cluster.set_annotations(NODE, {HOLD_ANNOTATION: "left by hand"})

    started = engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-2"), _plan("keep"), "p")

    assert started["holds"]["cleared"] == [NODE]
    node = harness.cluster.get_node(NODE)
    assert not node.unschedulable and HOLD_ANNOTATION not in node.annotations


def test_a_change_takes_the_hold_over_and_ends_with_the_node_uncordoned(harness: Harness) -> None:
    engine.start(harness.rollouts(), _plan(DRAIN), "plan.json")
    harness.prometheus.answer = healthy
    ctx = harness.rollouts(run_id="gpu_partition_rollout/run-2", shares=(1.0,))

    started = engine.start(ctx, _plan(CHANGE), "plan.json")
    rollout_id = started["rollout_id"]
    assert engine.apply_wave(ctx, rollout_id, 0)["nodes"] == {NODE: ledger_mod.NodeStatus.DONE}

    node = harness.cluster.get_node(NODE)
    assert (node.mig_config, node.device_plugin_config) == (WANTED_MIG, WANTED_PLUGIN)
    assert not node.unschedulable and HOLD_ANNOTATION not in node.annotations
    events = [e.message for e in harness.ledger.events(rollout_id)]
    assert any("takes over Slicewise's hold" in message for message in events)


def test_a_later_step_that_fails_leaves_the_earlier_steps_marks(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def outage(*_: object) -> Holds:
        raise ClusterError("the API server went away")

    monkeypatch.setattr(engine, "settle_holds", outage)
    plan = dataclasses.replace(_plan(DRAIN), standby_grades=(("sim-h100-0",),))

    with pytest.raises(ClusterError, match="went away"):
        engine.start(harness.rollouts(), plan, "plan.json")

    # The taint was written before the outage, and the ledger tells it; the failed step says what it was to do.
    assert any(t.key == "slicewise.io/standby" for t in harness.cluster.get_node("sim-h100-0").taints)
    failed, tainted = [(m.kind, m.message) for m in harness.ledger.recent_marks()]
    assert tainted[0] == ledger_mod.MarkKind.STANDBY and "added on 1 nodes (sim-h100-0)" in tainted[1]
    assert failed[0] == ledger_mod.MarkKind.HOLDS
    assert "failed inside this step (ClusterError: the API server went away)" in failed[1]
    assert f"it was to hold (cordon until their pods end) {NODE}," in failed[1]
    assert not harness.ledger.open_steps()


def test_a_step_whose_failure_the_ledger_cannot_record_raises_its_own_error_and_stays_open(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def outage(*_: object) -> Holds:
        raise ClusterError("the API server went away")

    closes = harness.ledger.end_step

    def ledger_down_at_holds(step: ledger_mod.OpenStep, lines: list[str], now: datetime) -> None:
        if step.kind == ledger_mod.MarkKind.HOLDS:
            raise RuntimeError("the ledger's database went away too")
        closes(step, lines, now)

    monkeypatch.setattr(engine, "settle_holds", outage)
    monkeypatch.setattr(harness.ledger, "end_step", ledger_down_at_holds)
    with pytest.raises(ClusterError, match="went away"):  # the step's own error, not the ledger's
        engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-1"), _plan(DRAIN), "plan.json")
    monkeypatch.undo()

    # The holds step stays open; the next run tells of it as the first run's.
    assert [s.kind for s in harness.ledger.open_steps()] == [ledger_mod.MarkKind.HOLDS]
    engine.start(harness.rollouts(run_id="gpu_partition_rollout/run-2"), _plan(DRAIN), "plan.json")
    assert harness.ledger.open_steps() == []
    (told,) = harness.ledger.recent_marks(run_id="gpu_partition_rollout/run-1")
    assert told.kind == ledger_mod.MarkKind.HOLDS and told.message.startswith("ended inside this step")
