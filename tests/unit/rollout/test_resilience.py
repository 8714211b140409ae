"""A task killed mid-wave and run again, and properties that hold for any plan: the disruption budget, the
dwell time, and a rollback that restores exactly the snapshot."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slicewise.cluster.base import LAST_CHANGE_ANNOTATION, ClusterBackend, GpuNode, Hold
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE
from slicewise.rollout import engine
from slicewise.rollout import ledger as ledger_mod

from .conftest import CHANGES, Harness, fleet_plan


class Killed(BaseException):
    """What the task process sees of a SIGKILL: nothing after this point runs (not even except Exception)."""


class Recording:
    """A backend that counts writes, tracks nodes out of service, and can die after the N-th label write."""

    def __init__(self, backend: ClusterBackend, die_after_label_writes: int | None = None) -> None:
        self.backend = backend
        self.name = backend.name
        self.label_writes = 0
        self.die_after = die_after_label_writes
        self.cordoned: set[str] = set()
        self.most_cordoned = 0

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.backend, attribute)

    def set_labels(
        self, node: str, changes: Mapping[str, str | None], *, expected: Mapping[str, str | None]
    ) -> GpuNode:
        written = self.backend.set_labels(node, changes, expected=expected)
        self.label_writes += 1
        if self.die_after is not None and self.label_writes >= self.die_after:
            raise Killed
        return written

    def cordon(self, node: str, *, hold: Hold | None = None) -> GpuNode:
        self.cordoned.add(node)
        self.most_cordoned = max(self.most_cordoned, len(self.cordoned))
        return self.backend.cordon(node, hold=hold)

    def uncordon(self, node: str) -> GpuNode:
        self.cordoned.discard(node)
        return self.backend.uncordon(node)


def test_a_task_killed_after_writing_labels_resumes_without_writing_them_twice(harness: Harness) -> None:
    dying = Recording(harness.cluster, die_after_label_writes=1)
    ctx = harness.rollouts(backend=dying)
    rollout_id = engine.start(ctx, fleet_plan(["sim-a100-80-0"]), "plan.json")["rollout_id"]
    with contextlib.suppress(Killed):
        engine.apply_wave(ctx, rollout_id, 0)
    assert harness.cluster.get_node("sim-a100-80-0").unschedulable  # cordoned, and the ledger says why
    assert harness.ledger.node(rollout_id, "sim-a100-80-0").cordoned_by_us

    retry = Recording(harness.cluster)  # Airflow retries the task: same run, fresh process
    ctx = harness.rollouts(backend=retry)
    assert engine.start(ctx, fleet_plan(["sim-a100-80-0"]), "plan.json")["action"] == "resumed"
    engine.apply_wave(ctx, rollout_id, 0)
    engine.analyse_wave(ctx, rollout_id, 0, harness.prometheus, harness.checks, bake_s=60)
    assert engine.finish(ctx, rollout_id) == ledger_mod.RolloutStatus.PROMOTED
    assert retry.label_writes == 0  # the labels written before the kill were not written again
    assert harness.labels("sim-a100-80-0") == ("all-3g.40gb", "default")
    assert not harness.cluster.get_node("sim-a100-80-0").unschedulable


def test_a_run_killed_mid_wave_is_rolled_back_by_its_rollback_task(harness: Harness) -> None:
    dying = Recording(harness.cluster, die_after_label_writes=2)
    ctx = harness.rollouts(backend=dying, shares=(1.0,), max_in_flight=3)
    rollout_id = engine.start(ctx, fleet_plan(["sim-a100-40-0", "sim-a100-80-0", "sim-h200-0"]), "p")[
        "rollout_id"
    ]
    with contextlib.suppress(Killed):
        engine.apply_wave(ctx, rollout_id, 0)
    ctx = harness.rollouts()  # the rollback task runs in its own process
    assert (
        engine.finish(ctx, rollout_id) == ledger_mod.RolloutStatus.RUNNING
    )  # never promoted: the wave did not finish
    assert engine.rollback(ctx, rollout_id)["status"] == ledger_mod.RolloutStatus.ROLLED_BACK
    for name in ("sim-a100-40-0", "sim-a100-80-0", "sim-h200-0"):
        mig, plugin, _, _ = CHANGES[name]
        assert harness.labels(name) == (mig, plugin)
        assert not harness.cluster.get_node(name).unschedulable


NODES = list(CHANGES)
SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SLOW
@given(chosen=st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True), budget=st.integers(1, 3))
def test_no_more_nodes_are_out_of_service_than_the_budget(
    harness: Harness, chosen: list[str], budget: int
) -> None:
    harness.ledger.close()
    harness.ledger = ledger_mod.Ledger.open(f"sqlite:///{harness.tmp / f'budget-{len(chosen)}-{budget}.db'}")
    harness.cluster.reset()
    recording = Recording(harness.cluster)
    ctx = harness.rollouts(backend=recording, max_in_flight=budget, shares=(1.0,))
    rollout_id = engine.start(ctx, fleet_plan(chosen), "plan.json")["rollout_id"]
    for index in range(3):
        engine.apply_wave(ctx, rollout_id, index)
    assert recording.most_cordoned <= budget
    assert recording.cordoned == set()


@SLOW
@given(
    chosen=st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True),
    faulty=st.sampled_from([None, *NODES]),
    fault=st.sampled_from(["fail", "stuck"]),
)
def test_a_rollback_restores_exactly_the_snapshot_labels(
    harness: Harness, chosen: list[str], faulty: str | None, fault: str
) -> None:
    harness.ledger.close()
    harness.ledger = ledger_mod.Ledger.open(
        f"sqlite:///{harness.tmp / f'rb-{len(chosen)}-{faulty}-{fault}.db'}"
    )
    harness.cluster.reset()
    before = {n: dict(harness.cluster.get_node(n).labels) for n in chosen}
    if faulty is not None:
        harness.cluster.inject_fault(faulty, fault)
    ctx = harness.rollouts(shares=(1.0,), max_in_flight=4)
    rollout_id = engine.start(ctx, fleet_plan(chosen), "plan.json")["rollout_id"]
    engine.apply_wave(ctx, rollout_id, 0)
    if harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.RUNNING:
        harness.ledger.set_rollout_status(
            rollout_id, ledger_mod.RolloutStatus.ROLLING_BACK, "test: roll back", ctx.clock.now()
        )
    engine.rollback(ctx, rollout_id)
    harness.cluster.inject_fault(faulty or chosen[0], "none")
    for name in chosen:
        after = harness.cluster.get_node(name).labels
        for key in ("nvidia.com/mig.config", "nvidia.com/device-plugin.config"):
            assert after.get(key) == before[name].get(key), (name, key)
        assert not harness.cluster.get_node(name).unschedulable


@SLOW
@given(minutes_ago=st.integers(min_value=0, max_value=240))
def test_no_node_is_changed_twice_within_the_dwell_time(harness: Harness, minutes_ago: int) -> None:
    """The rollout stamps each changed node; the next plan leaves it alone until the dwell time has passed."""
    from tests.unit.planning.conftest import forecasts, mig_load, node, observe

    now = harness.wall().now()
    stamped = node(
        "n1",
        mig_config="all-balanced",
        annotations={LAST_CHANGE_ANNOTATION: (now - timedelta(minutes=minutes_ago)).isoformat()},
    )
    from slicewise.catalog import load_catalog

    catalog = load_catalog()
    config = PlannerConfig(policy="thresholds", dwell_hours=1.0, max_change_share=1.0)
    plan = plan_fleet([observe(stamped)], forecasts(mig_load(stamped, 0.05, catalog)), catalog, config, now)
    changed = plan.nodes[0].action == CHANGE
    assert changed == (minutes_ago >= 60)
