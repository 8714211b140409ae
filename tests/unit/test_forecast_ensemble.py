"""An ensemble inside one registered model: members trained each on its own, combined per quantile by the
median; same input, same output shape, saved and loaded as one model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting.windows import FEATURES, Windows

keras = pytest.importorskip("keras")
model_module = pytest.importorskip("slicewise.forecasting.model")


def ensemble_spec(members: int = 3):  # type: ignore[no-untyped-def]
    from tests.support.forecasting import tiny_spec

    spec = tiny_spec()
    return dataclasses.replace(spec, architecture=dataclasses.replace(spec.architecture, members=members))


def windows(n: int = 512, seed: int = 0) -> Windows:
    rng = np.random.default_rng(seed)
    inputs = np.zeros((n, 8, len(FEATURES)), dtype="float32")
    level = rng.uniform(0.1, 0.8, size=n)
    for name in ("load", "hour_mean", "hour_p90"):
        inputs[:, :, FEATURES.index(name)] = level[:, None]
    inputs[:, :, FEATURES.index("observed")] = 1.0
    targets = np.clip(level[:, None] + rng.normal(0, 0.05, size=(n, 2)), 0, 1).astype("float32")
    return Windows(inputs, targets, np.zeros(n, dtype=int), np.arange(n))


def test_the_ensemble_forecasts_the_median_of_its_members_and_never_crosses() -> None:
    keras.utils.set_random_seed(1)
    model = model_module.build_model(ensemble_spec())
    members = model_module.ensemble_members(model)
    assert [m.name for m in members] == ["member_0", "member_1", "member_2"]
    inputs = windows().inputs
    each = np.stack([np.asarray(m.predict(inputs, verbose=0)) for m in members])
    combined = model_module.predict(model, inputs)
    assert combined.shape == (len(inputs), 2, 2)
    np.testing.assert_allclose(combined, np.median(each, axis=0), rtol=1e-5, atol=1e-6)
    assert (np.diff(combined, axis=-1) >= 0).all()
    # Members start from different weights: they are not three copies of one network.
    assert not np.allclose(each[0], each[1])


def test_each_member_trains_and_the_ensemble_loads_back_as_one_model(tmp_path: Path) -> None:
    from slicewise.forecasting.training import train

    spec = ensemble_spec()
    model = model_module.build_model(spec)
    before = [m.get_weights()[0].copy() for m in model_module.ensemble_members(model)]
    report = train(model, spec, windows(), seed=4)
    after = [m.get_weights()[0] for m in model_module.ensemble_members(model)]
    assert all(not np.allclose(b, a) for b, a in zip(before, after, strict=True))
    assert report.epochs == 3 * spec.training.epochs_per_update
    path = tmp_path / "ensemble.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    inputs = windows(64, seed=9).inputs
    np.testing.assert_allclose(
        model_module.predict(loaded, inputs), model_module.predict(model, inputs), rtol=1e-5, atol=1e-6
    )
    # The loaded ensemble trains on, as the hourly update's copy of the champion does.
    from slicewise.forecasting.steps import _copy

    copy = _copy(loaded, spec)
    assert len(model_module.ensemble_members(copy)) == 3
    assert train(copy, spec, windows(seed=2), seed=5).epochs == 3 * spec.training.epochs_per_update
    np.testing.assert_allclose(  # the champion itself is untouched by its copy's training
        model_module.predict(loaded, inputs), model_module.predict(model, inputs), rtol=1e-5, atol=1e-6
    )


def test_a_spec_asks_for_one_to_nine_members() -> None:
    import yaml

    from slicewise.forecasting.spec import MODELS_DIR, SpecError, parse_spec

    raw = yaml.safe_load((MODELS_DIR / "gpu_load_forecaster.yaml").read_text())
    assert parse_spec(raw).architecture.members == 1  # optional, one network by default
    raw["architecture"]["members"] = 0
    with pytest.raises(SpecError, match="members"):
        parse_spec(raw)


def test_members_may_look_back_over_different_spans_and_load_back_so(tmp_path: Path) -> None:
    # Member 1's LSTM reads the newest 2 of 8 steps: a change in older steps does not reach it, while it does
    # reach member 0's, which reads all 8. The model saves and loads back with its spans.
    spec = ensemble_spec(2)
    spec = dataclasses.replace(
        spec, architecture=dataclasses.replace(spec.architecture, member_window_steps=(8, 2))
    )
    model = model_module.build_model(spec)
    inputs = windows(32).inputs
    older = inputs.copy()
    older[:, :6, FEATURES.index("load")] *= 0.2

    def lstm_outputs(network, batch):  # type: ignore[no-untyped-def]
        lstm = keras.Model(network.inputs, network.get_layer("lstm").output)
        return np.asarray(lstm.predict(batch, verbose=0))

    whole, recent = model_module.ensemble_members(model)
    assert not np.allclose(lstm_outputs(whole, inputs), lstm_outputs(whole, older))
    np.testing.assert_allclose(
        lstm_outputs(recent, inputs), lstm_outputs(recent, older), rtol=1e-6, atol=1e-7
    )
    path = tmp_path / "spans.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [m.get_layer("lookback").steps for m in model_module.ensemble_members(loaded)[1:]] == [2]
    np.testing.assert_allclose(
        model_module.predict(loaded, older), model_module.predict(model, older), rtol=1e-5, atol=1e-6
    )


def test_a_spec_names_one_span_per_member_within_the_window() -> None:
    import yaml

    from slicewise.forecasting.spec import MODELS_DIR, SpecError, parse_spec

    raw = yaml.safe_load((MODELS_DIR / "gpu_load_forecaster.yaml").read_text())
    assert parse_spec(raw).architecture.member_window_steps == ()  # optional: every member the whole window
    raw["architecture"] |= {"members": 3, "member_window_steps": [120, 60, 30]}
    assert parse_spec(raw).architecture.member_window_steps == (120, 60, 30)
    for wrong, why in (([120, 60], "one number of steps per member"), ([120, 60, 10], "min_observed_steps")):
        raw["architecture"]["member_window_steps"] = wrong
        with pytest.raises(SpecError, match=why):
            parse_spec(raw)
