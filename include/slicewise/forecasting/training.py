"""Incremental training: continue from the champion on the newest windows plus a replay of older ones.

The replay sample keeps an hourly update from forgetting everything but the last hour; the time budget bounds an
update however much data arrives (epochs stop early when the next one would not fit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from slicewise.forecasting.spec import ForecasterSpec
from slicewise.forecasting.windows import Panel, Windows, make_windows


@dataclass(frozen=True)
class TrainReport:
    new_windows: int
    replay_windows: int
    epochs: int
    seconds: float
    final_loss: float
    stopped_by_budget: bool


def training_set(
    new: Windows, replay: Windows | None, spec: ForecasterSpec, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """New windows (newest first when over ``max_windows``) plus ``replay_ratio`` times as many older ones."""
    rng = np.random.default_rng(seed)
    limit = spec.training.max_windows
    n_new = min(len(new.inputs), max(1, int(limit / (1 + spec.training.replay_ratio))))
    newest = np.argsort(new.step)[::-1][:n_new]
    inputs, targets = [new.inputs[newest]], [new.targets[newest]]
    n_replay = 0
    if replay is not None and len(replay.inputs):
        n_replay = min(len(replay.inputs), int(n_new * spec.training.replay_ratio), limit - n_new)
        chosen = rng.choice(len(replay.inputs), size=n_replay, replace=False)
        inputs.append(replay.inputs[chosen])
        targets.append(replay.targets[chosen])
    x, y = np.concatenate(inputs), np.concatenate(targets)
    order = rng.permutation(len(x))
    return x[order], y[order], n_replay


def train(
    model: Any,
    spec: ForecasterSpec,
    new: Windows,
    replay: Windows | None = None,
    *,
    seed: int = 0,
    time_budget_s: float | None = None,
) -> TrainReport:
    """Fit ``model`` in place for up to ``epochs_per_update`` epochs within the time budget."""
    import keras

    from slicewise.forecasting.model import has_calibration, set_calibration

    keras.utils.set_random_seed(seed)
    if has_calibration(model):  # the core learns raw quantiles; calibrate() rescales them afterwards
        set_calibration(model, np.zeros(tuple(int(d) for d in model.output_shape[1:])))
    budget = spec.training.time_budget_s if time_budget_s is None else time_budget_s
    x, y, n_replay = training_set(new, replay, spec, seed)
    began = time.monotonic()
    epochs, loss, stopped = 0, float("nan"), False
    if len(x):
        for _ in range(spec.training.epochs_per_update):
            epoch_began = time.monotonic()
            history = model.fit(x, y, batch_size=spec.training.batch_size, epochs=1, verbose=0, shuffle=True)
            epochs += 1
            loss = float(history.history["loss"][-1])
            spent, last = time.monotonic() - began, time.monotonic() - epoch_began
            if spent + last > budget:
                stopped = epochs < spec.training.epochs_per_update
                break
    return TrainReport(len(x) - n_replay, n_replay, epochs, time.monotonic() - began, loss, stopped)


def calibration_start(spec: ForecasterSpec, eval_from: int, step_s: int) -> int:
    """Where training ends so that an hour of calibration windows, their targets known, fits before
    ``eval_from``: ``eval_from`` less an hour less the longest horizon."""
    return eval_from - max(1, 3600 // step_s) - max(spec.horizon_steps())


def calibrate(
    model: Any,
    panel: Panel,
    spec: ForecasterSpec,
    train_end: int,
    eval_from: int,
    previous: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the model's calibration (:mod:`slicewise.forecasting.calibration`) on the windows ending in
    ``[train_end, eval_from)`` whose targets lie before ``eval_from`` — after its training data, before the
    data it is scored on —, move ``previous`` (the last update's log-factors; none: identity) towards it by
    the spec's ``calibration_gain``, write the result into the model; returns (applied, fitted) log-factors,
    each (horizons, quantiles)."""
    from slicewise.forecasting.calibration import fit_log_factors, update
    from slicewise.forecasting.model import predict, set_calibration

    shape = tuple(int(d) for d in model.output_shape[1:])
    previous = np.zeros(shape) if previous is None else np.asarray(previous, dtype=np.float64)
    set_calibration(model, np.zeros(shape))
    windows = make_windows(panel.head(eval_from), spec, stride=1, first_step=max(0, train_end))
    fitted = (
        fit_log_factors(predict(model, windows.inputs), windows.targets, spec.quantiles)
        if len(windows.inputs)
        else np.zeros(shape)
    )
    factors = update(previous, fitted, spec.calibration_gain)
    set_calibration(model, factors)
    return factors, fitted
