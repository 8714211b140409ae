"""Panels and windows: regular grids, gaps, short and new series, no look-ahead."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml

from slicewise import schema
from slicewise.forecasting.spec import MODELS_DIR, ForecasterSpec, SpecError, load_specs, parse_spec
from slicewise.forecasting.windows import (
    FEATURES,
    Panel,
    make_windows,
    panel_from_frame,
    subsample_rows,
    time_features,
)

T0 = 1_764_410_400  # a Saturday 10:00 UTC


def spec(**overrides: object) -> ForecasterSpec:
    base = load_specs()[0]
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def test_shipped_specs_parse_and_name_distinct_models() -> None:
    specs = load_specs()
    assert specs and len({s.name for s in specs}) == len(specs)
    assert all(0.5 in s.quantiles and s.upper_quantile > 0.5 for s in specs)


def test_a_spec_with_impossible_values_is_rejected_with_the_reason() -> None:
    raw = {
        "name": "x",
        "signal": "engine_active",
        "step_s": 60,
        "window_steps": 10,
        "min_observed_steps": 20,
        "horizons_minutes": [15],
        "quantiles": [0.9],
        "architecture": {"kind": "transformer", "lstm_units": 4, "dense_units": 4, "dropout": 0.0},
        "training": {
            "learning_rate": 0.01,
            "batch_size": 8,
            "epochs_per_update": 1,
            "time_budget_s": 5,
            "window_stride": 1,
            "replay_ratio": 1.0,
            "max_windows": 100,
        },
        "promotion": {"metric": "pinball_p90", "horizon_minutes": 60, "margin": 0.0},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "bad.yaml")
    message = str(info.value)
    assert "bad.yaml" in message and "architecture.kind" in message and "0.5" in message
    assert "min_observed_steps" in message and "promotion.horizon_minutes" in message


def frame(rows: list[tuple[str, int, str, int, float]]) -> pd.DataFrame:
    data = {c: [] for c in schema.GPU_COLUMNS}  # type: dict[str, list[object]]
    for host, gpu, gi, ts, load in rows:
        values = {c: "" for c in schema.GPU_LABELS} | {"hostname": host, "gpu": gpu, "gpu_instance_id": gi}
        values |= dict.fromkeys(schema.GPU_FIELDS, 1.0) | {
            "engine_active": load,
            "fb_used_mib": 25.0,
            "fb_free_mib": 75.0,
        }
        values[schema.TIMESTAMP] = pd.Timestamp(ts, unit="s", tz="UTC")
        for c in schema.GPU_COLUMNS:
            data[c].append(values[c])
    return pd.DataFrame(data).astype(schema.GPU_DTYPES)


def test_panel_puts_series_on_a_regular_grid_with_nan_for_gaps() -> None:
    rows = [("a", 0, "", T0 + 60 * i, 0.1 * i) for i in (0, 1, 3)] + [("b", 1, "2", T0 + 60 * 2, 0.7)]
    panel = panel_from_frame(frame(rows), "engine_active", 60)
    assert panel.keys == [("a", 0, ""), ("b", 1, "2")]
    assert panel.timestamps.tolist() == [T0, T0 + 60, T0 + 120, T0 + 180]
    np.testing.assert_allclose(panel.load[0], [0.0, 0.1, np.nan, 0.3])
    np.testing.assert_allclose(panel.load[1], [np.nan, np.nan, 0.7, np.nan])
    assert panel.memory[0, 0] == pytest.approx(0.25)


def test_time_features_put_midnight_next_to_a_minute_before() -> None:
    feats = time_features(np.array([T0 - 10 * 3600 - 60, T0 - 10 * 3600]))  # 23:59 Fri, 00:00 Sat
    assert np.linalg.norm(feats[0, :2] - feats[1, :2]) < 0.01


def small_panel(load: np.ndarray) -> Panel:
    n, steps = load.shape
    return Panel([("h", i, "") for i in range(n)], T0 + 60 * np.arange(steps), load, np.zeros_like(load), 60)


def test_windows_have_the_feature_layout_and_targets_are_future_means() -> None:
    load = np.tile(np.arange(40, dtype=float) / 100, (2, 1))
    s = spec(window_steps=6, min_observed_steps=3, horizons_minutes=(2, 4))
    windows = make_windows(small_panel(load), s)
    assert windows.inputs.shape[1:] == (6, len(FEATURES))
    first = np.flatnonzero((windows.series == 0) & (windows.step == 10))[0]
    # the window ends at step 10 and holds steps 5..10; targets are the means of steps 11-12 and 11-14
    np.testing.assert_allclose(windows.inputs[first, :, 0], load[0, 5:11], rtol=1e-6)
    np.testing.assert_allclose(windows.targets[first], [0.115, 0.125], rtol=1e-5)


def test_future_load_never_leaks_into_a_window() -> None:
    rng = np.random.default_rng(1)
    load = rng.random((3, 50))
    s = spec(window_steps=8, min_observed_steps=4, horizons_minutes=(5,))
    before = make_windows(small_panel(load), s, require_targets=False)
    changed = load.copy()
    changed[:, 30:] = 9.0
    after = make_windows(small_panel(changed), s, require_targets=False)
    early = before.step < 30
    np.testing.assert_array_equal(before.inputs[early], after.inputs[early])


def test_short_and_new_series_are_padded_and_kept_once_observed_enough() -> None:
    load = np.full((1, 30), np.nan)
    load[0, 20:] = 0.5  # a GPU that appeared at step 20
    s = spec(window_steps=12, min_observed_steps=5, horizons_minutes=(2,))
    windows = make_windows(small_panel(load), s)
    assert windows.step.min() == 24  # 5 observed steps: 20..24
    first = windows.inputs[np.argmin(windows.step)]
    assert first[:, FEATURES.index("observed")].tolist() == [0.0] * 7 + [1.0] * 5
    assert (first[:7, FEATURES.index("load")] == 0).all()


def test_windows_without_known_targets_are_dropped_unless_asked_for() -> None:
    load = np.full((1, 20), 0.3)
    s = spec(window_steps=5, min_observed_steps=5, horizons_minutes=(3,))
    with_targets = make_windows(small_panel(load), s)
    assert (
        with_targets.step.max() == 16
    )  # steps 17..19 are followed by fewer than 3 samples... see future_mean
    everything = make_windows(small_panel(load), s, require_targets=False)
    assert everything.step.max() == 19


def test_an_empty_panel_gives_no_windows() -> None:
    windows = make_windows(small_panel(np.empty((0, 0))), spec())
    assert windows.inputs.shape[0] == 0


def test_every_window_sees_the_whole_fleets_mean_load_even_from_a_sample_of_series() -> None:
    load = np.array(
        [
            [0.0, 0.2, 0.4, np.nan, 0.8, 0.1],
            [0.6, np.nan, 0.2, np.nan, 0.4, 0.3],
            [np.nan, np.nan, np.nan, np.nan, 0.9, 0.5],  # a GPU that joins at step 4
        ]
    )
    panel = small_panel(load)
    # The mean of the series observed at each step; 0 where none is (step 3).
    expected = [0.3, 0.2, 0.3, 0.0, 0.7, 0.3]
    np.testing.assert_allclose(panel.fleet(), expected)
    s = spec(window_steps=4, min_observed_steps=1, horizons_minutes=(1,))
    fleet = FEATURES.index("fleet_load")
    alone = subsample_rows(panel, np.array([2]))  # the new GPU alone: its own load is not the fleet's
    windows = make_windows(alone, s, require_targets=False)
    last = windows.inputs[np.argmax(windows.step)]
    np.testing.assert_allclose(last[:, fleet], expected[2:], rtol=1e-6)
    # The past of a panel keeps the fleet it was cut from.
    np.testing.assert_allclose(subsample_rows(panel, np.array([0])).head(3).fleet(), expected[:3])


def test_a_window_before_the_panel_starts_sees_the_fleet_as_at_its_first_step() -> None:
    panel = small_panel(np.array([[0.4, 0.6, 0.8]]))
    s = spec(window_steps=4, min_observed_steps=1, horizons_minutes=(1,))
    first = make_windows(panel, s, require_targets=False).inputs[0]
    np.testing.assert_allclose(first[:, FEATURES.index("fleet_load")], [0.4, 0.4, 0.4, 0.4], rtol=1e-6)


def test_a_spec_may_add_each_known_anchor_once() -> None:
    raw = yaml.safe_load((MODELS_DIR / "gpu_load_forecaster.yaml").read_text())
    raw["architecture"].pop("extra_anchors", None)
    assert parse_spec(raw).architecture.extra_anchors == ()  # optional: the last hour's anchors only
    raw["architecture"]["extra_anchors"] = ["window_max", "fleet_load"]
    assert parse_spec(raw).architecture.extra_anchors == ("window_max", "fleet_load")
    for wrong in (["fleet_p90"], ["window_max", "window_max"]):
        raw["architecture"]["extra_anchors"] = wrong
        with pytest.raises(
            SpecError, match="extra_anchors must name each of fleet_load, window_max at most once"
        ):
            parse_spec(raw)
