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
    """Fit ``model`` in place for up to ``epochs_per_update`` epochs within the time budget; an ensemble's
    members one after the other, each on its own seed's sample and shuffle with an equal share of the budget
    (``epochs`` and ``final_loss`` are then the members' sum and mean)."""
    import keras

    from slicewise.forecasting.model import (
        PinballLoss,
        ensemble_members,
        has_calibration,
        has_expert_mix,
        identity_calibration,
        identity_mix,
        set_calibration,
        set_expert_weights,
    )

    if has_calibration(model):  # the core learns raw quantiles; calibrate() rescales them afterwards
        set_calibration(model, identity_calibration(model))
    if has_expert_mix(model):  # and mix_experts() weighs them with the window's simple forecasts after that
        set_expert_weights(model, identity_mix(len(spec.horizons_minutes), len(spec.quantiles)))
    budget = spec.training.time_budget_s if time_budget_s is None else time_budget_s
    members = ensemble_members(model)
    networks = members or [model]
    began = time.monotonic()
    epochs, losses, stopped, n_new, n_replay = 0, [], False, 0, 0
    for index, network in enumerate(networks):
        keras.utils.set_random_seed(seed + index)
        if members:  # a member of a loaded or cloned ensemble is not compiled on its own
            network.compile(
                optimizer=keras.optimizers.Adam(spec.training.learning_rate), loss=PinballLoss(spec.quantiles)
            )
        x, y, n_replay = training_set(new, replay, spec, seed + index)
        n_new = len(x) - n_replay
        share = budget / len(networks)
        member_began = time.monotonic()
        for _ in range(spec.training.epochs_per_update if len(x) else 0):
            epoch_began = time.monotonic()
            history = network.fit(
                x, y, batch_size=spec.training.batch_size, epochs=1, verbose=0, shuffle=True
            )
            epochs += 1
            loss = float(history.history["loss"][-1])
            spent, last = time.monotonic() - member_began, time.monotonic() - epoch_began
            if spent + last > share:
                stopped = True
                break
        if len(x):
            losses.append(loss)
    final = float(np.mean(losses)) if losses else float("nan")
    stopped = stopped and epochs < spec.training.epochs_per_update * len(networks)
    return TrainReport(n_new, n_replay, epochs, time.monotonic() - began, final, stopped)


def fits_on_the_hour_after_training(spec: ForecasterSpec) -> bool:
    """Whether an update fits anything into the model on the hour after its training data: the calibration
    (``calibration_gain`` above 0) or the expert mix. Only then is that hour kept out of training."""
    return spec.calibration_gain > 0 or spec.expert_mix


def training_end(spec: ForecasterSpec, eval_from: int, step_s: int) -> int:
    """Where an update's training data ends (targets known before it): :func:`calibration_start` when the
    update fits something on the hour after (:func:`fits_on_the_hour_after_training`), else ``eval_from``
    itself. Held out for nothing, that hour and the horizon before it are the freshest data there is: on the
    public traces' rolling origin, training on them cut the shipped network's P90 loss at 15 minutes
    (docs/benchmarks.md, "Training up to the cut")."""
    return calibration_start(spec, eval_from, step_s) if fits_on_the_hour_after_training(spec) else eval_from


def known_end(spec: ForecasterSpec, train_end: int) -> int:
    """One past the newest step a training window may end at when the data ends at ``train_end``: a window
    is trained on only once every horizon's target is known (:func:`~slicewise.forecasting.windows.make_windows`),
    so those of the last horizon before ``train_end`` wait for the next update."""
    return max(0, train_end - max(spec.horizon_steps()))


def calibration_start(spec: ForecasterSpec, eval_from: int, step_s: int) -> int:
    """Where training ends so that an hour of calibration windows, their targets known, fits before
    ``eval_from``: ``eval_from`` less an hour less the longest horizon."""
    return eval_from - max(1, 3600 // step_s) - max(spec.horizon_steps())


def calibration_first_step(spec: ForecasterSpec, train_end: int, step_s: int) -> int:
    """The first step of the calibration windows: ``train_end`` (the hour after training only) or, with the
    spec's ``calibration_hours`` N > 1, N - 1 hours before it, pooling N hours of which all but the newest
    are windows the model trained on."""
    return max(0, train_end - (spec.calibration_hours - 1) * max(1, 3600 // step_s))


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
    data it is scored on; with ``calibration_hours`` > 1 from :func:`calibration_first_step` on —, move
    ``previous`` (the last update's log-factors; none: identity) towards it by the spec's
    ``calibration_gain`` (a fit within ``calibration_dead_band`` counting as identity), write the result into
    the model; returns (applied, fitted) log-factors, each (horizons, quantiles)."""
    from slicewise.forecasting.calibration import fit_log_factors, update
    from slicewise.forecasting.model import identity_calibration, predict, set_calibration

    identity = identity_calibration(model)
    previous = identity if previous is None else np.asarray(previous, dtype=np.float64)
    set_calibration(model, identity)
    first = calibration_first_step(spec, train_end, panel.step_s)
    windows = make_windows(panel.head(eval_from), spec, stride=1, first_step=first)
    fitted = (
        fit_log_factors(predict(model, windows.inputs), windows.targets, spec.quantiles)
        if len(windows.inputs)
        else identity
    )
    factors = update(previous, fitted, spec.calibration_gain, spec.calibration_dead_band)
    set_calibration(model, factors)
    return factors, fitted


def calibration_advice(
    model: Any, panel: Panel, spec: ForecasterSpec, first_step: int, eval_end: int
) -> np.ndarray:
    """The calibration's fit, as advice only, on the windows ending in ``[first_step, eval_end)`` whose targets
    lie before ``eval_end``: (horizons, quantiles) log-factors of the model as trained. The model's own factors
    are left as they were, so windows the fit saw cannot reach its forecasts."""
    from slicewise.forecasting.calibration import fit_log_factors
    from slicewise.forecasting.model import calibration_of, identity_calibration, predict, set_calibration

    kept = calibration_of(model)
    identity = identity_calibration(model)
    windows = make_windows(panel.head(eval_end), spec, stride=1, first_step=first_step)
    if not len(windows.inputs):
        return identity
    set_calibration(model, identity)
    try:
        return fit_log_factors(predict(model, windows.inputs), windows.targets, spec.quantiles)
    finally:
        set_calibration(model, kept)


def mix_experts(model: Any, panel: Panel, spec: ForecasterSpec, train_end: int, eval_from: int) -> np.ndarray:
    """Fit the weights of the model's expert mix (:class:`slicewise.forecasting.model.ExpertMix`) and write them
    into the model: per horizon and quantile, Hedge with the spec's ``expert_eta``
    (:func:`slicewise.forecasting.experts.weights`) on each expert's mean pinball loss over the windows ending in
    ``[train_end, eval_from)`` whose targets lie before ``eval_from`` (the hour after training, as the calibration
    is fitted; after it, so the model expert is the calibrated model), pooled with the losses the model carries
    from earlier updates by the spec's ``expert_memory``
    (:func:`slicewise.forecasting.experts.carried_losses`). Identity (all on the model), and no losses carried,
    where the spec's ``expert_mix`` is off; identity where no expert has a loss yet. Returns the (horizons,
    quantiles, experts) weights written."""
    from slicewise.forecasting.experts import HEDGE, ExpertRule, carried_losses, pinball_losses, weights
    from slicewise.forecasting.model import (
        expert_forecasts,
        expert_memory_of,
        identity_mix,
        set_expert_memory,
        set_expert_weights,
    )

    fitted = identity_mix(len(spec.horizons_minutes), len(spec.quantiles)).astype(np.float64)
    set_expert_weights(model, fitted)
    previous, previous_windows = expert_memory_of(model)
    if not spec.expert_mix:
        set_expert_memory(model, np.full(previous.shape, np.nan), np.zeros(previous.shape))
        return fitted
    windows = make_windows(panel.head(eval_from), spec, stride=1, first_step=train_end)
    forecasts = expert_forecasts(model, windows.inputs)
    rule = ExpertRule(HEDGE, eta=spec.expert_eta)
    mean, carried = np.full(previous.shape, np.nan), np.zeros(previous.shape)
    for h in range(len(spec.horizons_minutes)):
        actual = windows.targets[:, h].astype(np.float64)
        for j, tau in enumerate(spec.quantiles):
            newest = pinball_losses(actual, forecasts[:, h, j, :], tau)
            counts = np.isfinite(actual[:, None] - forecasts[:, h, j, :]).sum(axis=0).astype(np.float64)
            mean[h, j], carried[h, j] = carried_losses(
                previous[h, j], previous_windows[h, j], newest, counts, spec.expert_memory
            )
            weight = weights(mean[h, j], rule)
            if weight.sum() > 0:
                fitted[h, j] = weight
    set_expert_memory(model, mean, carried)
    set_expert_weights(model, fitted)
    return fitted
