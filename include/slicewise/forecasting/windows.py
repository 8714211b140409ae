"""From GPU sample frames to a regular panel, and from the panel to training / prediction windows.

A *panel* holds one row per GPU series (whole GPU or MIG instance) on a regular time grid, NaN where a sample is
missing. A *window* is what the model sees at step ``t``: the last ``window_steps`` steps of features, ending
at ``t``; its targets are the mean load over the next ``h`` steps for each horizon (see
:func:`slicewise.forecasting.baselines.future_mean`), so a window never looks past ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from slicewise import schema
from slicewise.forecasting.baselines import future_mean, mean_last_hour, p90_last_hour

if TYPE_CHECKING:
    import pandas as pd

    from slicewise.forecasting.spec import ForecasterSpec

#: Per-step input features, in order. Missing load is fed as 0 with ``observed`` = 0, so gaps and the padding
#: before a new GPU's first sample are visible to the model rather than read as idle time. ``fleet_load`` is
#: the mean load of every series of the fleet at that step (see :meth:`Panel.fleet`): how busy the fleet is
#: tells a quiet GPU whether a burst is likely, which its own quiet history cannot.
FEATURES = (
    "load",
    "observed",
    "memory",
    "hour_mean",
    "hour_p90",
    "fleet_load",
    "hour_sin",
    "hour_cos",
    "dow_sin",
    "dow_cos",
)
#: Features per series and step (the rest, the fleet's load and the clock, are shared by all series).
SERIES_FEATURES = 5
#: Features shared by all series at a step: ``fleet_load`` and the clock.
SHARED_FEATURES = len(FEATURES) - SERIES_FEATURES


@dataclass(frozen=True)
class Panel:
    keys: list[tuple[str, int, str]]  # (hostname, gpu, gpu_instance_id) per row
    timestamps: np.ndarray  # int64 unix seconds, regular, step_s apart
    load: np.ndarray  # (n_series, n_steps) float64, NaN = missing
    memory: np.ndarray  # (n_series, n_steps) framebuffer used / capacity, NaN = missing
    step_s: int
    #: (n_steps,) the whole fleet's mean load per step; None: the mean of this panel's own rows. Kept by
    #: :func:`subsample_rows` and :meth:`head`, so a sample of series still sees the fleet it came from.
    fleet_load: np.ndarray | None = None

    def fleet(self) -> np.ndarray:
        """(n_steps,) the fleet's mean observed load per step, 0 where no series was observed."""
        if self.fleet_load is not None:
            return self.fleet_load
        observed = ~np.isnan(self.load)
        counts = observed.sum(axis=0)
        sums = np.where(observed, self.load, 0.0).sum(axis=0)
        return np.divide(sums, counts, out=np.zeros(self.load.shape[1]), where=counts > 0)

    def hour_steps(self) -> int:
        """Steps in an hour of this panel's grid (at least one)."""
        return max(1, 3600 // self.step_s)

    def head(self, steps: int) -> Panel:
        """The panel's first ``steps`` steps (the past as of step ``steps``)."""
        return Panel(
            self.keys,
            self.timestamps[:steps],
            self.load[:, :steps],
            self.memory[:, :steps],
            self.step_s,
            self.fleet()[:steps],
        )


def panel_from_frame(frame: pd.DataFrame, signal: str, step_s: int) -> Panel:
    """Pivot a GPU sample frame onto a regular grid from its first to its last timestamp (inclusive)."""
    import pandas as pd

    if frame.empty:
        return Panel([], np.empty(0, dtype=np.int64), np.empty((0, 0)), np.empty((0, 0)), step_s)
    seconds = frame[schema.TIMESTAMP].astype("int64").to_numpy() // 1_000_000_000
    # MIG instances and whole GPUs differ in size: memory as a share of what the series could use.
    used, free = frame["fb_used_mib"].to_numpy(float), frame["fb_free_mib"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        memory = used / (used + free)
    tidy = pd.DataFrame(
        {
            "key": list(
                zip(
                    frame["hostname"].astype(str),
                    frame["gpu"].astype(int),
                    frame["gpu_instance_id"].astype(str),
                    strict=True,
                )
            ),
            "step": (seconds - seconds.min()) // step_s,
            "load": frame[signal].to_numpy(float),
            "memory": memory,
        }
    )
    keys = sorted(set(tidy["key"]))
    row_of = {key: i for i, key in enumerate(keys)}
    n_steps = int(tidy["step"].max()) + 1
    load = np.full((len(keys), n_steps), np.nan)
    mem = np.full((len(keys), n_steps), np.nan)
    rows = tidy["key"].map(row_of).to_numpy()
    steps = tidy["step"].to_numpy()
    load[rows, steps] = tidy["load"].to_numpy()
    mem[rows, steps] = tidy["memory"].to_numpy()
    timestamps = seconds.min() + np.arange(n_steps, dtype=np.int64) * step_s
    return Panel(keys, timestamps, load, mem, step_s)


def time_features(timestamps: np.ndarray) -> np.ndarray:
    """(n_steps, 4): hour-of-day and day-of-week as points on circles (23:59 is next to 00:00)."""
    seconds_of_day = timestamps % 86_400
    day_of_week = (timestamps // 86_400 + 3) % 7  # 1970-01-01 was a Thursday: Monday = 0
    hour_angle = 2 * np.pi * seconds_of_day / 86_400
    dow_angle = 2 * np.pi * day_of_week / 7
    return np.stack([np.sin(hour_angle), np.cos(hour_angle), np.sin(dow_angle), np.cos(dow_angle)], axis=1)


@dataclass(frozen=True)
class Windows:
    inputs: np.ndarray  # (n, window_steps, len(FEATURES)) float32
    targets: np.ndarray  # (n, n_horizons) float32; NaN only when built with require_targets=False
    series: np.ndarray  # (n,) row of the panel
    step: np.ndarray  # (n,) step index t the window ends at

    def subset(self, index: np.ndarray) -> Windows:
        """The windows at ``index`` (positions or a boolean mask), in that order."""
        return Windows(self.inputs[index], self.targets[index], self.series[index], self.step[index])

    def ending_before(self, step: int) -> Windows:
        """The windows that end before ``step``."""
        return self.subset(np.flatnonzero(self.step < step))


def make_windows(
    panel: Panel, spec: ForecasterSpec, *, stride: int = 1, first_step: int = 0, require_targets: bool = True
) -> Windows:
    """Windows ending at steps ``first_step, first_step + stride, ...`` of every series.

    A window is kept when at least ``spec.min_observed_steps`` of its steps were observed (short or new series
    are left-padded with unobserved steps) and, if ``require_targets``, every horizon's target is known.
    """
    n_series, n_steps = panel.load.shape
    width = spec.window_steps
    horizons = spec.horizon_steps()
    targets = (
        np.stack([future_mean(panel.load, h) for h in horizons], axis=-1)
        if n_steps
        else np.empty((n_series, 0, len(horizons)))
    )
    observed = ~np.isnan(panel.load)
    # The last hour's mean and P90 as inputs: the strongest baselines, so the model only has to learn what to add.
    recent = {"step_s": panel.step_s, "horizon_steps": 1}
    per_step = np.stack(
        [
            np.nan_to_num(panel.load),
            observed.astype(float),
            np.nan_to_num(panel.memory),
            np.nan_to_num(mean_last_hour(panel.load, **recent)) if n_steps else panel.load,
            np.nan_to_num(p90_last_hour(panel.load, **recent)) if n_steps else panel.load,
        ],
        axis=-1,
    ).astype(np.float32)  # (n_series, n_steps, 5); float32: windows are many and the model reads float32
    fleet = panel.fleet()[:, None] if n_steps else np.empty((0, 1))
    shared = np.concatenate([fleet, time_features(panel.timestamps)], axis=1).astype(np.float32)
    # Left-pad so a window may start before the panel does (unobserved, with extrapolated clock features and the
    # fleet's load as at its first step).
    pad_shared = (
        np.concatenate(
            [
                np.full((width - 1, 1), fleet[0, 0]),
                time_features(panel.timestamps[0] - np.arange(width - 1, 0, -1) * panel.step_s),
            ],
            axis=1,
        ).astype(np.float32)
        if n_steps
        else np.empty((0, SHARED_FEATURES), np.float32)
    )
    padded = np.concatenate([np.zeros((n_series, width - 1, SERIES_FEATURES), np.float32), per_step], axis=1)
    padded_shared = np.concatenate([pad_shared, shared], axis=0)
    padded_observed = np.concatenate([np.zeros((n_series, width - 1), dtype=bool), observed], axis=1)
    counts = np.concatenate([np.zeros((n_series, 1)), np.cumsum(padded_observed, axis=1)], axis=1)

    ends = np.arange(first_step, n_steps, stride)
    inputs, outputs, rows, steps = [], [], [], []
    for t in ends:
        seen = counts[:, t + width] - counts[:, t]  # observed steps in the window ending at t
        keep = seen >= spec.min_observed_steps
        if require_targets:
            keep &= ~np.isnan(targets[:, t, :]).any(axis=1)
        if not keep.any():
            continue
        chosen = np.flatnonzero(keep)
        block = padded[chosen, t : t + width, :]
        shared_block = np.broadcast_to(padded_shared[t : t + width], (len(chosen), width, SHARED_FEATURES))
        inputs.append(np.concatenate([block, shared_block], axis=-1))
        outputs.append(targets[chosen, t, :])
        rows.append(chosen)
        steps.append(np.full(len(chosen), t))
    if not inputs:
        return Windows(
            np.empty((0, width, len(FEATURES)), np.float32),
            np.empty((0, len(horizons)), np.float32),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
        )
    return Windows(
        np.concatenate(inputs).astype(np.float32),
        np.concatenate(outputs).astype(np.float32),
        np.concatenate(rows).astype(np.int64),
        np.concatenate(steps).astype(np.int64),
    )


def subsample(panel: Panel, max_series: int, seed: int) -> Panel:
    """At most ``max_series`` rows of the panel, chosen at random (seeded); the panel itself when smaller.

    Bounds the memory and time of training and evaluation on fleets of many thousands of GPUs: one global model
    learns from a sample of series as well as from all of them.
    """
    n_series = len(panel.keys)
    if n_series <= max_series:
        return panel
    rows = np.sort(np.random.default_rng(seed).choice(n_series, size=max_series, replace=False))
    return subsample_rows(panel, rows)


def subsample_rows(panel: Panel, rows: np.ndarray) -> Panel:
    """The panel restricted to ``rows`` (in that order); the fleet's load stays that of the whole panel."""
    return Panel(
        [panel.keys[i] for i in rows],
        panel.timestamps,
        panel.load[rows],
        panel.memory[rows],
        panel.step_s,
        panel.fleet(),
    )
