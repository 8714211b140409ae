"""The demo's settings against the simulated fleet it runs on: the cycle must find a change to roll out at any
hour of the week, or `make demo` (and its test in CI) shows no rollout."""

from __future__ import annotations

import numpy as np

from slicewise.demo import DEMO_SETTINGS
from slicewise.forecasting.baselines import BASELINES
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.load import series_load

# The node the demo's thresholds rule is meant to change (include/config/simulator.yaml).
LIGHT_NODE = "sim-a100-80-1"
MONDAY = 1796601600  # 2026-12-07 00:00 UTC
WEEKS = 3


def test_the_light_node_stays_under_the_demos_band_at_every_minute_even_on_the_highest_baseline() -> None:
    # Untrusted, the demo acts on the gate's best baseline; p90_last_hour covers the most of them (a champion's
    # P90 put this node at 41 % in CI, where p90_last_hour reaches about 60 % on weekday peaks), so the band must clear
    # it at any minute the demo may plan at (its cycle starts whenever `make demo` is run).
    fleet = Fleet.default()
    node = [n.name for n in fleet.nodes].index(LIGHT_NODE)
    steps = np.arange(MONDAY, MONDAY + WEEKS * 7 * 86400, 60)
    engine = series_load(fleet, steps).engine[:, fleet.layout.series_node == node].T  # (GPUs, steps)
    low_util = float(DEMO_SETTINGS["SLICEWISE_PLANNER_LOW_UTIL"])

    per_gpu = BASELINES["p90_last_hour"](engine, step_s=60, horizon_steps=60)
    node_forecast = per_gpu.mean(axis=0)[60:]  # from the first full hour on

    assert not np.isnan(node_forecast).any()
    assert node_forecast.max() > 0.5  # the band of 50 % the demo had before is crossed: the check has teeth
    minutes_over = int(np.sum(node_forecast >= low_util))
    assert minutes_over == 0, f"{minutes_over} minutes at or over planner_low_util={low_util}"
