"""One hourly forecaster update, end to end: history → train from the champion → calibrate the quantiles on the
hour after its training data → evaluate on fresh data against the champion and the baselines → log and register
in MLflow (calibration included) → move ``champion`` only if the gate says so.

Fresh data: the windows of the newest ``EVAL_HOURS`` (that have a full future for the longest horizon) are held
out; training only sees the panel before them, so no evaluated target was ever trained on.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from slicewise.errors import NotYet
from slicewise.forecasting import registry
from slicewise.forecasting.evaluation import MODEL, Evaluation, evaluate
from slicewise.forecasting.experts import MIX_EXPERTS
from slicewise.forecasting.promotion import CHAMPION, Decision, decide
from slicewise.forecasting.spec import ForecasterSpec
from slicewise.forecasting.training import TrainReport, known_end, train
from slicewise.forecasting.windows import (
    Panel,
    make_windows,
    panel_from_frame,
    subsample,
    subsample_rows,
)

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

log = logging.getLogger(__name__)

EVAL_HOURS = 1
HISTORY_HOURS = 48
#: Series scored per update (about 30,000 held-out windows): stable metrics, bounded cost on 10,000 GPUs.
EVAL_SERIES = 500


class NotEnoughHistory(NotYet, RuntimeError):
    """Too few validated hours to train and evaluate; the message says how many there are and are needed."""

    def __str__(self) -> str:
        return f"not enough validated history yet: {super().__str__()}"


def load_history(
    root: ObjectStoragePath, newest_end: datetime, spec: ForecasterSpec, hours: int = HISTORY_HOURS
) -> Panel:
    """The panel of the published (validated) partitions in ``[newest_end - hours, newest_end)``."""
    import pandas as pd

    from slicewise import store

    frames = []
    for back in range(hours, 0, -1):
        folder = store.PartitionPaths(root, newest_end - timedelta(hours=back)).published
        if store.read_manifest(folder) is not None:  # quarantined or missing hours are never read
            frame, _ = store.read_frame(folder / store.GPU_FILE)
            frames.append(frame)
    if not frames:
        raise NotEnoughHistory(
            f"no published metrics partition in the {hours} h before {newest_end:%Y-%m-%d %H:%M}"
        )
    return panel_from_frame(pd.concat(frames, ignore_index=True), spec.signal, spec.step_s)


def split_steps(panel: Panel, spec: ForecasterSpec) -> int:
    """The step ``eval_from``: held-out windows end in the last ``EVAL_HOURS`` hours that still have a full
    longest-horizon future; training sees only the panel before ``eval_from``, so its targets end there too."""
    hour = 3600 // panel.step_s
    eval_from = panel.load.shape[1] - EVAL_HOURS * hour - max(spec.horizon_steps())
    if eval_from < spec.min_observed_steps + max(spec.horizon_steps()) + 1:
        raise NotEnoughHistory(
            f"{panel.load.shape[1] * panel.step_s / 3600:.1f} h of history; need more than "
            f"{EVAL_HOURS} h held out + {max(spec.horizons_minutes)} min of horizon + some to train on"
        )
    return eval_from


def _copy(model: Any, spec: ForecasterSpec) -> Any:
    """A trainable copy of the champion (same weights, fresh optimizer) so the champion itself stays intact."""
    import keras

    from slicewise.forecasting.model import PinballLoss

    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    clone.compile(
        optimizer=keras.optimizers.Adam(spec.training.learning_rate), loss=PinballLoss(spec.quantiles)
    )
    return clone


def _plot(panel: Panel, spec: ForecasterSpec, model: Any, eval_from: int) -> Any:
    """Forecast vs actual on the held-out hour for the busiest series, at the promotion horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from slicewise.forecasting.model import predict

    h_index = spec.horizons_minutes.index(spec.promotion.horizon_minutes)
    with np.errstate(all="ignore"):
        activity = np.nan_to_num(np.nanmean(panel.load[:, eval_from:], axis=1))
    # Windows of the four busiest series only: the whole panel's would cost gigabytes on a large fleet.
    shown = subsample_rows(panel, np.sort(np.argsort(-activity)[:4]))
    windows = make_windows(
        shown, spec, first_step=max(0, eval_from - 3600 // panel.step_s), require_targets=False
    )
    figure, axes = plt.subplots(2, 2, figsize=(11, 6), sharex=True)
    predictions = predict(model, windows.inputs) if len(windows.inputs) else np.empty((0, 1, 1))
    for axis, row in zip(axes.ravel(), range(len(shown.keys)), strict=False):
        mine = windows.series == row
        steps = windows.step[mine]
        minutes = (steps - eval_from) * panel.step_s / 60
        axis.plot(minutes, windows.targets[mine, h_index], color="black", label="realised mean")
        axis.plot(minutes, predictions[mine, h_index, 0], label="P50")
        axis.fill_between(
            minutes,
            predictions[mine, h_index, 0],
            predictions[mine, h_index, -1],
            alpha=0.3,
            label=f"P50-P{int(spec.upper_quantile * 100)}",
        )
        axis.axvline(0, color="grey", linestyle=":")
        axis.set_title(" ".join(str(part) for part in shown.keys[row] if part != ""), fontsize=9)
    axes[0, 0].legend(fontsize=8)
    figure.supxlabel("minutes from the start of the held-out hour")
    figure.suptitle(f"{spec.name}: mean load over the next {spec.promotion.horizon_minutes} min")
    figure.tight_layout()
    return figure


def hourly_update(
    spec: ForecasterSpec,
    panel: Panel,
    *,
    tracking_uri: str,
    experiment: str,
    tags: dict[str, str],
    seed: int = 0,
) -> dict[str, Any]:
    """Train, evaluate, register and gate one model; returns what the DAG reports and publishes."""
    from slicewise.forecasting.model import (
        build_model,
        calibration_of,
        has_expert_mix,
        predict,
        why_not_trained_on,
        with_calibration,
        with_expert_mix,
    )
    from slicewise.forecasting.training import (
        calibrate,
        calibration_advice,
        fits_on_the_hour_after_training,
        mix_experts,
        training_end,
    )

    registry.check_reachable(tracking_uri)  # before any work: an unreachable MLflow changes nothing
    eval_from = split_steps(panel, spec)
    champion = registry.load_champion(tracking_uri, spec.name)
    set_aside = None
    if champion is not None and (unfit := why_not_trained_on(champion.model, spec)):
        set_aside = champion.version
        log.warning(
            "champion v%s of %s %s: training from scratch; the gate compares the new version with the "
            "baselines only",
            champion.version,
            spec.name,
            unfit,
        )
        champion = None
    model = with_calibration(_copy(champion.model, spec)) if champion is not None else build_model(spec)
    if spec.expert_mix:  # a version registered before the spec turned the mix on gets it at identity
        model = with_expert_mix(model, spec)

    hour = 3600 // panel.step_s
    # Where the update fits its calibration or expert mix, training stops an hour and a horizon before the
    # held-out hour: that hour is fitted on windows the model never trained on. With too little history for
    # both, the model stays uncalibrated. Where it fits neither (the shipped spec), it trains up to the gate's
    # hour, on the freshest data there is.
    train_end = training_end(spec, eval_from, panel.step_s)
    if train_end < spec.min_observed_steps + max(spec.horizon_steps()) + 1:
        train_end = eval_from
    # Enough series that the newest hour alone fills the training budget; replay draws from the same ones.
    per_series = max(1, hour // spec.training.window_stride)
    train_series = max(1, int(spec.training.max_windows / (1 + spec.training.replay_ratio) / per_series))
    history = subsample(panel, train_series, seed).head(train_end)
    # The newest windows with a known target end the longest horizon before train_end: those of the hour
    # before that are new. (Counted from train_end itself, every target lay past the data and the update
    # trained on nothing, from scratch too: epochs 0 in every version until 2026-12-07.)
    newest_first = max(0, known_end(spec, train_end) - hour)
    new = make_windows(history, spec, stride=spec.training.window_stride, first_step=newest_first)
    # Older history is thinned so that it yields about replay_ratio windows per new one, however long it is.
    replay_stride = max(
        spec.training.window_stride, newest_first // max(1, int(per_series * spec.training.replay_ratio))
    )
    replay = (
        make_windows(history, spec, stride=replay_stride).ending_before(newest_first)
        if newest_first > 0
        else None
    )
    report: TrainReport = train(model, spec, new, replay, seed=seed)
    log.info("trained %s: %s", spec.name, report)
    identity = np.zeros((len(spec.horizons_minutes), len(spec.quantiles)))
    previous = calibration_of(champion.model) if champion is not None else None
    calibrated_on = subsample(panel, EVAL_SERIES, seed + 2)
    if train_end < eval_from:
        factors, fitted = calibrate(model, calibrated_on, spec, train_end, eval_from, previous)
        fitted_on = "the hour after training"
    elif not fits_on_the_hour_after_training(spec):
        # Trained up to the gate's hour, nothing to apply (calibration_gain 0): the fit logged as advice is the
        # one the gate's held-out hour asks for, and the model keeps its factors (the champion's, or none).
        fitted = calibration_advice(model, calibrated_on, spec, eval_from, panel.load.shape[1])
        factors = calibration_of(model)
        fitted_on = "the gate's held-out hour (advice only)"
    else:
        factors, fitted = identity, identity
        fitted_on = "none (too little history)"
    log.info(
        "calibration of %s (log-factors per horizon x quantile): applied %s, the newest hour's fit %s",
        spec.name,
        np.round(factors, 3).tolist(),
        np.round(fitted, 3).tolist(),
    )
    mixture = (
        mix_experts(model, calibrated_on, spec, train_end, eval_from)
        if has_expert_mix(model) and (train_end < eval_from or not spec.expert_mix)
        else None
    )
    if mixture is not None:
        log.info(
            "expert mix of %s (weights of %s per horizon x quantile): %s",
            spec.name,
            ", ".join(MIX_EXPERTS),
            np.round(mixture, 3).tolist(),
        )

    predictors = {MODEL: lambda x: predict(model, x)}
    if champion is not None:
        predictors[CHAMPION] = lambda x: predict(champion.model, x)
    scored = subsample(panel, EVAL_SERIES, seed + 1)
    evaluation: Evaluation = evaluate(scored, spec, predictors, eval_from_step=eval_from)
    decision: Decision = decide(evaluation, spec)
    log.info("gate for %s: %s", spec.name, decision.reason)

    sample = make_windows(subsample(scored, 8, seed), spec, first_step=eval_from).inputs[:8]
    run_id, version = registry.log_and_register(
        tracking_uri,
        experiment,
        spec.name,
        model,
        params={
            "spec": spec.name,
            "window_steps": spec.window_steps,
            "horizons_minutes": spec.horizons_minutes,
            "quantiles": spec.quantiles,
            "architecture": spec.architecture.kind,
            "lstm_units": spec.architecture.lstm_units,
            "members": spec.architecture.members,
            "member_window_steps": spec.architecture.member_window_steps or "whole window",
            "extra_anchors": ", ".join(spec.architecture.extra_anchors) or "none",
            "expert_mix": spec.expert_mix,
            "expert_eta": spec.expert_eta if spec.expert_mix else "off",
            "expert_memory": spec.expert_memory if spec.expert_mix else "off",
            "started_from": champion.version if champion else "scratch",
            "champion_set_aside": set_aside or "none",
            "training_data_end": _iso(panel, train_end),
            "calibration_fitted_on": fitted_on,
            "new_windows": report.new_windows,
            "replay_windows": report.replay_windows,
            "epochs": report.epochs,
            "series": len(panel.keys),
            "eval_windows": evaluation.windows,
        },
        metrics={
            **evaluation.flat(),
            **_calibration_metrics(spec, factors, "calibration"),
            **_calibration_metrics(spec, fitted, "calibration.fit"),
            **(_expert_metrics(spec, mixture) if mixture is not None else {}),
            "train.final_loss": report.final_loss,
            "train.seconds": report.seconds,
        },
        tags={**tags, "gate": "promote" if decision.promote else "keep", "gate_reason": decision.reason},
        spec_text=spec_yaml(spec),
        plot=_plot(panel, spec, model, eval_from),
        sample_inputs=sample,
        sample_outputs=predict(model, sample),
    )
    if decision.promote:
        registry.set_champion(tracking_uri, spec.name, version)
    registry.tag_version(
        tracking_uri,
        spec.name,
        version,
        {
            "gate": "promoted" if decision.promote else "kept",
            "gate_reason": decision.reason,
            "trust": decision.trust,  # the planner reads it when no fresh forecaster event is at hand
        },
    )
    return {
        "model": spec.name,
        "version": version,
        "run_id": run_id,
        "promoted": decision.promote,
        "champion_version": version if decision.promote else (champion.version if champion else None),
        "trust": decision.trust,
        "reason": decision.reason,
        "metric": f"{spec.promotion.metric}@{spec.promotion.horizon_minutes}min",
        "score": _finite(decision.score),
        "champion_score": _finite(decision.champion_score),
        "baseline": decision.baseline,
        "baseline_score": _finite(decision.baseline_score),
    }


def _iso(panel: Panel, step: int) -> str:
    """The time of ``step`` (the first step after the data it ends), in UTC."""
    at = int(panel.timestamps[0]) + step * panel.step_s
    return datetime.fromtimestamp(at, UTC).isoformat()


def _calibration_metrics(spec: ForecasterSpec, log_factors: np.ndarray, prefix: str) -> dict[str, float]:
    """``{prefix}.h{minutes}.p{level}``: the factor of each quantile (1 = as trained): ``calibration`` the
    one applied, ``calibration.fit`` the newest hour's advice."""
    return {
        f"{prefix}.h{minutes}.p{round(q * 100)}": float(np.exp(log_factors[h, j]))
        for h, minutes in enumerate(spec.horizons_minutes)
        for j, q in enumerate(spec.quantiles)
    }


def _expert_metrics(spec: ForecasterSpec, weights: np.ndarray) -> dict[str, float]:
    """``experts.h{minutes}.p{level}.{expert}``: each expert's weight in the mix (the model's 1 = no mix)."""
    return {
        f"experts.h{minutes}.p{round(q * 100)}.{name}": float(weights[h, j, e])
        for h, minutes in enumerate(spec.horizons_minutes)
        for j, q in enumerate(spec.quantiles)
        for e, name in enumerate(MIX_EXPERTS)
    }


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def spec_yaml(spec: ForecasterSpec) -> str:
    import json

    import yaml

    plain = json.loads(json.dumps(dataclasses.asdict(spec)))  # tuples -> lists, which YAML can write safely
    return str(yaml.safe_dump(plain, sort_keys=False))
