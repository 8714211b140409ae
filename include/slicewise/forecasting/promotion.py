"""The champion gate: a new model version becomes ``champion`` only when it beats both the current champion and
the best simple baseline by the spec's margin on the same fresh data. Otherwise the champion stays, and the
planner is told which predictor to trust (the champion, or the baseline when no model beats it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slicewise.forecasting.evaluation import MODEL, Evaluation
from slicewise.forecasting.spec import ForecasterSpec

CHAMPION = "champion"


@dataclass(frozen=True)
class Decision:
    promote: bool
    trust: str  # "model" (the new version, now champion), "champion", or a baseline name
    reason: str
    score: float  # the new version's promotion metric
    champion_score: float
    baseline: str
    baseline_score: float


def _beats(candidate: float, reference: float, margin: float) -> bool:
    if not math.isfinite(candidate):
        return False
    return not math.isfinite(reference) or candidate <= reference * (1 - margin) - 1e-12


def decide(evaluation: Evaluation, spec: ForecasterSpec) -> Decision:
    """Apply the rule to scores of ``"model"`` (new), ``"champion"`` (absent when there is none) and baselines."""
    rule = spec.promotion
    horizon, metric, margin = rule.horizon_minutes, rule.metric, rule.margin
    new = evaluation.metric(MODEL, horizon, metric)
    champion = evaluation.metric(CHAMPION, horizon, metric)
    has_champion = CHAMPION in evaluation.scores
    baseline, baseline_score = evaluation.best_baseline(horizon, metric)
    label = f"{metric}@{horizon}min"

    if not math.isfinite(new):
        reason = f"new version has no {label} on the fresh data"
    elif not _beats(new, baseline_score, margin):
        reason = f"new {label} {new:.4f} does not beat best baseline {baseline} {baseline_score:.4f} by {margin:.0%}"
    elif has_champion and not _beats(new, champion, margin):
        reason = f"new {label} {new:.4f} does not beat champion {champion:.4f} by {margin:.0%}"
    else:
        versus = f"champion {champion:.4f}" if has_champion else "no champion yet"
        reason = f"new {label} {new:.4f} beats {versus} and {baseline} {baseline_score:.4f}"
        return Decision(True, MODEL, reason, new, champion, baseline, baseline_score)
    trust = CHAMPION if has_champion and _beats(champion, baseline_score, margin) else baseline
    return Decision(False, trust, reason, new, champion, baseline, baseline_score)
