"""The thresholds policy: below 40 % split, 40-80 % keep (fit MPS tenants), above 80 % merge."""

from __future__ import annotations

import pytest

from slicewise.catalog import Catalog
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE, KEEP

from .conftest import NOW, forecasts, mig_load, node, observe, whole_gpu_load

THRESHOLDS = PlannerConfig(policy="thresholds")


def _plan_mig(catalog: Catalog, mig_config: str, load: float, model: str = "A100-80GB") -> tuple[str, str]:
    gpu_node = node("n1", model=model, mig_config=mig_config)
    plan = plan_fleet(
        [observe(gpu_node)], forecasts(mig_load(gpu_node, load, catalog)), catalog, THRESHOLDS, NOW
    )
    (verdict,) = plan.nodes
    return verdict.action, verdict.desired.mig_config


@pytest.mark.parametrize(
    ("current", "load", "expected"),
    [
        ("all-balanced", 0.2, ("change", "all-2g.20gb")),  # 3g+2g+1g+1g -> 3 x 2g: one step smaller
        ("all-balanced", 0.9, ("change", "all-3g.40gb")),  # -> 2 x 3g: one step larger
        ("all-balanced", 0.6, ("keep", "all-balanced")),  # inside the band
        ("all-1g.10gb", 0.1, ("keep", "all-1g.10gb")),  # already the smallest slices
        ("all-7g.80gb", 0.95, ("keep", "all-7g.80gb")),  # already the largest
        ("sw-4g-3g", 0.1, ("change", "all-3g.40gb")),  # 4g+3g is a ladder step too
    ],
)
def test_mig_nodes_step_along_the_ladder(
    catalog: Catalog, current: str, load: float, expected: tuple[str, str]
) -> None:
    assert _plan_mig(catalog, current, load) == expected


def test_a30_uses_its_four_slice_ladder(catalog: Catalog) -> None:
    assert _plan_mig(catalog, "all-balanced", 0.1, model="A30-24GB") == (CHANGE, "all-1g.6gb")
    assert _plan_mig(catalog, "all-balanced", 0.9, model="A30-24GB") == (CHANGE, "all-2g.12gb")


def test_utilisation_is_weighted_by_slice_size(catalog: Catalog) -> None:
    gpu_node = node("n1", mig_config="all-balanced")
    series = mig_load(gpu_node, 0.0, catalog)
    # The 3g instances (3 of the 7 slices) are busy, the small ones idle: weighted mean 3/7 = 43 % -> keep.
    busy = [
        s.__class__(**{**s.__dict__, "p50": 1.0, "upper": 1.0}) if s.mig_profile == "3g.40gb" else s
        for s in series
    ]
    plan = plan_fleet([observe(gpu_node)], forecasts(busy), catalog, THRESHOLDS, NOW)
    assert plan.nodes[0].util_upper == pytest.approx(3 / 7)
    assert plan.nodes[0].action == KEEP


@pytest.mark.parametrize(
    ("plugin", "load", "expected"),
    [
        ("mps-2", 0.2, "mps-4"),  # split: twice the tenants
        ("mps-4", 0.9, "mps-2"),  # merge: half
        ("mps-2", 0.9, "default"),  # merge down to no sharing
        ("mps-4", 0.4, "mps-6"),  # in the band: fit 4 x 70 % / 40 % = 7 -> largest shipped config <= 7
        ("mps-4", 0.5, "mps-4"),  # 4 x 70 % / 50 % = 5.6 -> 5 -> mps-4: unchanged
    ],
)
def test_whole_gpu_nodes_step_along_mps_replicas(
    catalog: Catalog, plugin: str, load: float, expected: str
) -> None:
    gpu_node = node("h1", model="H100-80GB", mig_config="all-disabled", plugin=plugin, gpus=2)
    plan = plan_fleet([observe(gpu_node)], forecasts(whole_gpu_load("h1", 2, load)), catalog, THRESHOLDS, NOW)
    assert plan.nodes[0].desired.device_plugin_config == expected


def test_no_forecast_for_a_node_changes_nothing(catalog: Catalog) -> None:
    gpu_node = node("n1")
    plan = plan_fleet([observe(gpu_node)], forecasts([]), catalog, THRESHOLDS, NOW)
    assert plan.nodes[0].action == KEEP
    assert "no forecast" in plan.nodes[0].reasons[0]


def test_a_pod_asking_for_several_gpus_keeps_a_whole_gpu_node_off_mps(catalog: Catalog) -> None:
    from .conftest import pod

    gpu_node = node("h1", model="H100-80GB", mig_config="all-disabled", gpus=4)
    trainer = pod("train-0", "h1", "nvidia.com/gpu", 4)
    plan = plan_fleet(
        [observe(gpu_node, trainer)], forecasts(whole_gpu_load("h1", 4, 0.1)), catalog, THRESHOLDS, NOW
    )
    assert plan.nodes[0].action == KEEP
    assert plan.nodes[0].desired.device_plugin_config == "default"
    assert any("more than one GPU" in r for r in plan.nodes[0].reasons)
