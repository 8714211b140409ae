"""Online expert weighting: hand-computed pinball losses, Hedge and follow-the-leader weights, and the combination."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from slicewise.forecasting import experts
from slicewise.forecasting.experts import ExpertRule

NAN = math.nan


def test_losses_weights_and_the_leader_by_hand() -> None:
    # Two known windows, realised 1 and 0. Expert A is exact; B says 0 twice (under by 1 once: 0.9 x 1 at the
    # P90, 0 the other time, mean 0.45); C has no forecast.
    actual = np.array([1.0, 0.0])
    forecasts = np.array([[1.0, 0.0, NAN], [0.0, 0.0, NAN]])
    losses = experts.pinball_losses(actual, forecasts, 0.9)
    assert losses[:2].tolist() == pytest.approx([0.0, 0.45])
    assert math.isnan(losses[2])
    # Losses over their mean (0.225): 0 and 2, so eta 1 gives A e^0 and B e^-2, normalised; C nothing.
    hedge = experts.weights(losses, ExpertRule("hedge", eta=1.0))
    e = math.exp(-2.0)
    assert hedge.tolist() == pytest.approx([1 / (1 + e), e / (1 + e), 0.0])
    # eta 0: the plain average of the experts with a loss; the leader: all on A.
    assert experts.weights(losses, ExpertRule("hedge", eta=0.0)).tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert experts.weights(losses, ExpertRule("leader")).tolist() == [1.0, 0.0, 0.0]
    # A very large eta stays finite and picks the leader too.
    assert experts.weights(losses, ExpertRule("hedge", eta=1e6)).tolist() == pytest.approx([1.0, 0.0, 0.0])
    # No expert with a known loss: no weight at all.
    assert experts.weights(np.array([NAN, NAN]), ExpertRule("leader")).tolist() == [0.0, 0.0]


def test_combination_renormalises_over_the_experts_present() -> None:
    weight = np.array([0.75, 0.25, 0.0])
    forecasts = np.array([[0.2, 0.4, NAN], [NAN, 0.4, 1.0], [NAN, NAN, 1.0]])
    combined = experts.combine(forecasts, weight)
    # 0.75 x 0.2 + 0.25 x 0.4; only B where A is missing (C has no weight); nothing where only C forecasts.
    assert combined[:2].tolist() == pytest.approx([0.25, 0.4])
    assert math.isnan(combined[2])


def test_weights_are_fitted_per_quantile_and_the_result_does_not_cross() -> None:
    # History: realised 1.0 twice. At P50 expert 0 (forecast 1.0) is exact and expert 1 (0.5) is off; at P90
    # expert 1 (2.0, over by 1) costs 0.1 and expert 0 (0.5, under by 0.5) costs 0.45.
    history = np.array([[[1.0, 0.5], [0.5, 2.0]]] * 2)  # (windows, quantiles, experts)
    scored = np.array([[[0.8, 0.0], [0.1, 0.7]]])
    forecast, fitted = experts.combined_quantiles(
        np.array([1.0, 1.0]), history, scored, (0.5, 0.9), ExpertRule("leader")
    )
    assert fitted.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    # P50 from expert 0 (0.8), P90 from expert 1 (0.7) -> raised to the P50: no crossing.
    assert forecast[0].tolist() == pytest.approx([0.8, 0.8])


def test_rule_names_and_bad_rules() -> None:
    assert ExpertRule("hedge", eta=2.0, hours=1.0).name == "lstm_hedge2_1h"
    assert ExpertRule("leader", hours=0.0).name == "lstm_leader_all"
    with pytest.raises(ValueError, match="kind"):
        ExpertRule("median")
    with pytest.raises(ValueError, match="negative"):
        ExpertRule("hedge", eta=-1.0)


def test_a_rolling_origin_backtest_scores_each_rule_with_weights_fitted_before_the_cut(
    tmp_path: Path,
) -> None:
    pytest.importorskip("keras")
    import pandas as pd
    import yaml

    from slicewise.forecasting.backtest import panel_from_long, run_backtest
    from slicewise.forecasting.baselines import BASELINES
    from slicewise.forecasting.spec import parse_spec
    from tests.support.forecasting import synthetic_csv, tiny_spec_file

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path))
    rules = [ExpertRule("leader"), ExpertRule("hedge", eta=0.0, hours=0.0)]
    result = run_backtest(panel, spec, 0.5, 15, folds=3, expert_rules=rules)
    for fold in result["folds"]:
        for rule in rules:
            scores = fold["models"][rule.name]
            assert scores["n"] == fold["models"]["lstm"]["n"] > 0
            assert math.isfinite(scores["pinball_p90"]) and math.isfinite(scores["mae"])
            for mix in fold["expert_weights"][rule.name].values():
                assert len(mix) == 1 + len(BASELINES) and sum(mix) == pytest.approx(1.0, abs=1e-3)
        leader = fold["expert_weights"]["lstm_leader_1h"]["p90"]
        assert sorted(leader)[-1] == 1.0 and sorted(leader)[-2] == 0.0
        # eta 0: the plain average of every expert with a forecast on the known windows (less than a day of
        # history: the seasonal baseline has none).
        uniform = fold["expert_weights"]["lstm_hedge0_all"]["p90"]
        assert uniform[list(BASELINES).index("seasonal_naive_24h") + 1] == 0.0
        assert set(uniform) == {0.0, round(1 / len(BASELINES), 4)}
