"""A node Slicewise holds (cordoned with slicewise.io/held-for, planning.holds) is planned again every run: held on
while its blocking pods run, changed once they are gone, released when the change is no longer wanted, and left
out of the fleet-wide rules because no pod can be sent to it."""

from __future__ import annotations

from datetime import timedelta

from slicewise.catalog import Catalog
from slicewise.cluster.base import HOLD_ANNOTATION, GpuNode, Hold
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import BLOCKED, CHANGE, DRAIN, KEEP, SKIP, UNCORDON

from .conftest import NOW, forecasts, mig_load, node, observe, pod

MIG_1G, MIG_3G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
HELD_SINCE = NOW - timedelta(hours=5)
DRAINING = PlannerConfig(cordon_to_drain=True)


def _held(name: str = "n1", **kwargs: object) -> GpuNode:
    hold = Hold("all-3g.40gb", "default", HELD_SINCE)
    return node(name, cordoned=True, annotations={HOLD_ANNOTATION: hold.to_annotation()}, **kwargs)  # type: ignore[arg-type]


def test_a_held_node_whose_job_still_runs_stays_held_and_says_since_when(catalog: Catalog) -> None:
    small = _held(mig_config="all-1g.10gb")
    job = pod("train-1", "n1", MIG_1G, evictable=False, kind="Job")
    plan = plan_fleet(
        [observe(small, job)], forecasts(mig_load(small, 0.5, catalog), {MIG_3G: 4}), catalog, DRAINING, NOW
    )
    (verdict,) = plan.nodes
    assert verdict.action == DRAIN
    assert "team/train-1 (Job)" in verdict.reasons[-2]
    assert verdict.reasons[-1] == f"held by Slicewise since {HELD_SINCE:%Y-%m-%d %H:%M} UTC"


def test_a_held_node_whose_job_has_finished_is_changed(catalog: Catalog) -> None:
    small = _held(mig_config="all-1g.10gb")
    plan = plan_fleet(
        [observe(small)], forecasts(mig_load(small, 0.0, catalog), {MIG_3G: 4}), catalog, DRAINING, NOW
    )
    (verdict,) = plan.nodes
    assert verdict.action == CHANGE
    assert verdict.desired.mig_config != "all-1g.10gb"


def test_a_held_node_is_released_when_its_change_is_no_longer_wanted(catalog: Catalog) -> None:
    small = _held(mig_config="all-1g.10gb")
    job = pod("train-1", "n1", MIG_1G, evictable=False, kind="Job")
    # The pending 3g demand is gone: the node's layout is right as it is.
    kept = plan_fleet([observe(small, job)], forecasts(mig_load(small, 0.9, catalog)), catalog, DRAINING, NOW)
    # The operator switched planner_cordon_to_drain off: blocked, so the hold goes too.
    off = plan_fleet(
        [observe(small, job)],
        forecasts(mig_load(small, 0.5, catalog), {MIG_3G: 4}),
        catalog,
        PlannerConfig(),
        NOW,
    )
    for plan in (kept, off):
        (verdict,) = plan.nodes
        assert verdict.action == UNCORDON, verdict
        assert "lift the hold" in verdict.reasons[-1]


def test_the_same_node_without_the_annotation_is_someone_elses_cordon_and_not_planned(
    catalog: Catalog,
) -> None:
    cordoned = node("n1", mig_config="all-1g.10gb", cordoned=True)
    plan = plan_fleet(
        [observe(cordoned)], forecasts(mig_load(cordoned, 0.0, catalog), {MIG_3G: 4}), catalog, DRAINING, NOW
    )
    assert plan.nodes[0].action == SKIP


def test_a_held_node_that_cannot_be_planned_keeps_its_hold_for_a_person(catalog: Catalog) -> None:
    failed = _held(mig_config="all-1g.10gb", state="failed")
    plan = plan_fleet([observe(failed)], forecasts(mig_load(failed, 0.0, catalog)), catalog, DRAINING, NOW)
    (verdict,) = plan.nodes
    assert verdict.action == SKIP
    assert verdict.reasons[-1].startswith("held by Slicewise since")


def test_no_node_is_held_while_pending_requests_fit_it_as_it_is(catalog: Catalog) -> None:
    # Pending 1g requests fit the node's free 1g instances now: a cordon would leave them waiting (in the backtest a
    # hold so idled an 8-GPU node for 18 days), so the change stays blocked, and a held node is released.
    job = pod("train-1", "n1", MIG_1G, evictable=False, kind="Job")
    for gpu_node, expected in (
        (node("n1", mig_config="all-1g.10gb"), BLOCKED),
        (_held(mig_config="all-1g.10gb"), UNCORDON),
    ):
        plan = plan_fleet(
            [observe(gpu_node, job)],
            forecasts(mig_load(gpu_node, 0.5, catalog), {MIG_3G: 4, MIG_1G: 2}),
            catalog,
            DRAINING,
            NOW,
        )
        (verdict,) = plan.nodes
        assert verdict.action == expected
        assert any(
            "no hold: as it is the node hosts 2.00 pending requests now" in why for why in verdict.reasons
        )


def test_a_held_node_comes_first_in_the_change_budget(catalog: Catalog) -> None:
    observations, series = [], []
    for name, load, held in (("n0", 0.05, False), ("n1", 0.3, True)):
        gpu_node = _held(name) if held else node(name)
        observations.append(observe(gpu_node))
        series += mig_load(gpu_node, load, catalog)
    config = PlannerConfig(policy="thresholds", max_change_share=0.5, cordon_to_drain=True)  # 1 of 2
    plan = plan_fleet(observations, forecasts(series), catalog, config, NOW)
    assert {p.node: p.action for p in plan.nodes} == {"n0": KEEP, "n1": CHANGE}
    # Not held, n1 gains less than n0 and waits for a later run.
    unheld = plan_fleet([observe(node("n1")), observations[0]], forecasts(series), catalog, config, NOW)
    assert {p.node: p.action for p in unheld.nodes} == {"n0": CHANGE, "n1": KEEP}


def test_holds_count_against_the_change_budget(catalog: Catalog) -> None:
    # Four nodes whose change a running Job blocks: a budget of one node holds one of them, the others stay
    # blocked; held nodes over a lowered budget are released.
    small = [node(f"n{i}", mig_config="all-1g.10gb") for i in range(4)]
    jobs = [pod(f"train-{i}", f"n{i}", MIG_1G, evictable=False, kind="Job") for i in range(4)]
    inputs = (
        [observe(n, job) for n, job in zip(small, jobs, strict=True)],
        forecasts([s for n in small for s in mig_load(n, 0.5, catalog)], {MIG_3G: 16}),
    )
    config = PlannerConfig(cordon_to_drain=True, max_change_share=0.25)
    actions = [p.action for p in plan_fleet(*inputs, catalog, config, NOW).nodes]
    assert sorted(actions) == [BLOCKED, BLOCKED, BLOCKED, DRAIN]
    assert all(
        "change budget" in p.reasons[-1]
        for p in plan_fleet(*inputs, catalog, config, NOW).nodes
        if p.action == BLOCKED
    )
    two_held = [_held(f"n{i}", mig_config="all-1g.10gb") if i < 2 else small[i] for i in range(4)]
    held_inputs = ([observe(n, job) for n, job in zip(two_held, jobs, strict=True)], inputs[1])
    verdicts = {p.node: p.action for p in plan_fleet(*held_inputs, catalog, config, NOW).nodes}
    assert sorted(verdicts.values()) == [BLOCKED, BLOCKED, DRAIN, UNCORDON]
    assert {verdicts["n0"], verdicts["n1"]} == {DRAIN, UNCORDON}  # one held on, one released


def test_a_held_empty_node_is_not_listed_as_standby(catalog: Catalog) -> None:
    def empty(held: bool) -> GpuNode:
        kwargs = {"model": "H100-80GB", "mig_config": "all-disabled", "gpus": 8}
        return _held("h1", **kwargs) if held else node("h1", **kwargs)  # type: ignore[arg-type]

    small = node("h0", model="H100-80GB", mig_config="all-disabled", gpus=2)
    for held, listed in ((False, True), (True, False)):
        big = empty(held)
        plan = plan_fleet(
            [observe(small), observe(big)],
            forecasts(mig_load(small, 0.0, catalog) + mig_load(big, 0.0, catalog)),
            catalog,
            DRAINING,
            NOW,
        )
        assert any("h1" in grade for grade in plan.standby_grades) == listed, plan.standby_grades
