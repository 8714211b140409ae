"""The Keras quantile LSTM: shapes, non-crossing quantiles, learning, and a safe save/load round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting.spec import Architecture, ForecasterSpec, load_specs
from slicewise.forecasting.windows import FEATURES

keras = pytest.importorskip("keras")
model_module = pytest.importorskip("slicewise.forecasting.model")


def tiny_spec(kind: str = "lstm") -> ForecasterSpec:
    base = load_specs()[0]
    return dataclasses.replace(
        base,
        window_steps=8,
        horizons_minutes=(15, 60),
        architecture=Architecture(kind=kind, lstm_units=8, dense_units=8, dropout=0.0),
        training=dataclasses.replace(base.training, learning_rate=0.02, batch_size=64),
    )


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
    inputs[:, :, 0] = level[:, None]
    inputs[:, :, 1] = 1.0
    targets = np.clip(level[:, None] + rng.normal(0, 0.05, size=(2048, 2)), 0, 1).astype("float32")
    model = model_module.build_model(spec)
    before = model.evaluate(inputs, targets, verbose=0)
    model.fit(inputs, targets, epochs=15, batch_size=128, verbose=0)
    after = model.evaluate(inputs, targets, verbose=0)
    assert after < before / 2
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
