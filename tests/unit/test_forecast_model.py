"""The Keras quantile LSTM: shapes, non-crossing quantiles, learning, and a safe save/load round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting.windows import FEATURES
from tests.support.forecasting import tiny_spec

keras = pytest.importorskip("keras")
model_module = pytest.importorskip("slicewise.forecasting.model")


@pytest.mark.parametrize("kind", ["lstm", "lstm_attention"])
def test_output_shape_and_quantiles_never_cross_even_untrained(kind: str) -> None:
    spec = tiny_spec(kind)
    model = model_module.build_model(spec)
    inputs = np.random.default_rng(0).normal(size=(256, 8, len(FEATURES))).astype("float32") * 5
    out = model_module.predict(model, inputs)
    assert out.shape == (256, 2, len(spec.quantiles))
    assert (np.diff(out, axis=-1) >= 0).all()


def test_pinball_loss_weights_under_prediction_by_the_quantile() -> None:
    loss = model_module.PinballLoss((0.9,))
    under = float(loss(np.array([[1.0]]), np.array([[[0.0]]])))
    over = float(loss(np.array([[0.0]]), np.array([[[1.0]]])))
    assert under == pytest.approx(0.9) and over == pytest.approx(0.1)


def test_training_learns_a_load_level_and_its_spread() -> None:
    keras.utils.set_random_seed(3)
    spec = tiny_spec()
    rng = np.random.default_rng(3)
    inputs = np.zeros((2048, 8, len(FEATURES)), dtype="float32")
    level = rng.choice([0.2, 0.7], size=2048)
    for name in ("load", "hour_mean", "hour_p90"):  # a steady load: its hour's mean and P90 are the level
        inputs[:, :, FEATURES.index(name)] = level[:, None]
    inputs[:, :, FEATURES.index("observed")] = 1.0
    targets = np.clip(level[:, None] + rng.normal(0, 0.05, size=(2048, 2)), 0, 1).astype("float32")
    model = model_module.build_model(spec)
    before = model.evaluate(inputs, targets, verbose=0)
    model.fit(inputs, targets, epochs=15, batch_size=128, verbose=0)
    after = model.evaluate(inputs, targets, verbose=0)
    # The untrained head already forecasts the level (its anchors); training must learn the spread above it.
    assert after < 0.8 * before
    pred = model_module.predict(model, inputs[:4])
    for i in range(4):
        assert pred[i, :, 0] == pytest.approx([level[i]] * 2, abs=0.06)  # median near the level
        assert (pred[i, :, 1] - pred[i, :, 0] > 0.02).all()  # P90 above P50 by roughly the noise


def test_a_saved_model_loads_in_safe_mode_with_the_same_predictions(tmp_path: Path) -> None:
    spec = tiny_spec("lstm_attention")
    model = model_module.build_model(spec)
    inputs = np.random.default_rng(1).random((16, 8, len(FEATURES))).astype("float32")
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode=True: no Python lambdas inside
    np.testing.assert_allclose(
        model_module.predict(loaded, inputs), model_module.predict(model, inputs), rtol=1e-5
    )


def test_empty_input_predicts_nothing() -> None:
    model = model_module.build_model(tiny_spec())
    assert model_module.predict(model, np.empty((0, 8, len(FEATURES)), "float32")).shape == (0, 2, 2)


def test_forecasts_scale_with_the_load() -> None:
    """Scale-free inputs and a multiplicative head: the same history at a tenth of the load, a tenth the forecast."""
    spec = tiny_spec()
    model = model_module.build_model(spec)
    rng = np.random.default_rng(4)
    inputs = np.zeros((64, 8, len(FEATURES)), dtype="float32")
    for name in ("load", "hour_mean", "hour_p90"):
        inputs[:, :, FEATURES.index(name)] = rng.uniform(0.3, 0.9, size=(64, 8))
    inputs[:, :, FEATURES.index("observed")] = 1.0
    quiet = inputs.copy()
    for name in ("load", "hour_mean", "hour_p90"):
        quiet[:, :, FEATURES.index(name)] /= 10
    np.testing.assert_allclose(
        model_module.predict(model, quiet), model_module.predict(model, inputs) / 10, rtol=0.02, atol=1e-4
    )


def test_anchors_are_the_baselines_at_the_window_end() -> None:
    from slicewise.forecasting.baselines import ewma_last_hour, mean_last_hour, p90_last_hour
    from slicewise.forecasting.windows import Panel, make_windows

    rng = np.random.default_rng(5)
    load = rng.random((2, 300))
    load[0, 250:260] = np.nan  # a gap: the last value is the newest observed one
    spec = dataclasses.replace(tiny_spec(), window_steps=240, min_observed_steps=10, horizons_minutes=(15,))
    panel = Panel([("h", i, "") for i in range(2)], 60 * np.arange(300), load, np.zeros_like(load), 60)
    windows = make_windows(panel, spec, first_step=259, stride=1000, require_targets=False)
    anchors = keras.ops.convert_to_numpy(model_module.WindowAnchors(60)(windows.inputs))
    at = {"step_s": 60, "horizon_steps": 1}
    row, step = windows.series, windows.step
    expected = {
        "last_value": [load[0, 249], load[1, 259]],
        "hour_mean": mean_last_hour(load, **at)[row, step],
        "hour_ewma": ewma_last_hour(load, **at)[row, step],
        "hour_p90": p90_last_hour(load, **at)[row, step],
        "hour_max": np.nanmax(load[:, 200:260], axis=1)[row],
    }
    for i, name in enumerate(model_module.ANCHORS):
        np.testing.assert_allclose(anchors[:, i], expected[name], rtol=2e-3, err_msg=name)


def test_a_model_built_for_fewer_features_is_recognised_as_reading_other_inputs() -> None:
    current = model_module.build_model(tiny_spec())
    assert model_module.reads_current_features(current)
    older = keras.Sequential(
        [keras.Input((8, len(FEATURES) - 1)), keras.layers.LSTM(2), keras.layers.Dense(1)]
    )
    assert not model_module.reads_current_features(older)
