"""Forecast metrics: hand-computed values, zero handling, NaN masking, and the keys a score carries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slicewise.forecasting.baselines import future_mean, last_value
from slicewise.forecasting.metrics import (
    mae,
    mase,
    naive_mae,
    pinball,
    score,
    smape,
    under_provision_rate,
)

NAN = np.nan


def test_mae_is_the_mean_absolute_error() -> None:
    assert mae(np.array([0.0, 1.0, 2.0]), np.array([0.0, 2.0, 0.0])) == pytest.approx(1.0)


def test_metrics_skip_positions_where_either_side_is_nan() -> None:
    # given NaN on the actual side at one position and on the predicted side at another
    actual = np.array([[1.0, NAN, 3.0], [0.0, 5.0, 2.0]])
    predicted = np.array([[2.0, 9.0, NAN], [0.0, 4.0, 2.0]])

    # when scored
    error = mae(actual, predicted)

    # then only the four complete pairs count: (1, 0, 1, 0) / 4
    assert error == pytest.approx(0.5)


def test_metrics_are_nan_when_no_pair_is_left() -> None:
    actual, predicted = np.array([NAN, 1.0]), np.array([1.0, NAN])
    assert math.isnan(mae(actual, predicted))
    assert math.isnan(smape(actual, predicted))
    assert math.isnan(pinball(actual, predicted, 0.9))
    assert math.isnan(under_provision_rate(actual, predicted))


def test_metrics_refuse_arrays_of_different_shapes() -> None:
    with pytest.raises(ValueError, match="shape"):
        mae(np.zeros((2, 3)), np.zeros(3))


def test_smape_counts_a_correctly_predicted_zero_as_no_error() -> None:
    # given an idle GPU predicted idle, an idle GPU predicted busy, and a half-right busy one
    actual = np.array([0.0, 0.0, 1.0])
    predicted = np.array([0.0, 1.0, 0.5])

    # when scored
    error = smape(actual, predicted)

    # then the terms are 0 (not 0/0), the maximum 2, and 2 * 0.5 / 1.5
    assert error == pytest.approx((0.0 + 2.0 + 2.0 / 3.0) / 3.0)


def test_smape_of_an_all_idle_fleet_predicted_idle_is_zero() -> None:
    assert smape(np.zeros(4), np.zeros(4)) == 0.0


def test_smape_is_symmetric_in_actual_and_predicted() -> None:
    a, p = np.array([0.2, 0.9, 0.0]), np.array([0.4, 0.3, 0.1])
    assert smape(a, p) == pytest.approx(smape(p, a))


def test_pinball_at_p90_charges_under_prediction_nine_times_over_prediction() -> None:
    # given the same error of 0.5 once below and once above the actual
    under = pinball(np.array([1.0]), np.array([0.5]), 0.9)
    over = pinball(np.array([0.5]), np.array([1.0]), 0.9)

    # then under-predicting costs 0.9 * 0.5 and over-predicting 0.1 * 0.5
    assert under == pytest.approx(0.45)
    assert over == pytest.approx(0.05)
    assert under == pytest.approx(9 * over)


def test_pinball_at_the_median_is_half_the_absolute_error() -> None:
    actual, predicted = np.array([0.1, 0.8, 0.5]), np.array([0.4, 0.2, 0.5])
    assert pinball(actual, predicted, 0.5) == pytest.approx(mae(actual, predicted) / 2)


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.1, 1.5])
def test_pinball_needs_a_quantile_strictly_inside_0_1(quantile: float) -> None:
    with pytest.raises(ValueError, match="quantile"):
        pinball(np.zeros(2), np.zeros(2), quantile)


def test_under_provision_rate_counts_windows_above_the_upper_prediction() -> None:
    # given one window above its P90, one exactly at it, one below, and one with no actual
    actual = np.array([0.9, 1.0, 0.5, NAN])
    upper = np.array([0.8, 1.0, 0.6, 0.0])

    # when the rate is taken
    rate = under_provision_rate(actual, upper)

    # then only the first of the three complete windows is under-provisioned (equal is covered)
    assert rate == pytest.approx(1 / 3)


def test_mase_divides_the_mae_by_the_naive_scale() -> None:
    actual, predicted = np.array([0.2, 0.4, 0.6, 0.8]), np.array([0.3, 0.3, 0.7, 0.7])
    assert mase(actual, predicted, 0.4) == pytest.approx(0.1 / 0.4)


@pytest.mark.parametrize("scale", [0.0, NAN, -1.0, math.inf])
def test_mase_is_nan_without_a_meaningful_scale(scale: float) -> None:
    assert math.isnan(mase(np.array([1.0]), np.array([0.0]), scale))


def test_naive_mae_is_persistence_predicting_the_future_mean() -> None:
    # given a series with a gap and a 2-step horizon
    load = np.array([[1.0, 3.0, NAN, 5.0, 7.0]])

    # when the naive scale is computed
    scale = naive_mae(load, 2)

    # then the targets are 3 (one of two samples), 5 and 6, persistence says 1, 3 and 3 (carried over the
    # gap), and the last two steps have no target: (2 + 2 + 3) / 3
    assert scale == pytest.approx(7 / 3)


def test_persistence_scores_a_mase_of_one_on_its_own_panel() -> None:
    # given a random panel with gaps
    rng = np.random.default_rng(5)
    load = rng.uniform(size=(4, 200))
    load[rng.uniform(size=load.shape) < 0.2] = NAN

    # when persistence is scored against the scale it defines
    value = mase(future_mean(load, 6), last_value(load, step_s=60, horizon_steps=6), naive_mae(load, 6))

    # then it is exactly at the naive level
    assert value == pytest.approx(1.0)


def test_score_computes_every_metric_over_the_same_windows() -> None:
    # given actuals, a P50 and a P90; the last window has no actual, the one before it no P90
    actual = np.array([0.0, 0.5, 1.0, 0.2, NAN])
    p50 = np.array([0.0, 0.4, 0.5, 0.9, 0.3])
    p90 = np.array([0.1, 0.6, 0.8, NAN, 0.3])

    # when scored
    result = score(actual, {0.5: p50, 0.9: p90}, naive_mae=0.4)

    # then only the first three windows count, for the median metrics too (0.2 vs 0.9 would add 0.7):
    #   errors 0, 0.1, 0.5; sMAPE terms 0, 0.2/0.9, 1/1.5; P90 residuals -0.1, -0.1, 0.2
    assert result == pytest.approx(
        {
            "mae": 0.6 / 3,
            "smape": (0.0 + 0.2 / 0.9 + 1.0 / 1.5) / 3,
            "mase": (0.6 / 3) / 0.4,
            "pinball_p50": 0.5 * 0.6 / 3,
            "pinball_p90": (0.01 + 0.01 + 0.18) / 3,
            "under_provision_rate_p90": 1 / 3,
            "n": 3.0,
        }
    )


def test_score_names_a_pinball_per_quantile_and_the_rate_after_the_upper_quantile() -> None:
    # given three quantiles and a P95 as the upper one
    actual = np.array([0.3, 0.6])
    predictions = {0.29: np.array([0.2, 0.5]), 0.5: np.array([0.3, 0.6]), 0.95: np.array([0.4, 0.5])}

    # when scored
    result = score(actual, predictions, naive_mae=0.1, upper_quantile=0.95)

    # then each quantile has its pinball, named by its whole percentile, and the rate is named p95
    assert set(result) == {
        "mae",
        "smape",
        "mase",
        "pinball_p29",
        "pinball_p50",
        "pinball_p95",
        "under_provision_rate_p95",
        "n",
    }
    assert result["under_provision_rate_p95"] == pytest.approx(0.5)


def test_a_point_baseline_is_scored_with_one_array_for_every_quantile() -> None:
    # given a point forecast used as both P50 and P90
    actual = np.array([0.2, 0.4, 0.6, 0.8])
    point = np.array([0.3, 0.3, 0.7, 0.7])

    # when scored
    result = score(actual, {0.5: point, 0.9: point}, naive_mae=0.2)

    # then it is under-provisioned wherever it is below the actual, and its P90 loss is asymmetric
    assert result["under_provision_rate_p90"] == pytest.approx(0.5)
    assert result["pinball_p90"] == pytest.approx((0.01 + 0.09 + 0.01 + 0.09) / 4)
    assert result["mase"] == pytest.approx(0.5)


def test_score_needs_the_median_and_the_upper_quantile() -> None:
    actual = np.zeros(3)
    with pytest.raises(ValueError, match=r"no 0\.5 quantile"):
        score(actual, {0.9: actual}, naive_mae=1.0)
    with pytest.raises(ValueError, match=r"no 0\.9 quantile"):
        score(actual, {0.5: actual}, naive_mae=1.0)
