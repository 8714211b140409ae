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
from slicewise.forecasting.windows import Windows


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

    keras.utils.set_random_seed(seed)
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
