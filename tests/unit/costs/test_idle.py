"""Idle attribution per namespace: each category measured with its evidence, or "not measured" — never a
guess."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slicewise.costs import allocation
from slicewise.costs.idle import (
    ALLOCATED_BUT_IDLE,
    COULD_SHARE,
    INPUT_BOUND,
    MEASURED,
    MEMORY_BOUND,
    NOT_APPLICABLE,
    NOT_MEASURED,
    IdleFinding,
    IdleThresholds,
    attribute_idle,
    hour_evidence,
)
from slicewise.costs.samples import hour_samples
from slicewise.costs.sharing import LayoutHistory
from tests.unit.costs.frames import (
    A100_80,
    CATALOG,
    H100,
    HOUR,
    NAN,
    PRICES,
    demand_frame,
    gpu_frame,
    observed_at,
    requests,
    series,
)

THRESHOLDS = IdleThresholds(
    low_engine=0.2, memory_bound_dram=0.5, input_bound_pcie_rx=1e9, share_util=0.3, share_min_fraction=0.8
)


def findings() -> dict[tuple[str, str], IdleFinding]:
    half = HOUR + timedelta(minutes=30)
    gpu = gpu_frame(
        series("w", 0, H100, namespace="mem", pod="m", engine=0.1, dram=0.7),
        series("w", 1, H100, namespace="input", pod="i", engine=0.05, dram=0.1, rx=3e9),
        series("w", 2, H100, namespace="busy", pod="b", engine=0.9, dram=0.4, rx=5e9),
        # Half the hour quiet, half busy: below the could-share threshold only 50% of the time.
        series("w", 3, H100, namespace="mixed", pod="x", engine=0.1, minutes=30),
        series("w", 3, H100, namespace="mixed", pod="x", engine=0.8, start=half, minutes=30),
        series(
            "m", 0, A100_80, profile="7g.80gb", instance="0", namespace="mig", pod="g", engine=0.1, dram=NAN
        ),
        series("s", 0, H100, engine=0.2),
    )
    demand = demand_frame(requests("s", "mps", "t0"), requests("s", "mps", "t1"))
    history = LayoutHistory.of(observed_at(HOUR - timedelta(hours=1), "s", "mps-2"))
    samples = hour_samples(gpu, demand, catalog=CATALOG, history=history)
    rows = allocation.allocation_rows(samples, prices=PRICES, history=history)
    found = attribute_idle(hour_evidence(samples, THRESHOLDS), rows, THRESHOLDS)
    return {(f.namespace, f.category): f for f in found}


def test_every_namespace_gets_every_category() -> None:
    found = findings()
    namespaces = {"mem", "input", "busy", "mixed", "mig", "mps"}
    assert set(found) == {
        (n, c) for n in namespaces for c in (ALLOCATED_BUT_IDLE, MEMORY_BOUND, INPUT_BOUND, COULD_SHARE)
    }


def test_engine_low_with_dram_high_is_memory_bound_with_the_evidence() -> None:
    memory = findings()[("mem", MEMORY_BOUND)]
    assert memory.status == MEASURED and memory.gpuHours == pytest.approx(1.0)
    assert memory.cost == pytest.approx(4.0)
    assert "mean DRAM active 70%" in memory.evidence
    assert findings()[("input", MEMORY_BOUND)].gpuHours == 0.0


def test_engine_low_with_pcie_traffic_high_is_likely_input_bound_on_a_whole_gpu() -> None:
    found = findings()
    assert found[("input", INPUT_BOUND)].gpuHours == pytest.approx(1.0)
    assert "mean rx 3.00 GB/s" in found[("input", INPUT_BOUND)].evidence
    assert found[("busy", INPUT_BOUND)].gpuHours == 0.0  # high traffic, but the engine is busy


def test_a_whole_gpu_below_the_threshold_most_of_the_time_could_share() -> None:
    found = findings()
    share = found[("mem", COULD_SHARE)]
    assert share.status == MEASURED and share.gpuHours == pytest.approx(1.0)
    assert share.candidates[0]["pod"] == "m" and share.candidates[0]["share_below"] == pytest.approx(1.0)
    assert "m on w GPU 0" in share.evidence
    assert found[("mixed", COULD_SHARE)].candidates == ()  # quiet only half the time
    assert found[("busy", COULD_SHARE)].gpuHours == 0.0


def test_missing_dram_metrics_or_pcie_on_mig_say_not_measured() -> None:
    found = findings()
    assert found[("mig", MEMORY_BOUND)].status == NOT_MEASURED
    assert found[("mig", MEMORY_BOUND)].gpuHours is None and "DRAM" in found[("mig", MEMORY_BOUND)].evidence
    assert (
        found[("mig", INPUT_BOUND)].status == NOT_MEASURED
        and "per physical GPU" in found[("mig", INPUT_BOUND)].evidence
    )
    assert found[("mig", COULD_SHARE)].status == NOT_APPLICABLE
    assert found[("mig", ALLOCATED_BUT_IDLE)].gpuHours == pytest.approx(0.9)


def test_mps_tenants_are_idle_by_an_estimate_and_every_profiling_category_is_not_measured() -> None:
    found = findings()
    idle = found[("mps", ALLOCATED_BUT_IDLE)]
    # Two tenants hold the whole GPU (mps-2); the GPU ran at 0.2: 0.8 GPU-h idle between them.
    assert idle.status == MEASURED and idle.gpuHours == pytest.approx(0.8) and "estimate" in idle.evidence
    assert found[("mps", MEMORY_BOUND)].status == NOT_MEASURED
    assert found[("mps", INPUT_BOUND)].status == NOT_MEASURED
    assert found[("mps", COULD_SHARE)].status == NOT_APPLICABLE


def test_a_namespace_without_any_activity_metric_is_not_measured_even_for_idle_time() -> None:
    gpu = gpu_frame(series("w", 0, H100, namespace="dark", pod="d", engine=NAN, gpu_util=NAN, dram=NAN))
    history = LayoutHistory.of([])
    samples = hour_samples(gpu, demand_frame(), catalog=CATALOG, history=history)
    rows = allocation.allocation_rows(samples, prices=PRICES, history=history)
    found = {f.category: f for f in attribute_idle(hour_evidence(samples, THRESHOLDS), rows, THRESHOLDS)}
    assert {f.status for f in found.values()} == {NOT_MEASURED}
    assert all(f.gpuHours is None for f in found.values())
