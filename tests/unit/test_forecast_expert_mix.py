"""The expert mix inside the model (spec ``expert_mix``): identity until fitted, weights that follow the experts'
losses on the calibration hour, carried inside the saved model, and an update that fits them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting.experts import MIX_EXPERTS
from slicewise.forecasting.spec import SpecError, parse_spec
from slicewise.forecasting.windows import FEATURES, Panel, make_windows
from tests.support.forecasting import tiny_spec, tiny_spec_file

keras = pytest.importorskip("keras")
model_module = pytest.importorskip("slicewise.forecasting.model")

MEAN = MIX_EXPERTS.index("mean_last_hour")


def _mixed_spec() -> object:
    return dataclasses.replace(tiny_spec(), min_observed_steps=4, expert_mix=True, expert_eta=5.0)


def _inputs(n: int = 32) -> np.ndarray:
    inputs = np.random.default_rng(0).uniform(size=(n, 8, len(FEATURES))).astype("float32")
    inputs[:, :, FEATURES.index("observed")] = 1.0
    return inputs


def test_the_spec_turns_the_mix_on_with_an_eta_and_refuses_odd_values(tmp_path: Path) -> None:
    import yaml

    raw = yaml.safe_load(tiny_spec_file(tmp_path / "spec.yaml").read_text())
    assert parse_spec(raw).expert_mix is False  # off unless asked
    on = parse_spec({**raw, "expert_mix": True, "expert_eta": 10})
    assert (on.expert_mix, on.expert_eta) == (True, 10.0)
    with pytest.raises(SpecError, match="expert_mix must be true or false"):
        parse_spec({**raw, "expert_mix": "yes"})
    with pytest.raises(SpecError, match="expert_eta must lie in"):
        parse_spec({**raw, "expert_mix": True, "expert_eta": -1})
    assert parse_spec({**raw, "expert_memory": 0.5}).expert_memory == 0.5
    with pytest.raises(SpecError, match="expert_memory must lie in"):
        parse_spec({**raw, "expert_memory": 1.5})


def test_losses_carried_from_earlier_updates_count_by_the_memory() -> None:
    from slicewise.forecasting.experts import carried_losses

    previous, previous_windows = np.array([1.0, 2.0, np.nan]), np.array([60.0, 60.0, 0.0])
    newest, newest_windows = np.array([3.0, np.nan, 4.0]), np.array([30.0, 0.0, 30.0])
    # Memory 1: 60 earlier windows at 1.0 and 30 new at 3.0 -> 5/3 over 90; no new loss keeps the old one; no old
    # loss takes the new one.
    mean, windows = carried_losses(previous, previous_windows, newest, newest_windows, 1.0)
    assert mean == pytest.approx([5 / 3, 2.0, 4.0]) and windows == pytest.approx([90, 60, 30])
    # Memory 0.5: the earlier windows count half: (30 x 1 + 30 x 3) / 60 = 2.
    mean, windows = carried_losses(previous, previous_windows, newest, newest_windows, 0.5)
    assert mean == pytest.approx([2.0, 2.0, 4.0]) and windows == pytest.approx([60, 30, 30])
    # Memory 0: the newest hour alone (an expert without one has no loss).
    mean, _ = carried_losses(previous, previous_windows, newest, newest_windows, 0.0)
    assert mean[0] == 3.0 and np.isnan(mean[1]) and mean[2] == 4.0


def test_the_mix_is_identity_until_fitted_and_then_the_weighted_experts(tmp_path: Path) -> None:
    spec = _mixed_spec()
    model = model_module.build_model(spec)
    inputs = _inputs()
    experts = model_module.expert_forecasts(model, inputs)
    assert experts.shape == (32, 2, len(spec.quantiles), len(MIX_EXPERTS))
    # Identity: the calibrated model's quantiles as they are.
    np.testing.assert_allclose(model_module.predict(model, inputs), experts[..., 0], rtol=1e-5, atol=1e-7)
    # The window's experts are its own features at the end: the hour's mean, and zero.
    newest = inputs[:, -1, :]
    np.testing.assert_allclose(experts[:, 0, 0, MEAN], newest[:, FEATURES.index("hour_mean")], rtol=1e-6)
    assert (experts[..., -1] == 0).all()
    # Half on the model, half on the hour's mean (both quantiles, both horizons): the weighted sum.
    weights = np.zeros((2, len(spec.quantiles), len(MIX_EXPERTS)))
    weights[..., 0] = weights[..., MEAN] = 0.5
    model_module.set_expert_weights(model, weights)
    expected = 0.5 * experts[..., 0] + 0.5 * experts[..., MEAN]
    mixed = model_module.predict(model, inputs)
    np.testing.assert_allclose(mixed, np.maximum.accumulate(expected, axis=-1), rtol=1e-5, atol=1e-7)
    # Saved and loaded in safe mode, with its weights.
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(model_module.expert_weights_of(loaded), weights, rtol=1e-6)
    # The losses carried between updates travel with it too.
    mean, windows = np.full(weights.shape, 0.25), np.full(weights.shape, 60.0)
    model_module.set_expert_memory(model, mean, windows)
    model.save(path)
    carried = model_module.expert_memory_of(keras.models.load_model(path))
    np.testing.assert_allclose(carried[0], mean)
    np.testing.assert_allclose(carried[1], windows)
    np.testing.assert_allclose(model_module.predict(loaded, inputs), mixed, rtol=1e-5, atol=1e-7)


def test_a_version_without_the_mix_gets_it_at_identity_and_plain_models_have_none() -> None:
    plain = model_module.build_model(tiny_spec())
    assert not model_module.has_expert_mix(plain) and model_module.expert_weights_of(plain) is None
    inputs = _inputs()
    wrapped = model_module.with_expert_mix(plain, _mixed_spec())
    assert model_module.has_expert_mix(wrapped)
    np.testing.assert_allclose(
        model_module.predict(wrapped, inputs), model_module.predict(plain, inputs), rtol=1e-5, atol=1e-7
    )
    with pytest.raises(ValueError, match="no expert mix"):
        model_module.set_expert_weights(plain, np.zeros((2, 2, len(MIX_EXPERTS))))


def test_fitting_moves_the_weight_to_the_experts_that_forecast_the_calibration_hour() -> None:
    from slicewise.forecasting.training import mix_experts

    # A steady load of 0.4 on every series: the hour's mean, EWMA, P90 and the last value forecast it exactly;
    # the untrained model does not, and zero is off by 0.4.
    steps = 240
    load = np.full((3, steps), 0.4)
    panel = Panel([("h", i, "") for i in range(3)], 60 * np.arange(steps), load, np.zeros_like(load), 60)
    spec = _mixed_spec()
    model = model_module.build_model(spec)
    train_end, eval_from = 120, 240
    windows = make_windows(panel.head(eval_from), spec, stride=1, first_step=train_end)
    before = model_module.predict(model, windows.inputs)
    fitted = mix_experts(model, panel, spec, train_end, eval_from)
    assert fitted.shape == (2, len(spec.quantiles), len(MIX_EXPERTS))
    np.testing.assert_allclose(fitted.sum(axis=-1), 1.0, rtol=1e-6)
    exact = [
        MIX_EXPERTS.index(n) for n in ("last_value", "mean_last_hour", "ewma_last_hour", "p90_last_hour")
    ]
    assert (fitted[..., exact].sum(axis=-1) > 0.8).all()
    assert (fitted[..., -1] < fitted[..., MEAN]).all()  # zero, the worst expert, weighs least
    np.testing.assert_allclose(model_module.expert_weights_of(model), fitted, rtol=1e-6)
    after = model_module.predict(model, windows.inputs)
    assert np.abs(after - 0.4).mean() < np.abs(before - 0.4).mean()
    # With a memory of 1, a second update on the same hour pools its windows with the first's: the same mean
    # losses over twice the windows, the same weights; with none, the newest hour's windows alone.
    losses, counted = model_module.expert_memory_of(model)
    assert (counted[..., 0] == len(windows.inputs)).all()
    again = mix_experts(model, panel, dataclasses.replace(spec, expert_memory=1.0), train_end, eval_from)
    pooled_losses, pooled_counted = model_module.expert_memory_of(model)
    np.testing.assert_allclose(again, fitted, rtol=1e-5)
    np.testing.assert_allclose(pooled_losses, losses, rtol=1e-5)
    np.testing.assert_allclose(pooled_counted, 2 * counted)
    mix_experts(model, panel, spec, train_end, eval_from)
    np.testing.assert_allclose(model_module.expert_memory_of(model)[1], counted)
    # The spec's mix off: the weights go back to identity, the model's forecasts as they were.
    off = mix_experts(model, panel, dataclasses.replace(spec, expert_mix=False), train_end, eval_from)
    assert (off[..., 0] == 1).all() and (off[..., 1:] == 0).all()
    np.testing.assert_allclose(model_module.predict(model, windows.inputs), before, rtol=1e-5, atol=1e-7)
    assert np.isnan(model_module.expert_memory_of(model)[0]).all()  # and nothing carried to the next update


def test_a_rolling_origin_backtest_refits_the_mix_before_each_fold(tmp_path: Path) -> None:
    import pandas as pd
    import yaml

    from slicewise.forecasting.backtest import panel_from_long, run_backtest
    from tests.support.forecasting import synthetic_csv

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    raw = yaml.safe_load(tiny_spec_file(tmp_path / "spec.yaml").read_text())
    plain = run_backtest(panel, parse_spec(raw), 0.5, 15, folds=2)
    mixed = run_backtest(panel, parse_spec({**raw, "expert_mix": True, "expert_eta": 20}), 0.5, 15, folds=2)
    # Same seeds, same training: only the mix, fitted on each fold's calibration hour, moves the LSTM's scores.
    for before, after in zip(plain["folds"], mixed["folds"], strict=True):
        assert after["test_windows"] == before["test_windows"]
        assert after["models"]["lstm"]["pinball_p90"] != pytest.approx(
            before["models"]["lstm"]["pinball_p90"]
        )
        assert np.isfinite(after["models"]["lstm"]["pinball_p90"])
