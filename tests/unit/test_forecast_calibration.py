"""Online quantile calibration: factors fitted by hand-checkable coverage, carried inside the saved model, and a
rolling-origin backtest that updates the model between folds."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting import calibration
from slicewise.forecasting.backtest import fold_cuts


def test_each_quantile_is_rescaled_to_cover_its_level_of_the_newest_windows() -> None:
    # 100 windows forecast at 1.0 (P50 and P90 alike), realised 0.01, 0.02, ..., 1.00.
    actual = (np.arange(1, 101) / 100.0)[:, None]
    predicted = np.ones((100, 1, 2))
    factors = calibration.fit_log_factors(predicted, actual, (0.5, 0.9))
    # 50 % of the realised loads are <= 0.50, 90 % <= 0.90: the P50 becomes 0.5, the P90 0.9.
    assert np.exp(factors) == pytest.approx(np.array([[0.5, 0.9]]))
    calibrated = calibration.apply(predicted, factors)
    assert (actual[:, 0] <= calibrated[:, 0, 1]).mean() == pytest.approx(0.9)


def test_too_few_windows_leave_a_quantile_alone_and_one_odd_hour_cannot_scale_it_without_bound() -> None:
    few = calibration.fit_log_factors(np.ones((49, 1, 1)), np.full((49, 1), 0.2), (0.9,))
    assert few.tolist() == [[0.0]]
    # Realised loads ten times the forecast: one hour's fit is clipped at e^2.
    burst = calibration.fit_log_factors(np.full((100, 1, 1), 0.1), np.ones((100, 1)), (0.9,))
    assert burst.tolist() == [[calibration.FIT_LIMIT]]
    # A zero forecast says nothing about the scale: left out of the fit.
    mixed = np.concatenate([np.zeros((60, 1, 1)), np.ones((60, 1, 1))])
    realised = np.concatenate([np.full((60, 1), 5.0), np.full((60, 1), 0.5)])
    assert np.exp(calibration.fit_log_factors(mixed, realised, (0.9,)))[0, 0] == pytest.approx(0.5)


def test_each_update_moves_halfway_to_the_newest_fit_within_the_limit() -> None:
    previous = np.array([[0.2, -0.1, 0.3]])
    fitted = np.array([[0.4, 2.0, 0.0]])  # the last cell had too few windows to fit
    moved = calibration.update(previous, fitted, 0.5)
    # 0.2 -> 0.3 (halfway to 0.4); -0.1 -> 0.95, clipped at 0.5; no fit keeps 0.3.
    assert moved[0].tolist() == pytest.approx([0.3, calibration.LIMIT, 0.3])
    # Gain 0 (the shipped spec): the calibration never moves.
    assert calibration.update(previous, fitted, 0.0).tolist() == previous.tolist()


def test_a_fit_within_the_dead_band_counts_as_no_correction() -> None:
    previous = np.array([[0.2, 0.2, 0.3]])
    fitted = np.array([[0.05, -0.3, 0.0]])  # within the band, outside it, no fit
    # Gain 1, band 0.1: 0.05 is noise (-> identity 0), -0.3 is applied, the unfitted cell keeps 0.3.
    assert calibration.update(previous, fitted, 1.0, 0.1)[0].tolist() == pytest.approx([0.0, -0.3, 0.3])
    # Gain 0.5: halfway from 0.2 to 0 and from 0.2 to -0.3.
    assert calibration.update(previous, fitted, 0.5, 0.1)[0].tolist() == pytest.approx([0.1, -0.05, 0.3])
    # No band (the default): 0.05 counts.
    assert calibration.update(previous, fitted, 1.0)[0].tolist() == pytest.approx([0.05, -0.3, 0.3])


def test_pooled_hours_fit_the_quantile_of_all_their_windows() -> None:
    import dataclasses

    from slicewise.forecasting.training import calibration_first_step
    from tests.support.forecasting import tiny_spec

    spec = tiny_spec()
    # One hour (the default): the windows after training only; six hours on a 60 s grid: 5 x 60 steps earlier.
    assert calibration_first_step(spec, 1000, 60) == 1000
    six = dataclasses.replace(spec, calibration_hours=6)
    assert calibration_first_step(six, 1000, 60) == 700
    assert calibration_first_step(six, 200, 60) == 0
    # An older hour whose loads came in at half the forecast, the newest at 1.5 times, 50 windows each: the
    # pooled P50 is the 50th of the 100 sorted ratios (0.5), the P90 the 90th (1.5); the newest hour alone
    # would give 1.5 for both.
    predicted = np.ones((100, 1, 2))
    actual = np.concatenate([np.full((50, 1), 0.5), np.full((50, 1), 1.5)])
    pooled = calibration.fit_log_factors(predicted, actual, (0.5, 0.9))
    assert np.exp(pooled)[0].tolist() == pytest.approx([0.5, 1.5])


def test_calibrated_quantiles_never_cross() -> None:
    predicted = np.array([[[0.4, 0.5]]])
    crossed = calibration.apply(predicted, np.log(np.array([[1.5, 0.8]])))
    assert crossed[0, 0].tolist() == pytest.approx([0.6, 0.6])


def test_rolling_origin_cuts_split_the_rest_evenly() -> None:
    assert fold_cuts(100, 60, 1) == [60, 100]
    assert fold_cuts(100, 60, 4) == [60, 70, 80, 90, 100]
    with pytest.raises(ValueError, match="folds"):
        fold_cuts(100, 60, 0)


keras = pytest.importorskip("keras")


def test_the_calibration_is_part_of_the_saved_model(tmp_path: Path) -> None:
    from slicewise.forecasting import model as model_module
    from slicewise.forecasting.windows import FEATURES
    from tests.support.forecasting import tiny_spec

    spec = tiny_spec()
    model = model_module.build_model(spec)
    inputs = np.random.default_rng(0).uniform(size=(64, 8, len(FEATURES))).astype("float32")
    inputs[:, :, FEATURES.index("observed")] = 1.0
    raw = model_module.predict(model, inputs)
    factors = np.log(np.array([[0.8, 1.2], [1.0, 1.5]])[:, : len(spec.quantiles)])
    model_module.set_calibration(model, factors)
    calibrated = model_module.predict(model, inputs)
    np.testing.assert_allclose(calibrated, calibration.apply(raw, factors), rtol=1e-5, atol=1e-7)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)  # safe mode: the layer is a registered Keras object
    np.testing.assert_allclose(model_module.calibration_of(loaded), factors, rtol=1e-6)
    np.testing.assert_allclose(model_module.predict(loaded, inputs), calibrated, rtol=1e-5, atol=1e-7)
    # A version registered before calibration existed gets an identity calibration, same forecasts.
    plain = keras.Model(model.inputs, model.get_layer("quantiles").output)
    wrapped = model_module.with_calibration(plain)
    assert model_module.calibration_of(wrapped).tolist() == np.zeros(factors.shape).tolist()
    np.testing.assert_allclose(model_module.predict(wrapped, inputs), raw, rtol=1e-5, atol=1e-7)


def test_the_advice_is_the_fit_of_the_model_as_trained_and_leaves_its_factors_alone(tmp_path: Path) -> None:
    import pandas as pd

    from slicewise.forecasting import model as model_module
    from slicewise.forecasting.backtest import panel_from_long
    from slicewise.forecasting.training import calibrate, calibration_advice
    from tests.support.forecasting import synthetic_csv, tiny_spec

    csv = synthetic_csv(tmp_path / "trace.csv", hours=4, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec = dataclasses.replace(tiny_spec(), min_observed_steps=4)  # of its 8-step windows
    model = model_module.build_model(spec)
    champions = np.full((len(spec.horizons_minutes), len(spec.quantiles)), 0.3)
    model_module.set_calibration(model, champions)
    first, end = panel.load.shape[1] // 2, panel.load.shape[1]

    advice = calibration_advice(model, panel, spec, first, end)

    np.testing.assert_allclose(model_module.calibration_of(model), champions, rtol=1e-6)  # left alone
    # The same fit as a calibration of the model as trained would make on those windows, with the full gain.
    full = dataclasses.replace(spec, calibration_gain=1.0)
    _, fitted = calibrate(model, panel, full, first, end)
    assert np.abs(advice).max() > 0
    np.testing.assert_allclose(advice, fitted, rtol=1e-6)
    assert calibration_advice(model, panel, spec, end, end).tolist() == np.zeros_like(champions).tolist()


def test_a_rolling_origin_backtest_updates_and_recalibrates_before_each_fold(tmp_path: Path) -> None:
    import pandas as pd
    import yaml

    from slicewise.forecasting.backtest import panel_from_long, run_backtest
    from slicewise.forecasting.spec import parse_spec
    from tests.support.forecasting import synthetic_csv, tiny_spec_file

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = parse_spec({**yaml.safe_load(spec_path.read_text()), "calibration_gain": 0.5}, str(spec_path))
    result = run_backtest(panel, spec, 0.5, 15, folds=3)
    folds = result["folds"]
    assert [f["cut"] for f in folds] == fold_cuts(panel.load.shape[1], result["split_step"], 3)[:-1]
    assert all(f["test_windows"] > 0 and f["epochs"] >= 1 for f in folds)
    # Each fold has its own calibration, fitted on the hour before its cut: half way from the last fold's.
    assert all(set(f["calibration"]) == set(f["calibration_fit"]) == {"p50", "p90"} for f in folds)
    first_fit = folds[0]["calibration_fit"]["p90"]
    assert first_fit != 0 and folds[0]["calibration"]["p90"] == pytest.approx(
        max(-calibration.LIMIT, min(calibration.LIMIT, first_fit / 2)), abs=1e-4
    )
    # The top-level metrics are each metric's median over the folds.
    p90 = sorted(f["models"]["lstm"]["pinball_p90"] for f in folds)
    assert result["models"]["lstm"]["pinball_p90"] == pytest.approx(p90[1])
    assert result["test_windows"] == sum(f["test_windows"] for f in folds)
    assert math.isfinite(result["models"]["lstm_uncalibrated"]["pinball_p90"])
