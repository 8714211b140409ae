"""Online expert weighting: hand-computed pinball losses, Hedge and follow-the-leader weights, and the combination."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting import calibration, experts
from slicewise.forecasting.experts import ExpertRule

NAN = math.nan


def test_losses_weights_and_the_leader_by_hand() -> None:
    # Two known windows, realised 1 and 0. Expert A is exact; B says 0 twice (under by 1 once: 0.9 x 1 at the
    # P90, 0 the other time, mean 0.45); C has no forecast.
    actual = np.array([1.0, 0.0])
    forecasts = np.array([[1.0, 0.0, NAN], [0.0, 0.0, NAN]])
    losses = experts.pinball_losses(actual, forecasts, 0.9)
    assert losses[:2].tolist() == pytest.approx([0.0, 0.45])
    assert math.isnan(losses[2])
    # Losses over their mean (0.225): 0 and 2, so eta 1 gives A e^0 and B e^-2, normalised; C nothing.
    hedge = experts.weights(losses, ExpertRule("hedge", eta=1.0))
    e = math.exp(-2.0)
    assert hedge.tolist() == pytest.approx([1 / (1 + e), e / (1 + e), 0.0])
    # eta 0: the plain average of the experts with a loss; the leader: all on A.
    assert experts.weights(losses, ExpertRule("hedge", eta=0.0)).tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert experts.weights(losses, ExpertRule("leader")).tolist() == [1.0, 0.0, 0.0]
    # A very large eta stays finite and picks the leader too.
    assert experts.weights(losses, ExpertRule("hedge", eta=1e6)).tolist() == pytest.approx([1.0, 0.0, 0.0])
    # No expert with a known loss: no weight at all.
    assert experts.weights(np.array([NAN, NAN]), ExpertRule("leader")).tolist() == [0.0, 0.0]


def test_combination_renormalises_over_the_experts_present() -> None:
    weight = np.array([0.75, 0.25, 0.0])
    forecasts = np.array([[0.2, 0.4, NAN], [NAN, 0.4, 1.0], [NAN, NAN, 1.0]])
    combined = experts.combine(forecasts, weight)
    # 0.75 x 0.2 + 0.25 x 0.4; only B where A is missing (C has no weight); nothing where only C forecasts.
    assert combined[:2].tolist() == pytest.approx([0.25, 0.4])
    assert math.isnan(combined[2])


def test_weights_are_fitted_per_quantile_and_the_result_does_not_cross() -> None:
    # History: realised 1.0 twice. At P50 expert 0 (forecast 1.0) is exact and expert 1 (0.5) is off; at P90
    # expert 1 (2.0, over by 1) costs 0.1 and expert 0 (0.5, under by 0.5) costs 0.45.
    history = np.array([[[1.0, 0.5], [0.5, 2.0]]] * 2)  # (windows, quantiles, experts)
    scored = np.array([[[0.8, 0.0], [0.1, 0.7]]])
    forecast, fitted, correction = experts.combined_quantiles(
        np.array([1.0, 1.0]), history, scored, (0.5, 0.9), ExpertRule("leader")
    )
    assert fitted.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert correction.tolist() == [0.0, 0.0]  # the rule does not recalibrate
    # P50 from expert 0 (0.8), P90 from expert 1 (0.7) -> raised to the P50: no crossing.
    assert forecast[0].tolist() == pytest.approx([0.8, 0.8])


def test_a_mix_that_under_covers_is_shifted_up_to_cover_its_level_on_the_known_windows() -> None:
    # One expert, so the mix is its forecast: 0.5 for both quantiles on 100 known windows realised 0.01 .. 1.00,
    # so its P90 covers only half of them. The shift is the tau-quantile of actual - mix (the smallest
    # residual with tau of them at or below it): the 90th of -0.49 .. 0.50, 0.40, and the 50th, 0.00.
    actual = np.arange(1, 101) / 100
    history = np.full((100, 2, 1), 0.5)
    scored = np.array([[[0.3], [0.5]], [[0.1], [0.6]]])
    rule = ExpertRule("leader", recalibrate="shift")
    forecast, fitted, correction = experts.combined_quantiles(actual, history, scored, (0.5, 0.9), rule)
    assert fitted.tolist() == [[1.0], [1.0]]
    assert correction.tolist() == pytest.approx([0.0, 0.4])
    assert forecast.ravel().tolist() == pytest.approx([0.3, 0.9, 0.1, 1.0])
    # On the known windows the shifted P90 (0.9) covers exactly 90 % of them.
    assert np.mean(actual <= 0.5 + correction[1]) == pytest.approx(0.9)
    # Known windows spanning less than the rule's min_hours: no correction; at least that long: the same one.
    guarded = ExpertRule("leader", recalibrate="shift", min_hours=2.0)
    short = experts.combined_quantiles(actual, history, scored, (0.5, 0.9), guarded, history_hours=1.5)
    assert short[2].tolist() == [0.0, 0.0] and short[0].ravel().tolist() == pytest.approx(
        [0.3, 0.5, 0.1, 0.6]
    )
    long = experts.combined_quantiles(actual, history, scored, (0.5, 0.9), guarded, history_hours=2.0)
    assert long[2].tolist() == pytest.approx([0.0, 0.4])
    # Fewer than MIN_WINDOWS known windows: no correction.
    few = experts.corrections(actual[:49], history[:49, :, 0], (0.5, 0.9), experts.SHIFT)
    assert few.tolist() == [0.0, 0.0]
    # A shift never takes a forecast below 0, and the quantiles stay uncrossed.
    shifted = experts.recalibrated(np.array([[0.1, 0.2]]), np.array([-0.3, -0.15]), experts.SHIFT)
    assert shifted[0].tolist() == pytest.approx([0.0, 0.05])


def test_the_scale_correction_is_the_quantile_of_the_ratio_within_the_calibration_limit() -> None:
    actual = np.arange(1, 101) / 100
    # P90 0.8 under-covers (80 %): the 90th ratio is 0.90 / 0.8 = 1.125, so the factor is 1.125, and 0.8 x 1.125
    # = 0.9 covers 90 %. P50 1.0 over-covers: the 50th ratio is 0.5, below e^-0.5, so the factor is clipped.
    mix = np.tile([1.0, 0.8], (100, 1))
    correction = experts.corrections(actual, mix, (0.5, 0.9), experts.SCALE)
    assert correction.tolist() == pytest.approx([-calibration.LIMIT, math.log(1.125)])
    out = experts.recalibrated(mix[:1], correction, experts.SCALE)
    assert out[0].tolist() == pytest.approx([math.exp(-0.5), 0.9])
    assert np.mean(actual <= out[0, 1] + 1e-12) == pytest.approx(0.9)
    # A P90 of 0.5: the ratio 1.8 is beyond e^0.5, so the factor stops at the limit.
    low = experts.corrections(actual, np.full((100, 2), 0.5), (0.5, 0.9), experts.SCALE)
    assert low[1] == pytest.approx(calibration.LIMIT)
    # No recalibration: no correction, the mix as it is.
    assert experts.corrections(actual, mix, (0.5, 0.9), experts.NONE).tolist() == [0.0, 0.0]


def test_the_fleet_trend_is_its_last_quarter_hour_over_its_last_hour_and_buckets_into_turns() -> None:
    from slicewise.forecasting.windows import FEATURES

    fleet = FEATURES.index("fleet_load")
    inputs = np.zeros((3, 90, len(FEATURES)))
    # Hour steps 8: the last 8 steps of the window, and of those the last 2 (a quarter).
    inputs[0, -8:, fleet] = [1, 1, 1, 1, 1, 1, 0.5, 0.5]  # hour mean 7/8, quarter 0.5: 4/7
    inputs[1, -8:, fleet] = [0.2] * 6 + [0.4, 0.4]  # hour 0.25, quarter 0.4: 1.6
    inputs[1, :-8, fleet] = 9.0  # before the hour: not read
    trend = experts.fleet_trend(inputs, 8)
    assert trend[:2].tolist() == pytest.approx([4 / 7, 1.6])
    assert math.isnan(trend[2])  # an idle fleet has no turn
    # Band 0.1: 4/7 is a fall, 1.6 a rise, no trend neither; 0.95 and 1.05 within the band, 0.9 on its edge.
    assert experts.turns(trend, 0.1).tolist() == [0, 2, 1]
    assert experts.turns(np.array([0.95, 1.05, 0.9, 1.1]), 0.1).tolist() == [1, 1, 0, 2]
    assert experts.TURNS[0] == "fall" and experts.TURNS[2] == "rise"
    # Hour span, hour steps 4: the last 4 steps' mean over the 4 before them; a window of 6 has only 2 before.
    hourly = np.zeros((2, 6, len(FEATURES)))
    hourly[0, :, fleet] = [9, 9, 1, 1, 2, 2]  # last 4: 1.5; the 4 before: the window's first 2 only, 9
    hourly[1, :, fleet] = [0, 0, 1, 1, 1, 1]  # nothing before the hour: no trend
    assert experts.fleet_trend(hourly, 4, "hour")[0] == pytest.approx(1.5 / 9)
    assert math.isnan(experts.fleet_trend(hourly, 4, "hour")[1])
    # A window that is the hour itself has none before it.
    assert math.isnan(experts.fleet_trend(hourly[:, -4:], 4, "hour")[0])


def test_a_trend_rule_shifts_falls_and_rises_apart_and_a_thin_turn_takes_the_pooled_shift() -> None:
    # The model alone (weight 1 on it, whatever the baselines' losses): P50 0.5 and P90 0.6 on 200 known
    # windows. In the 100 falls the load came in at 0.31 .. 0.40 (the model lagged, too high); in the 100 rises
    # at 0.61 .. 0.70 (too low). Per turn, the P90's shift is the 90th of actual - 0.6: -0.21 in falls
    # (0.39 - 0.6) and +0.09 in rises (0.69 - 0.6); pooled, the 90th of all 200, +0.08 (0.68 - 0.6).
    actual = np.concatenate([0.30 + np.arange(1, 101) / 1000, 0.60 + np.arange(1, 101) / 1000])
    history = np.zeros((200, 2, 2))
    history[:, :, 0] = [0.5, 0.6]
    history[:, :, 1] = 0.35  # a baseline better than the model on the falls: no weight for the model rule
    trend = np.concatenate([np.full(100, 0.5), np.full(100, 1.5)])
    scored = np.zeros((3, 2, 2))
    scored[:, :, 0] = [0.5, 0.6]
    scored_trend = np.array([0.5, 1.5, 1.0])
    rule = ExpertRule("model", hours=0.0, recalibrate="shift", trend=0.1)
    forecast, fitted, by_turn = experts.combined_quantiles(
        actual, history, scored, (0.5, 0.9), rule, history_trend=trend, scored_trend=scored_trend
    )
    assert fitted.tolist() == [[1.0, 0.0], [1.0, 0.0]]
    # Rows fall, neither, rise. Neither has no known window: it takes the pooled shift (P50: the median of
    # actual - 0.5, 0.40 - 0.5 = -0.10 among 200 windows, the 100th smallest).
    assert by_turn[0].tolist() == pytest.approx([0.35 - 0.5, 0.39 - 0.6])
    assert by_turn[2].tolist() == pytest.approx([0.65 - 0.5, 0.69 - 0.6])
    assert by_turn[1].tolist() == pytest.approx([0.40 - 0.5, 0.68 - 0.6])
    assert forecast.ravel().tolist() == pytest.approx([0.35, 0.39, 0.65, 0.69, 0.40, 0.68])
    # Each turn's P90 covers 90 % of that turn's known windows, which the pooled shift does not do for falls.
    assert np.mean(actual[:100] <= 0.6 + by_turn[0, 1] + 1e-12) == pytest.approx(0.9)
    assert np.mean(actual[:100] <= 0.6 + by_turn[1, 1]) == 1.0
    # Without the trends there is nothing to bucket by.
    with pytest.raises(ValueError, match="trends"):
        experts.combined_quantiles(actual, history, scored, (0.5, 0.9), rule)


def test_known_windows_are_those_whose_target_lies_before_the_cut() -> None:
    step = np.arange(10)
    # Cut 8, horizon 2: a window ending at step s has its target by s + 2, known before 8 for s < 6.
    assert np.flatnonzero(experts.known_before(step, 8, 2)).tolist() == [0, 1, 2, 3, 4, 5]
    # The last 2 steps of those only.
    assert np.flatnonzero(experts.known_before(step, 8, 2, span_steps=2)).tolist() == [4, 5]


@pytest.mark.parametrize("mode", ["shift", "scale"])
def test_a_target_after_the_cut_does_not_change_the_weights_or_the_correction(mode: str) -> None:
    rng = np.random.default_rng(0)
    step = np.arange(300)
    actual = rng.uniform(0.2, 0.8, size=300)
    forecasts = rng.uniform(0.1, 0.9, size=(300, 2, 3))
    scored = rng.uniform(0.1, 0.9, size=(20, 2, 3))
    rule = ExpertRule("hedge", eta=5.0, hours=0.0, recalibrate=mode)

    def fit(realised: np.ndarray) -> tuple[np.ndarray, ...]:
        known = experts.known_before(step, 250, 5)
        return experts.combined_quantiles(realised[known], forecasts[known], scored, (0.5, 0.9), rule)

    before = fit(actual)
    later = actual.copy()
    later[245:] = 10.0  # targets reaching the cut or beyond: a burst the forecaster cannot have seen
    for a, b in zip(before, fit(later), strict=True):
        assert np.array_equal(a, b)
    earlier = actual.copy()
    earlier[:100] = 10.0  # the same burst among the known windows moves the correction
    assert not np.array_equal(before[2], fit(earlier)[2])


def test_rule_names_and_bad_rules() -> None:
    assert ExpertRule("hedge", eta=2.0, hours=1.0).name == "lstm_hedge2_1h"
    assert ExpertRule("leader", hours=0.0).name == "lstm_leader_all"
    with pytest.raises(ValueError, match="kind"):
        ExpertRule("median")
    with pytest.raises(ValueError, match="negative"):
        ExpertRule("hedge", eta=-1.0)
    assert ExpertRule("hedge", eta=20.0, hours=0.0, recalibrate="shift").name == "lstm_hedge20_all_shift"
    assert ExpertRule("leader", recalibrate="scale").name == "lstm_leader_1h_scale"
    assert ExpertRule("leader", recalibrate="shift", min_hours=2.0).name == "lstm_leader_1h_shift_min2h"
    with pytest.raises(ValueError, match="negative"):
        ExpertRule("leader", recalibrate="shift", min_hours=-1.0)
    with pytest.raises(ValueError, match="recalibrate"):
        ExpertRule("hedge", recalibrate="conformal")
    assert ExpertRule("model", hours=0.0, recalibrate="shift", min_hours=2.0, trend=0.1).name == (
        "lstm_model_all_shift_min2h_trend0.1"
    )
    assert ExpertRule("hedge", eta=5.0, recalibrate="scale", trend=0.25, trend_span="hour").name == (
        "lstm_hedge5_1h_scale_hourtrend0.25"
    )
    with pytest.raises(ValueError, match="trend_span"):
        ExpertRule("model", recalibrate="shift", trend=0.1, trend_span="day")
    with pytest.raises(ValueError, match="trend band needs a recalibration"):
        ExpertRule("model", trend=0.1)
    with pytest.raises(ValueError, match="negative"):
        ExpertRule("model", recalibrate="shift", trend=-0.1)


def test_a_rolling_origin_backtest_scores_each_rule_with_weights_fitted_before_the_cut(
    tmp_path: Path,
) -> None:
    pytest.importorskip("keras")
    import pandas as pd
    import yaml

    from slicewise.forecasting.backtest import panel_from_long, run_backtest
    from slicewise.forecasting.baselines import BASELINES
    from slicewise.forecasting.spec import parse_spec
    from tests.support.forecasting import synthetic_csv, tiny_spec_file

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path))
    rules = [
        ExpertRule("leader"),
        ExpertRule("hedge", eta=0.0, hours=0.0),
        ExpertRule("hedge", eta=5.0, hours=0.0, recalibrate="shift"),
        ExpertRule("leader", hours=0.0, recalibrate="scale"),
        ExpertRule("hedge", eta=5.0, hours=0.0, recalibrate="shift", min_hours=2.0),
        ExpertRule("model", hours=0.0, recalibrate="shift", trend=0.05),
        ExpertRule("model", hours=0.0, recalibrate="scale", trend=0.05, trend_span="hour"),
    ]
    # Training bounded by its epochs, not the clock: a time budget stops a slow run (a loaded machine) an epoch
    # earlier than a fast one, and the two runs below must train the same models to compare their weights.
    unbounded = 1e9
    result = run_backtest(panel, spec, 0.5, 15, folds=3, expert_rules=rules, time_budget_s=unbounded)
    for fold in result["folds"]:
        for rule in rules:
            scores = fold["models"][rule.name]
            assert scores["n"] == fold["models"]["lstm"]["n"] > 0
            assert math.isfinite(scores["pinball_p90"]) and math.isfinite(scores["mae"])
            for mix in fold["expert_weights"][rule.name].values():
                assert len(mix) == 1 + len(BASELINES) and sum(mix) == pytest.approx(1.0, abs=1e-3)
        leader = fold["expert_weights"]["lstm_leader_1h"]["p90"]
        assert sorted(leader)[-1] == 1.0 and sorted(leader)[-2] == 0.0
        # eta 0: the plain average of every expert with a forecast on the known windows (less than a day of
        # history: the seasonal baseline has none).
        uniform = fold["expert_weights"]["lstm_hedge0_all"]["p90"]
        assert uniform[list(BASELINES).index("seasonal_naive_24h") + 1] == 0.0
        assert set(uniform) == {0.0, round(1 / len(BASELINES), 4)}
        assert set(fold["expert_corrections"]) == {
            "lstm_hedge5_all_shift",
            "lstm_leader_all_scale",
            "lstm_hedge5_all_shift_min2h",
            "lstm_model_all_shift_trend0.05",
            "lstm_model_all_scale_hourtrend0.05",
        }
        per_turn_rules = {"lstm_model_all_shift_trend0.05", "lstm_model_all_scale_hourtrend0.05"}
        for name, correction in fold["expert_corrections"].items():
            assert all(math.isfinite(c) for c in correction.values())
            if name in per_turn_rules:
                assert set(correction) == {f"p{q}_{turn}" for q in (50, 90) for turn in experts.TURNS}
            else:
                assert set(correction) == {"p50", "p90"}
        assert fold["expert_weights"]["lstm_model_all_shift_trend0.05"]["p90"] == [1.0] + [0.0] * len(
            BASELINES
        )
    # Before the first cut only the calibration hour is known: too short a span for min_hours 2.
    assert result["folds"][0]["expert_corrections"]["lstm_hedge5_all_shift_min2h"] == {"p50": 0.0, "p90": 0.0}
    # No lookahead: a burst from the last cut on (targets no fold's fit could know) changes what the last fold
    # scores, but no fold's weights or corrections.
    last_cut = result["folds"][-1]["cut"]
    load = panel.load.copy()
    load[:, last_cut:] = 1.0
    burst = run_backtest(
        dataclasses.replace(panel, load=load),
        spec,
        0.5,
        15,
        folds=3,
        expert_rules=rules,
        time_budget_s=unbounded,
    )
    for fold, other in zip(result["folds"], burst["folds"], strict=True):
        assert other["expert_weights"] == fold["expert_weights"]
        assert other["expert_corrections"] == fold["expert_corrections"]
    assert (
        burst["folds"][-1]["models"]["lstm_hedge5_all_shift"]
        != result["folds"][-1]["models"]["lstm_hedge5_all_shift"]
    )
