"""Baselines and the target: hand-computed values on tiny panels, and no baseline ever reads the future."""

from __future__ import annotations

import numpy as np
import pytest

from slicewise.forecasting.baselines import (
    BASELINES,
    always_zero,
    ewma_last_hour,
    future_mean,
    last_value,
    mean_last_hour,
    p90_last_hour,
    seasonal_naive_24h,
)

NAN = np.nan
QUARTER_HOUR = 900  # an hour is 4 steps
HOUR = 3600  # a day is 24 steps


def _close(actual: np.ndarray, expected: list[list[float]]) -> None:
    np.testing.assert_allclose(actual, np.array(expected), rtol=0, atol=1e-12, equal_nan=True)


def test_future_mean_averages_the_next_steps_skipping_gaps() -> None:
    # given a series with gaps
    load = np.array([[1.0, 2.0, NAN, 4.0, NAN, NAN]])

    # when the 2-step target is computed
    target = future_mean(load, 2)

    # then each step averages the following two, one sample (half of 2) is enough, none is not, and the last
    # two steps have no complete window
    _close(target, [[2.0, 4.0, 4.0, NAN, NAN, NAN]])


def test_future_mean_needs_at_least_half_of_an_odd_horizon() -> None:
    # given the same series and a 3-step horizon, where half is 1.5 samples
    load = np.array([[1.0, 2.0, NAN, 4.0, NAN, NAN]])

    # when the target is computed
    target = future_mean(load, 3)

    # then a window needs 2 of its 3 samples: (2, _, 4) has them, (_, 4, _) and (4, _, _) do not
    _close(target, [[3.0, NAN, NAN, NAN, NAN, NAN]])


def test_future_mean_stops_where_the_window_runs_past_the_end() -> None:
    # given two complete series of 5 steps
    load = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0, 0.0]])

    # when the 2-step target is computed
    target = future_mean(load, 2)

    # then t = 2 is the last step whose window (3, 4) lies inside the panel, and series stay apart
    _close(target, [[2.5, 3.5, 4.5, NAN, NAN], [0.0, 0.0, 0.0, NAN, NAN]])


def test_future_mean_of_an_idle_stretch_after_busy_steps_is_exactly_zero() -> None:
    # given a GPU that was busy, then idle
    load = np.array([[0.7, 0.3, 0.9, 0.0, 0.0, 0.0, 0.0]])

    # when the 2-step target is computed
    target = future_mean(load, 2)

    # then the idle windows are exactly 0, not a rounding residue (sMAPE would count 1e-17 against 0 as 2)
    assert target[0, 2] == 0.0 and target[0, 3] == 0.0 and target[0, 4] == 0.0


def test_last_value_carries_the_latest_observation_across_gaps() -> None:
    # given a series that starts late and has gaps, and one never observed
    load = np.array([[NAN, NAN, 0.2, NAN, NAN, 0.5, NAN], [NAN] * 7])

    # when persistence predicts
    predicted = last_value(load, step_s=60, horizon_steps=5)

    # then it is NaN before the first observation and the latest value after it
    _close(predicted, [[NAN, NAN, 0.2, 0.2, 0.2, 0.5, 0.5], [NAN] * 7])


def test_mean_last_hour_averages_the_observations_of_the_trailing_hour() -> None:
    # given 15-minute steps, so an hour is 4 steps ending at t
    load = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, NAN, NAN, NAN, NAN, 6.0]])

    # when the last hour is averaged
    predicted = mean_last_hour(load, step_s=QUARTER_HOUR, horizon_steps=1)

    # then short histories use what there is, gaps are skipped, and an hour without samples has no basis
    _close(predicted, [[1.0, 1.5, 2.0, 2.5, 3.5, 4.0, 4.5, 5.0, NAN, 6.0]])


def test_p90_last_hour_interpolates_the_sorted_trailing_hour() -> None:
    # given 15-minute steps and an hour whose values arrive out of order
    load = np.array([[4.0, 1.0, 3.0, 2.0, 5.0, NAN, NAN, NAN, NAN, 6.0]])

    # when the 0.9 quantile of the last hour is taken
    predicted = p90_last_hour(load, step_s=QUARTER_HOUR, horizon_steps=1)

    # then it interpolates linearly at position 0.9 * (count - 1) of the sorted window:
    #   t1 {1,4}: 1 + 0.9*3 = 3.7   t2 {1,3,4}: pos 1.8 -> 3 + 0.8*1 = 3.8   t3 {1,2,3,4}: pos 2.7 -> 3.7
    #   t4 {1,2,3,5}: pos 2.7 -> 3 + 0.7*2 = 4.4   t5 {2,3,5}: pos 1.8 -> 3 + 0.8*2 = 4.6
    #   t6 {2,5}: 2 + 0.9*3 = 4.7   t7 {5}: 5   t8 none   t9 {6}: 6
    _close(predicted, [[4.0, 3.7, 3.8, 3.7, 4.4, 4.6, 4.7, 5.0, NAN, 6.0]])


def test_ewma_last_hour_weights_recent_observations_and_skips_gaps() -> None:
    # given 15-minute steps, so the span is 4 steps and alpha = 2 / (4 + 1) = 0.4
    load = np.array([[NAN, 1.0, NAN, 3.0]])

    # when the EWMA predicts
    predicted = ewma_last_hour(load, step_s=QUARTER_HOUR, horizon_steps=1)

    # then it is NaN before the first observation, holds through the gap, and weights the two observations
    # 1 and (1 - alpha) = 0.6 (the gap does not decay them): (3 + 0.6 * 1) / (1 + 0.6) = 2.25
    _close(predicted, [[NAN, 1.0, 1.0, 2.25]])


def test_seasonal_naive_has_no_basis_in_the_first_day() -> None:
    # given hourly steps and less than a day of history
    load = np.linspace(0.0, 1.0, 20).reshape(1, 20)

    # when the seasonal naive predicts
    predicted = seasonal_naive_24h(load, step_s=HOUR, horizon_steps=1)

    # then it has nothing to say
    assert predicted.shape == (1, 20)
    assert np.isnan(predicted).all()


def test_seasonal_naive_repeats_the_target_realised_a_day_earlier() -> None:
    # given hourly steps over two days, load[t] = t
    load = np.arange(48, dtype=np.float64).reshape(1, 48)

    # when the seasonal naive predicts a 2-hour mean
    predicted = seasonal_naive_24h(load, step_s=HOUR, horizon_steps=2)

    # then the first day is NaN, and at t it is the mean of load[t - 23] and load[t - 22], i.e. t - 22.5
    assert np.isnan(predicted[0, :24]).all()
    _close(predicted[:, 24:], [[t - 22.5 for t in range(24, 48)]])


def test_seasonal_naive_has_no_basis_for_horizons_longer_than_a_day() -> None:
    # given three days of hourly steps and a 25-hour horizon, whose day-old target is not yet realised at t
    load = np.ones((1, 72))

    # when the seasonal naive predicts
    predicted = seasonal_naive_24h(load, step_s=HOUR, horizon_steps=25)

    # then it abstains rather than peek
    assert np.isnan(predicted).all()


def test_always_zero_predicts_zero_even_without_data() -> None:
    load = np.array([[NAN, 0.5, NAN]])
    _close(always_zero(load, step_s=60, horizon_steps=3), [[0.0, 0.0, 0.0]])


def test_the_registry_names_every_baseline_with_one_signature() -> None:
    # given a panel
    load = np.random.default_rng(0).uniform(size=(2, 30))

    # when every baseline predicts with the same keywords
    predictions = {name: fn(load, step_s=QUARTER_HOUR, horizon_steps=2) for name, fn in BASELINES.items()}

    # then all six are there and each returns a float panel of the input's shape
    assert set(predictions) == {
        "last_value",
        "mean_last_hour",
        "ewma_last_hour",
        "p90_last_hour",
        "seasonal_naive_24h",
        "always_zero",
    }
    for predicted in predictions.values():
        assert predicted.shape == (2, 30) and predicted.dtype == np.float64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step_s": 7, "horizon_steps": 1}, "does not divide"),
        ({"step_s": 0, "horizon_steps": 1}, "step_s"),
        ({"step_s": 60, "horizon_steps": 0}, "horizon_steps"),
    ],
)
def test_baselines_reject_a_grid_they_cannot_read(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mean_last_hour(np.zeros((1, 5)), **kwargs)


def test_a_panel_must_be_two_dimensional_and_finite() -> None:
    with pytest.raises(ValueError, match="panel"):
        future_mean(np.zeros(5), 1)
    with pytest.raises(ValueError, match="infinite"):
        future_mean(np.array([[0.0, np.inf]]), 1)


def _random_panel(rng: np.random.Generator, n_series: int, n_steps: int) -> np.ndarray:
    load = rng.uniform(0.0, 1.0, size=(n_series, n_steps))
    load[rng.uniform(size=load.shape) < 0.25] = NAN  # scattered gaps
    load[rng.uniform(size=load.shape) < 0.2] = 0.0  # idle samples
    load[0, : n_steps // 5] = NAN  # a series that starts late
    return load


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize(
    ("step_s", "n_steps", "horizon_steps"),
    [(QUARTER_HOUR, 230, 1), (QUARTER_HOUR, 230, 4), (HOUR, 60, 3), (HOUR, 60, 24)],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_baseline_reads_past_t(
    name: str, step_s: int, n_steps: int, horizon_steps: int, seed: int
) -> None:
    # given a random panel (with gaps, idle samples and a late start) and a cut point
    rng = np.random.default_rng(seed)
    load = _random_panel(rng, 3, n_steps)
    baseline = BASELINES[name]
    predicted = baseline(load, step_s=step_s, horizon_steps=horizon_steps)

    for t in rng.integers(0, n_steps - 1, size=4):
        # when everything after t is replaced by other data (other values, other gaps), or cut off
        changed = load.copy()
        changed[:, t + 1 :] = _random_panel(rng, 3, n_steps)[:, t + 1 :] * 10.0
        after_change = baseline(changed, step_s=step_s, horizon_steps=horizon_steps)
        truncated = baseline(load[:, : t + 1], step_s=step_s, horizon_steps=horizon_steps)

        # then the predictions up to t are the same, bit for bit
        np.testing.assert_array_equal(after_change[:, : t + 1], predicted[:, : t + 1])
        np.testing.assert_array_equal(truncated, predicted[:, : t + 1])
