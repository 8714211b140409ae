"""Backtests on long-format traces: resampling onto a grid, the CLI's exit codes, and end-to-end runs."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slicewise.cli import main
from slicewise.forecasting.backtest import backtest_spec, panel_from_long, run_backtest
from slicewise.forecasting.baselines import BASELINES
from slicewise.forecasting.spec import load_specs
from tests.support.forecasting import T0, synthetic_csv, tiny_spec_file

TRACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"
METRICS = ("mae", "smape", "mase", "pinball_p50", "pinball_p90", "under_provision_rate_p90", "n")


def long(rows: Sequence[tuple[float, str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["ts", "pod", "util"])


# --- panel_from_long ------------------------------------------------------------------------------------------


def test_57s_sampling_onto_60s_averages_shared_buckets_and_leaves_no_gaps() -> None:
    times = T0 + 57 * np.arange(100)
    values = np.arange(100, dtype=float)
    frame = pd.DataFrame({"ts": times, "pod": "a", "util": values})
    panel = panel_from_long(frame, "ts", "pod", "util", 60, 1.0)
    n_steps = (times[-1] - T0) // 60 + 1
    assert panel.load.shape == (1, n_steps)
    assert panel.timestamps.tolist() == (T0 + 60 * np.arange(n_steps)).tolist()
    # 57 s < 60 s: every bucket holds one or two samples, never none.
    assert not np.isnan(panel.load).any()
    buckets = (times - T0) // 60
    expected = [values[buckets == k].mean() for k in range(n_steps)]
    np.testing.assert_allclose(panel.load[0], expected)
    assert (np.bincount(buckets) == 2).sum() > 0  # the case that needs a mean did occur


def test_gaps_become_nan_and_value_scale_divides() -> None:
    rows = [(T0, "a", 50.0), (T0 + 60, "a", 10.0), (T0 + 70, "a", 30.0), (T0 + 300, "a", 100.0)]
    panel = panel_from_long(long(rows), "ts", "pod", "util", 60, 100.0)
    np.testing.assert_allclose(panel.load[0], [0.5, 0.2, np.nan, np.nan, np.nan, 1.0])
    assert np.isnan(panel.memory).all()


def test_series_of_different_lengths_share_one_grid_from_global_min_to_max() -> None:
    rows = [(T0 + 60 * i, "late", 0.5) for i in range(5, 20)] + [
        (T0 + 60 * i + 3, "early", 0.1) for i in range(8)
    ]
    panel = panel_from_long(long(rows), "ts", "pod", "util", 60, 1.0)
    assert panel.keys == [("early", 0, ""), ("late", 0, "")]  # sorted ids
    assert panel.load.shape == (2, 20) and panel.timestamps[0] == T0
    assert not np.isnan(panel.load[0, :8]).any() and np.isnan(panel.load[0, 8:]).all()
    assert np.isnan(panel.load[1, :5]).all() and not np.isnan(panel.load[1, 5:]).any()


def test_nan_values_are_skipped_and_datetimes_read_like_seconds() -> None:
    rows = [(T0, "a", np.nan), (T0 + 10, "a", 0.4), (T0 + 60, "a", np.nan), (T0 + 120, "b", 0.9)]
    by_seconds = panel_from_long(long(rows), "ts", "pod", "util", 60, 1.0)
    np.testing.assert_allclose(by_seconds.load, [[0.4, np.nan, np.nan], [np.nan, np.nan, 0.9]])
    as_dates = long(rows).assign(ts=lambda f: pd.to_datetime(f["ts"], unit="s", utc=True))
    by_dates = panel_from_long(as_dates, "ts", "pod", "util", 60, 1.0)
    np.testing.assert_array_equal(by_dates.timestamps, by_seconds.timestamps)
    np.testing.assert_allclose(by_dates.load, by_seconds.load)


@pytest.mark.parametrize(
    ("frame", "kwargs", "message"),
    [
        (long([(T0, "a", 1.0)]), {"value_col": "nope"}, "'nope' not found"),
        (long([(T0, "a", 1.0)]), {"step_s": 0}, "step_s"),
        (long([(T0, "a", 1.0)]), {"value_scale": 0.0}, "value_scale"),
        (long([(T0, "a", "busy")]), {}, "not numeric"),
        (long([(T0, "a", math.inf)]), {}, "infinite"),
        (long([(T0, "a", 1.0), (T0 + 86_400, "b", 1.0)]), {"max_cells": 1000}, "cells"),
    ],
)
def test_unusable_input_is_a_value_error_that_names_the_problem(
    frame: pd.DataFrame, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"timestamp_col": "ts", "series_col": "pod", "value_col": "util"}
    args |= {"step_s": 60, "value_scale": 1.0} | kwargs
    with pytest.raises(ValueError, match=message):
        panel_from_long(frame, **args)


def test_run_backtest_refuses_a_panel_too_short_for_any_window_before_loading_tensorflow() -> None:
    panel = panel_from_long(long([(T0 + 60 * i, "a", 0.5) for i in range(30)]), "ts", "pod", "util", 60, 1.0)
    with pytest.raises(ValueError, match="too little data"):
        run_backtest(panel, load_specs()[0], 0.7, 15)
    with pytest.raises(ValueError, match="train_fraction"):
        run_backtest(panel, load_specs()[0], 1.0, 15)


@pytest.mark.parametrize("calibration_gain", [0.0, 0.5])
def test_a_reference_model_is_fitted_before_each_fold_on_the_windows_the_model_trains_on(
    tmp_path: Path, calibration_gain: float
) -> None:
    import yaml

    from slicewise.forecasting.evaluation import held_out_windows
    from slicewise.forecasting.spec import parse_spec
    from slicewise.forecasting.training import calibration_start
    from slicewise.forecasting.windows import Windows

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    raw = {**yaml.safe_load(spec_path.read_text()), "calibration_gain": calibration_gain}
    spec = parse_spec(raw, str(spec_path))
    fitted_on: list[np.ndarray] = []

    def zero(train: Windows, _spec: Any) -> Any:
        fitted_on.append(train.step.copy())
        return lambda inputs: np.zeros((len(inputs), len(_spec.horizons_minutes), len(_spec.quantiles)))

    result = run_backtest(panel, spec, 0.5, 15, folds=3, references={"zero": zero})

    assert len(fitted_on) == 3  # afresh before every fold
    for fold, steps in zip(result["folds"], fitted_on, strict=True):
        narrowed = dataclasses.replace(spec, horizons_minutes=(15,))
        (horizon_steps,) = narrowed.horizon_steps()
        if calibration_gain:
            # Expanding window, and no target the fold's calibration hour or the fold itself could know.
            before = calibration_start(narrowed, fold["cut"], panel.step_s)
            assert len(steps) and (steps + horizon_steps < before).all()
        else:
            # Nothing is fitted on the hour before the cut: the model and the reference train up to the cut,
            # the newest window's target ending right before it.
            assert len(steps) and (steps + horizon_steps < fold["cut"]).all()
            assert steps.max() + horizon_steps > calibration_start(narrowed, fold["cut"], panel.step_s)
        scored = held_out_windows(panel, narrowed, fold["cut"])
        actual = scored.targets[scored.step < fold["end"], 0]
        zero_scores = fold["models"]["zero"]
        assert zero_scores["n"] == fold["models"]["lstm"]["n"] == len(actual)
        assert zero_scores["mae"] == pytest.approx(float(np.mean(np.abs(actual))))  # a forecast of 0
        assert zero_scores["under_provision_rate_p90"] == pytest.approx(float(np.mean(actual > 0)))
    assert len(fitted_on[0]) < len(fitted_on[1]) < len(fitted_on[2])


def test_refit_each_fold_trains_a_fresh_model_on_every_window_before_each_fold(tmp_path: Path) -> None:
    import yaml

    from slicewise.forecasting.spec import parse_spec
    from slicewise.forecasting.windows import make_windows

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = backtest_spec(parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path)), 15, 60)
    stride = spec.training.window_stride

    def windows_before(step: int) -> int:
        return len(make_windows(panel.head(step), spec, stride=stride).inputs)

    updated = run_backtest(panel, spec, 0.5, 15, folds=3)
    refitted = run_backtest(panel, spec, 0.5, 15, folds=3, refit_each_fold=True)

    # The incremental update trains on the windows since the last fold and a sample of older ones (a replay
    # bounded by the spec's ratio and max_windows); the refit trains afresh on all of them.
    cuts = [fold["cut"] for fold in refitted["folds"]]
    assert [f["train_windows"] for f in refitted["folds"]] == [windows_before(cut) for cut in cuts]
    assert [f["cut"] for f in updated["folds"]] == cuts
    assert updated["folds"][0]["train_windows"] == refitted["folds"][0]["train_windows"]
    for index in (1, 2):
        new = windows_before(cuts[index]) - windows_before(cuts[index - 1])
        assert new < updated["folds"][index]["fitted_windows"] < windows_before(cuts[index])
        assert refitted["folds"][index]["fitted_windows"] == windows_before(cuts[index])


def test_update_epochs_train_each_update_after_the_first_fit_for_that_many_epochs(tmp_path: Path) -> None:
    import dataclasses

    import yaml

    from slicewise.forecasting.spec import parse_spec

    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = backtest_spec(parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path)), 15, 60)
    spec = dataclasses.replace(spec, training=dataclasses.replace(spec.training, epochs_per_update=3))

    result = run_backtest(panel, spec, 0.5, 15, folds=3, time_budget_s=600, update_epochs=1)

    assert [fold["epochs"] for fold in result["folds"]] == [3, 1, 1]
    assert [f["epochs"] for f in run_backtest(panel, spec, 0.5, 15, folds=3, time_budget_s=600)["folds"]] == [
        3,
        3,
        3,
    ]


def test_each_fold_reports_the_fleets_mean_load_over_its_span_and_the_hour_before_its_cut(
    tmp_path: Path,
) -> None:
    import yaml

    from slicewise.forecasting.spec import parse_spec

    # Three pods whose load rises by 0.001 a step, so a span's mean is its middle step's: a wrong span shows.
    rows = [(T0 + 60 * step, f"pod-{pod}", step / 10) for pod in range(3) for step in range(8 * 60)]
    panel = panel_from_long(long(rows), "ts", "pod", "util", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = backtest_spec(parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path)), 15, 60)

    result = run_backtest(panel, spec, 0.5, 15, folds=2, time_budget_s=600, update_epochs=1)

    (first, second) = result["folds"]
    assert (first["cut"], first["end"], second["end"]) == (240, 360, 480)
    assert first["fleet_load"] == pytest.approx(0.2995)  # steps 240-359
    assert first["fleet_load_before"] == pytest.approx(0.2095)  # steps 180-239
    assert second["fleet_load"] == pytest.approx(0.4195)  # steps 360-479
    assert second["fleet_load_before"] == pytest.approx(0.3295)  # steps 300-359


def test_every_update_trains_on_the_windows_whose_targets_became_known_since_the_last(tmp_path: Path) -> None:
    import itertools

    import yaml

    from slicewise.forecasting.spec import parse_spec
    from slicewise.forecasting.training import training_end
    from slicewise.forecasting.windows import make_windows

    # Folds of an hour at a 60-minute horizon: the windows ending in the hour before an update's training end
    # have no known target then, so only the next update can train on them. An update that skipped them
    # (marking training done up to its training end) would find no new window at all.
    csv = synthetic_csv(tmp_path / "trace.csv", hours=12, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    spec_path = tiny_spec_file(tmp_path / "spec.yaml")
    spec = backtest_spec(parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path)), 60, 60)
    stride, horizon = spec.training.window_stride, spec.horizon_steps()[0]

    result = run_backtest(panel, spec, 0.5, 60, folds=6, time_budget_s=600)

    known_ends = [training_end(spec, fold["cut"], panel.step_s) - horizon for fold in result["folds"]]
    assert all(later - earlier <= horizon for earlier, later in itertools.pairwise(known_ends))
    for index, fold in enumerate(result["folds"][1:], start=1):
        since = make_windows(panel, spec, stride=stride, first_step=known_ends[index - 1])
        expected = int(np.sum(since.step < known_ends[index]))
        assert expected > 0
        assert fold["new_windows"] == expected
        assert fold["epochs"] > 0
        assert fold["fitted_windows"] > fold["new_windows"]  # and a replay of older windows


# --- the CLI ----------------------------------------------------------------------------------------------------


def cli_args(csv: Path, *extra: str, fraction: str = "0.7") -> list[str]:
    return [
        "forecast-backtest",
        "--csv",
        str(csv),
        "--timestamp-col",
        "timestamp_anon",
        "--series-col",
        "container_ip",
        "--value-col",
        "value",
        "--train-fraction",
        fraction,
        "--horizon-minutes",
        "15",
        "--value-scale",
        "100",
        *extra,
    ]


@pytest.mark.parametrize(
    ("case", "fraction"),
    [("missing file", "0.7"), ("missing column", "0.7"), ("fraction 0", "0"), ("fraction 1.5", "1.5"),
     ("too little data", "0.7"), ("not numeric", "0.7"), ("bad spec", "0.7")],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line_on_stderr(
    case: str, fraction: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "trace.csv"
    extra: list[str] = []
    if case == "missing column":
        pd.DataFrame({"timestamp_anon": [T0], "value": [1.0], "pod": ["a"]}).to_csv(csv, index=False)
    elif case == "too little data":
        synthetic_csv(csv, hours=0.25, n_series=1)
    elif case == "not numeric":
        pd.DataFrame({"timestamp_anon": [T0], "value": ["busy"], "container_ip": ["a"]}).to_csv(
            csv, index=False
        )
    elif case != "missing file":
        synthetic_csv(csv, hours=1, n_series=1)
    if case == "bad spec":
        (tmp_path / "spec.yaml").write_text("name: x\n")
        extra = ["--spec", str(tmp_path / "spec.yaml")]
    code = main(cli_args(csv, *extra, fraction=fraction))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("forecast-backtest: ")


def test_json_backtest_on_a_synthetic_trace_scores_the_model_and_every_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("keras")
    csv, spec = synthetic_csv(tmp_path / "trace.csv"), tiny_spec_file(tmp_path / "spec.yaml")
    code = main(cli_args(csv, "--spec", str(spec), "--json"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1  # exactly one JSON object
    result = json.loads(out)
    assert result["horizon_minutes"] == 15
    assert result["train_windows"] > 0 and result["test_windows"] > 0 and result["train_seconds"] >= 0
    assert set(result["models"]) == {"lstm", "lstm_uncalibrated", *BASELINES}
    for name, scores in result["models"].items():
        assert set(METRICS) <= set(scores), name
        assert scores["n"] > 0, name
        assert all(scores[m] is not None and math.isfinite(scores[m]) for m in METRICS), name
        assert 0 <= scores["under_provision_rate_p90"] <= 1
    # The table form reads the same result: every model on a row, a winner marked.
    code = main(cli_args(csv, "--spec", str(spec)))
    table = capsys.readouterr().out
    assert code == 0 and all(name in table for name in result["models"]) and "*" in table


@pytest.mark.traces
def test_backtest_on_the_alibaba_genai_trace_is_sane(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("keras")
    trace = TRACES / "alibaba_gentd26_gpu_util_dev.csv"
    if not trace.is_file():
        pytest.skip(
            f"public GPU trace not found: {trace} (expected in ../shared/data/traces next to the checkout)"
        )
    code = main([*cli_args(trace, "--json", "--time-budget-s", "5")])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert set(result["models"]) == {"lstm", "lstm_uncalibrated", *BASELINES}
    assert result["train_windows"] > 0 and result["test_windows"] > 0
    lstm = result["models"]["lstm"]
    assert lstm["n"] > 0 and all(lstm[m] is not None and math.isfinite(lstm[m]) for m in METRICS)
    for scores in result["models"].values():
        rate = scores["under_provision_rate_p90"]
        assert rate is None or 0 <= rate <= 1
