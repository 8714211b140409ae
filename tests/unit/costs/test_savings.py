"""Savings of an applied change: the node's waste per hour before vs after, an estimate with its method."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from slicewise.costs import allocation, savings
from slicewise.costs.samples import hour_samples
from tests.unit.costs.frames import CATALOG, H100, HOUR, NO_HISTORY, PRICES, demand_frame, gpu_frame, series

CHANGE = savings.AppliedChange(
    rollout_id=7,
    node="n",
    changed_at=HOUR + timedelta(minutes=30),
    before={"nvidia.com/mig.config": "all-disabled", "nvidia.com/device-plugin.config": "default"},
    after={"nvidia.com/mig.config": "all-disabled", "nvidia.com/device-plugin.config": "mps-2"},
)


def node_rows() -> pd.DataFrame:
    """Hours 07-13 on two H100s: before 10:00 one GPU serves a pod at 0.5 and the other is unallocated (waste
    1.5 GPU-h/h); from 11:00 both GPUs serve pods at 0.5 (waste 1.0 GPU-h/h); 10:00 is the change's hour."""
    parts = []
    for k in range(-3, 4):
        start = HOUR + timedelta(hours=k)
        parts.append(series("n", 0, H100, namespace="a", pod="p", engine=0.5, start=start))
        if k <= 0:
            parts.append(series("n", 1, H100, engine=0.0, start=start))
        else:
            parts.append(series("n", 1, H100, namespace="b", pod="q", engine=0.5, start=start))
    samples = hour_samples(gpu_frame(*parts), demand_frame(), catalog=CATALOG, history=NO_HISTORY)
    return allocation.allocation_rows(samples, prices=PRICES, history=NO_HISTORY)


def test_waste_before_and_after_gives_the_saving_per_hour_and_over_the_rest_of_the_window() -> None:
    result = savings.estimate([CHANGE], node_rows(), HOUR, HOUR + timedelta(hours=4), window_hours=3)
    assert (
        result["estimate"] is True and "estimate" in result["method"] and "3 whole hours" in result["method"]
    )
    (one,) = result["changes"]
    assert one["status"] == "estimated"
    assert (one["hours_before"], one["hours_after"]) == (3, 3)
    assert one["wasteBefore"] == pytest.approx(1.5) and one["wasteAfter"] == pytest.approx(1.0)
    assert (one["usedBefore"], one["usedAfter"]) == pytest.approx((0.5, 1.0))
    assert one["savedGpuHoursPerHour"] == pytest.approx(0.5) and one["savedCostPerHour"] == pytest.approx(2.0)
    # 11:00-14:00 of the window lie after the change's hour: 3 h x 0.5 GPU-h/h at $4.
    assert one["hoursInWindowAfter"] == pytest.approx(3.0)
    assert (result["gpuHours"], result["cost"]) == pytest.approx((1.5, 6.0))
    assert one["change"] == "device-plugin.config default -> mps-2"


def test_a_change_without_validated_hours_on_one_side_is_not_estimated() -> None:
    late = savings.AppliedChange(8, "n", HOUR + timedelta(hours=3, minutes=5), {}, {"x": "y"})
    result = savings.estimate([late], node_rows(), HOUR, HOUR + timedelta(hours=4))
    assert result["changes"][0]["status"].startswith("not estimated: no validated hours after")
    assert result["gpuHours"] == 0.0
