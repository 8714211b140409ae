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


def test_a_model_without_an_anchored_head_counts_as_one_without_extra_anchors() -> None:
    spec = tiny_spec()
    older = keras.Sequential([keras.Input((8, len(FEATURES))), keras.layers.LSTM(2), keras.layers.Dense(2)])
    assert model_module.extra_anchors_of(older) == set()
    assert model_module.has_the_specs_head(older, spec)
    extra = dataclasses.replace(
        spec, architecture=dataclasses.replace(spec.architecture, extra_anchors=("fleet_load",))
    )
    assert not model_module.has_the_specs_head(older, extra)


def test_extra_anchors_read_the_fleets_load_and_the_whole_windows_peak() -> None:
    window = np.zeros((1, 120, len(FEATURES)), dtype="float32")
    window[0, :, FEATURES.index("observed")] = 1.0
    window[0, 10, FEATURES.index("load")] = 0.9  # a peak more than an hour before the end
    window[0, -1, FEATURES.index("load")] = 0.1
    window[0, :, FEATURES.index("fleet_load")] = 0.3
    window[0, -1, FEATURES.index("fleet_load")] = 0.4
    plain = keras.ops.convert_to_numpy(model_module.WindowAnchors(60)(window))
    extra = keras.ops.convert_to_numpy(model_module.WindowAnchors(60, ("fleet_load", "window_max"))(window))
    np.testing.assert_allclose(extra[:, : len(model_module.ANCHORS)], plain)
    assert plain[0, model_module.ANCHORS.index("hour_max")] == pytest.approx(0.1)
    assert extra[0, len(model_module.ANCHORS) :] == pytest.approx([0.4, 0.9])
    with pytest.raises(ValueError, match="unknown anchors"):
        model_module.WindowAnchors(60, ("fleet_p90",))


def test_a_quiet_gpu_gets_a_forecast_above_zero_only_from_the_fleets_load() -> None:
    """A GPU idle for the whole window: every anchor of its own history is 0, so only the fleet's load can lift
    its forecast, and the median still may not use the peaks."""
    quiet = np.zeros((1, 8, len(FEATURES)), dtype="float32")
    quiet[0, :, FEATURES.index("observed")] = 1.0
    quiet[0, :, FEATURES.index("fleet_load")] = 0.5
    plain = model_module.build_model(tiny_spec())
    spec = tiny_spec()
    spec = dataclasses.replace(
        spec, architecture=dataclasses.replace(spec.architecture, extra_anchors=("fleet_load", "window_max"))
    )
    with_fleet = model_module.build_model(spec)
    assert model_module.predict(plain, quiet).max() == 0.0
    assert model_module.predict(with_fleet, quiet).min() > 0.0
    head = next(layer for layer in with_fleet.layers if isinstance(layer, model_module.AnchoredQuantiles))
    assert head.names[-2:] == ("fleet_load", "window_max")
    assert head.mask[0, 0, 0, head.names.index("window_max")] < -1e8  # the median: never the peaks
    assert head.mask[0, 0, 0, head.names.index("fleet_load")] == 0.0


def test_a_saved_model_keeps_its_extra_anchors_and_one_saved_without_them_loads_with_none(
    tmp_path: Path,
) -> None:
    spec = tiny_spec()
    extra = dataclasses.replace(
        spec, architecture=dataclasses.replace(spec.architecture, extra_anchors=("window_max",))
    )
    inputs = np.random.default_rng(2).random((16, 8, len(FEATURES))).astype("float32")
    for built, anchors in ((spec, ()), (extra, ("window_max",))):
        model = model_module.build_model(built)
        path = tmp_path / f"{len(anchors)}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
        assert model_module.extra_anchors_of(loaded) == {anchors}
        assert model_module.has_the_specs_head(loaded, built)
        assert not model_module.has_the_specs_head(loaded, extra if not anchors else spec)
        np.testing.assert_allclose(
            model_module.predict(loaded, inputs), model_module.predict(model, inputs), rtol=1e-5
        )
    # A version registered before the key existed: its config names no extra anchors at all.
    older = tmp_path / "older.keras"
    _without_key(tmp_path / "0.keras", older, "extra")
    loaded = keras.saving.load_model(older, safe_mode=True)
    assert model_module.extra_anchors_of(loaded) == {()}
    assert model_module.predict(loaded, inputs).shape == (16, 2, len(spec.quantiles))


def _without_key(source: Path, target: Path, key: str) -> None:
    """A copy of a saved .keras archive whose config.json has ``key`` removed from every layer's config."""
    import json
    import zipfile

    def drop(node: object) -> object:
        if isinstance(node, dict):
            return {k: drop(v) for k, v in node.items() if k != key}
        if isinstance(node, list):
            return [drop(v) for v in node]
        return node

    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                assert key in json.dumps(config)  # the copy differs from the archive
                data = json.dumps(drop(config)).encode()
            zout.writestr(item, data)
