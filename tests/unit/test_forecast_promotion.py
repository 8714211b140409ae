"""The champion gate: better, worse, equal, missing champion, and what the planner should trust."""

from __future__ import annotations

import dataclasses

import pytest

from slicewise.forecasting.baselines import BASELINES
from slicewise.forecasting.evaluation import Evaluation
from slicewise.forecasting.promotion import decide
from slicewise.forecasting.spec import Promotion, load_specs

SPEC = dataclasses.replace(
    load_specs()[0],
    horizons_minutes=(15, 60),
    promotion=Promotion(metric="pinball_p90", horizon_minutes=60, margin=0.05),
)


def evaluation(model: float, champion: float | None, baseline: float = 1.0) -> Evaluation:
    scores = {name: {60: {"pinball_p90": baseline + 0.5}} for name in BASELINES}
    scores["mean_last_hour"] = {60: {"pinball_p90": baseline}}
    scores["model"] = {60: {"pinball_p90": model}}
    if champion is not None:
        scores["champion"] = {60: {"pinball_p90": champion}}
    return Evaluation(scores, windows=100)


def test_first_version_is_promoted_when_it_beats_the_best_baseline_by_the_margin() -> None:
    decision = decide(evaluation(model=0.9, champion=None), SPEC)
    assert decision.promote and decision.trust == "model"
    assert "no champion yet" in decision.reason and decision.baseline == "mean_last_hour"


def test_a_better_version_replaces_the_champion() -> None:
    decision = decide(evaluation(model=0.5, champion=0.8), SPEC)
    assert decision.promote and decision.champion_score == 0.8


@pytest.mark.parametrize("model", [0.8, 0.79, 0.9])  # equal, better by less than 5 %, worse
def test_an_equal_barely_better_or_worse_version_keeps_the_champion(model: float) -> None:
    decision = decide(evaluation(model=model, champion=0.8), SPEC)
    assert not decision.promote and decision.trust == "champion"
    assert "does not beat champion" in decision.reason


def test_a_version_that_loses_to_a_baseline_is_not_promoted_even_without_champion() -> None:
    decision = decide(evaluation(model=0.97, champion=None), SPEC)
    assert not decision.promote and decision.trust == "mean_last_hour"
    assert "does not beat best baseline mean_last_hour" in decision.reason


def test_when_the_champion_also_loses_to_a_baseline_the_planner_trusts_the_baseline() -> None:
    decision = decide(evaluation(model=1.2, champion=1.1), SPEC)
    assert not decision.promote and decision.trust == "mean_last_hour"


def test_a_version_without_a_score_is_never_promoted() -> None:
    decision = decide(evaluation(model=float("nan"), champion=None), SPEC)
    assert not decision.promote and "no pinball_p90@60min" in decision.reason
