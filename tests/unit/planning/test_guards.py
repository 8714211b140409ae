"""Guard rails that apply to every policy: hysteresis, dwell time, trust, change budget, unplannable nodes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slicewise.catalog import Catalog
from slicewise.cluster.base import LAST_CHANGE_ANNOTATION
from slicewise.planning.config import PlannerConfig, PlannerConfigError
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import CHANGE, KEEP, SKIP

from .conftest import NOW, forecasts, mig_load, node, observe

THRESHOLDS = PlannerConfig(policy="thresholds", max_change_share=1.0)


def _idle_node(catalog: Catalog, name: str = "n1", **kwargs: object) -> tuple[object, list[object]]:
    gpu_node = node(name, mig_config="all-balanced", **kwargs)  # type: ignore[arg-type]
    return gpu_node, mig_load(gpu_node, 0.1, catalog)


def test_hysteresis_keeps_a_change_whose_gain_is_too_small(catalog: Catalog) -> None:
    gpu_node, series = _idle_node(catalog)
    config = PlannerConfig(policy="thresholds", min_gain_gpu_hours=10.0)  # 4 GPUs x 90 % idle = 3.6 < 10
    verdict = plan_fleet([observe(gpu_node)], forecasts(series), catalog, config, NOW).nodes[0]  # type: ignore[arg-type]
    assert verdict.action == KEEP
    assert "hysteresis" in verdict.reasons[-1]
    assert verdict.desired.mig_config == "all-2g.20gb"  # what it would have done stays visible


@pytest.mark.parametrize(("ago", "expected"), [(timedelta(minutes=30), KEEP), (timedelta(hours=2), CHANGE)])
def test_dwell_time_protects_recently_changed_nodes(catalog: Catalog, ago: timedelta, expected: str) -> None:
    gpu_node, series = _idle_node(catalog, annotations={LAST_CHANGE_ANNOTATION: (NOW - ago).isoformat()})
    verdict = plan_fleet([observe(gpu_node)], forecasts(series), catalog, THRESHOLDS, NOW).nodes[0]  # type: ignore[arg-type]
    assert verdict.action == expected


def test_an_untrusted_forecaster_changes_nothing_unless_the_fallback_is_chosen(catalog: Catalog) -> None:
    gpu_node, series = _idle_node(catalog)
    untrusted = forecasts(series, trusted=False)  # type: ignore[arg-type]
    kept = plan_fleet([observe(gpu_node)], untrusted, catalog, THRESHOLDS, NOW)  # type: ignore[arg-type]
    assert kept.nodes[0].action == KEEP
    assert "not trusted" in kept.nodes[0].reasons[-1]
    assert kept.notes and "planner_fallback=none" in kept.notes[0]
    fallback = PlannerConfig(policy="thresholds", fallback="baseline", max_change_share=1.0)
    acted = plan_fleet([observe(gpu_node)], untrusted, catalog, fallback, NOW)  # type: ignore[arg-type]
    assert acted.nodes[0].action == CHANGE


def test_the_change_budget_keeps_the_highest_gains(catalog: Catalog) -> None:
    observations, series = [], []
    for i, load in enumerate([0.1, 0.3, 0.05, 0.2, 0.35, 0.15, 0.25, 0.0]):
        gpu_node = node(f"n{i}", mig_config="all-balanced")
        observations.append(observe(gpu_node))
        series += mig_load(gpu_node, load, catalog)
    config = PlannerConfig(policy="thresholds", max_change_share=0.25)  # 2 of 8 nodes
    plan = plan_fleet(observations, forecasts(series), catalog, config, NOW)
    changed = sorted(p.node for p in plan.nodes if p.action == CHANGE)
    assert changed == ["n2", "n7"]  # the two idlest nodes gain most
    assert all("change budget" in p.reasons[-1] for p in plan.nodes if p.action == KEEP)


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"state": "pending"}, "reconfiguring"),
        ({"state": "failed"}, "failed"),
        ({"cordoned": True}, "cordoned"),
    ],
)
def test_nodes_that_cannot_be_planned_are_skipped_with_the_reason(
    catalog: Catalog, kwargs: dict[str, object], why: str
) -> None:
    gpu_node, series = _idle_node(catalog, **kwargs)
    verdict = plan_fleet([observe(gpu_node)], forecasts(series), catalog, THRESHOLDS, NOW).nodes[0]  # type: ignore[arg-type]
    assert verdict.action == SKIP
    assert why in verdict.reasons[0]


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({"nvidia.com/dra-kubelet-plugin": "true"}, "allocated by the NVIDIA DRA driver"),
        ({"nvidia.com/gpu.deploy.device-plugin": "false"}, "device plugin does not run here"),
    ],
)
def test_nodes_that_are_not_slicewises_to_touch_are_skipped_with_the_reason(
    catalog: Catalog, labels: dict[str, str], why: str
) -> None:
    from dataclasses import replace

    gpu_node, series = _idle_node(catalog)
    theirs = replace(gpu_node, labels={**gpu_node.labels, **labels})  # type: ignore[type-var]
    verdict = plan_fleet([observe(theirs)], forecasts(series), catalog, THRESHOLDS, NOW).nodes[0]  # type: ignore[arg-type]
    assert verdict.action == SKIP
    assert verdict.reasons[0].startswith("not Slicewise's to touch") and why in verdict.reasons[0]
    # Without the label the same node is planned (a change: it is idle).
    assert (
        plan_fleet([observe(gpu_node)], forecasts(series), catalog, THRESHOLDS, NOW).nodes[0].action != SKIP
    )  # type: ignore[arg-type]


def test_an_unknown_gpu_product_is_skipped(catalog: Catalog) -> None:
    from dataclasses import replace

    gpu_node, series = _idle_node(catalog)
    odd = replace(gpu_node, gpu_product="NVIDIA-L4")  # type: ignore[type-var]
    verdict = plan_fleet([observe(odd)], forecasts(series), catalog, THRESHOLDS, NOW).nodes[0]  # type: ignore[arg-type]
    assert verdict.action == SKIP
    assert "NVIDIA-L4" in verdict.reasons[0]


def test_bad_planner_settings_are_refused() -> None:
    with pytest.raises(PlannerConfigError):
        PlannerConfig(policy="random")
    with pytest.raises(PlannerConfigError):
        PlannerConfig(low_util=0.9, high_util=0.5)
    with pytest.raises(PlannerConfigError, match="planner_release_below"):
        PlannerConfig(release_below=1.5)
    with pytest.raises(PlannerConfigError, match="planner_release_below_large"):
        PlannerConfig(release_below_large=-0.1)
    for age in (-1.0, float("nan")):
        with pytest.raises(PlannerConfigError, match="planner_release_min_pod_age_hours cannot be negative"):
            PlannerConfig(release_min_pod_age_hours=age)
    with pytest.raises(PlannerConfigError, match="planner_mps_release_below must be in"):
        PlannerConfig(mps_release_below=-0.1)
    with pytest.raises(PlannerConfigError, match="planner_whole_gpu_demand must be one of"):
        PlannerConfig(whole_gpu_demand="p90")
