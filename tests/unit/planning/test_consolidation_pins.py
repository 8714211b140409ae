"""Consolidation of nearly empty nodes of fractional pods: a node whose own proposal lost on the hysteresis may
be drained as it is, the room a node offers is that of the configuration it keeps, and a pod pinned by its node
selector only moves to nodes that match."""

from __future__ import annotations

import dataclasses

import pytest

from slicewise.catalog import Catalog
from slicewise.cluster.base import GpuPod
from slicewise.forecasting.forecasts import Forecasts
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE, KEEP, FleetPlan, NodeObservation

from .conftest import NOW, node, observe, pod, whole_gpu_load

GPU = "nvidia.com/gpu"
PIN = "nvidia.com/gpu.product"


def _share(name: str, where: str, share: float, **selector: tuple[str, ...]) -> GpuPod:
    return dataclasses.replace(pod(name, where, GPU), share=share, node_selector=dict(selector))


def _plan(catalog: Catalog, observations: list[NodeObservation]) -> FleetPlan:
    loads = [s for o in observations for s in whole_gpu_load(o.node.name, o.node.gpu_count, 0.4)]
    return plan_fleet(
        observations,
        Forecasts(tuple(loads), (), "p90_last_hour", True),
        catalog,
        # Released at a quarter of a node's GPUs held (not the default half): a2, at 0.4, stays in use to receive.
        PlannerConfig(max_change_share=1.0, consolidation="nodes", release_below=0.25),
        NOW,
    )


def _lone_and_busy(catalog: Catalog, receiver_plugin: str, **pin: tuple[str, ...]) -> list[NodeObservation]:
    """a1: 4 whole A100s running one 0.4 pod (0.4 GPU-eq: nearly empty, <= 1 of 4 GPUs); its own plan proposes
    MPS 2 and loses on the hysteresis (nothing more is hosted). a2: four 0.4 pods under ``receiver_plugin``."""
    a1 = node("a1", mig_config="all-disabled")
    a2 = node("a2", mig_config="all-disabled", plugin=receiver_plugin)
    busy = [_share(f"busy-{i}", "a2", 0.4) for i in range(4)]
    return [observe(a1, _share("lone-1", "a1", 0.4, **pin)), observe(a2, *busy)]


def test_a_node_whose_proposal_lost_on_the_hysteresis_is_drained_as_it_is(catalog: Catalog) -> None:
    # a2 shares its GPUs by MPS 2 (slots of 0.5): its pods take four of eight, a1's pod fits one of the others.
    first, second = _plan(catalog, _lone_and_busy(catalog, catalog.device_plugin_config_for(2))).nodes
    assert first.action == CHANGE and first.rule == RULE
    assert first.desired == first.current  # drained in its configuration, not switched to its proposal
    assert any("hysteresis" in reason for reason in first.reasons)
    # a1's 4 GPUs released (1 each), less 300 s of its pod's 0.4 GPU-eq.
    assert first.gain_gpu_hours == pytest.approx(4 - 0.4 * 300 / 3600)
    assert second.action == KEEP


def test_a_node_whose_proposal_lost_still_offers_the_room_of_that_proposal(catalog: Catalog) -> None:
    # a2 on whole GPUs, all four used: its own proposal (MPS 2) lost on the hysteresis, yet it offers the room of
    # MPS 2, so a1's pod is moved there (optimistic by design: offering only the kept configuration's room was
    # measured worse in the backtest, see consolidation._room).
    plan = _plan(catalog, _lone_and_busy(catalog, "default"))
    assert plan.nodes[1].action == KEEP and plan.nodes[1].desired != plan.nodes[1].current
    assert plan.nodes[0].action == CHANGE


def test_a_pinned_pod_moves_only_to_a_node_its_selector_allows(catalog: Catalog) -> None:
    mps2 = catalog.device_plugin_config_for(2)
    for label, action in (("B", KEEP), ("A", CHANGE)):
        lone, busy = _lone_and_busy(catalog, mps2, **{PIN: ("A",)})
        receiver = dataclasses.replace(busy, node=dataclasses.replace(busy.node, labels={PIN: label}))
        plan = _plan(catalog, [lone, receiver])
        assert [p.action for p in plan.nodes] == [action, KEEP]
