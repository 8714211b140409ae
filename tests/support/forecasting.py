"""Forecaster test data: a small spec (in code and as a file) and a synthetic pod-utilisation CSV."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from slicewise.forecasting.spec import MODELS_DIR, Architecture, ForecasterSpec, load_specs

T0 = 1_764_410_400  # a Saturday 10:00 UTC


def tiny_spec(kind: str = "lstm") -> ForecasterSpec:
    base = load_specs()[0]
    return dataclasses.replace(
        base,
        window_steps=8,
        horizons_minutes=(15, 60),
        architecture=Architecture(kind=kind, lstm_units=8, dense_units=8, dropout=0.0),
        training=dataclasses.replace(base.training, learning_rate=0.02, batch_size=64),
    )


def synthetic_csv(path: Path, hours: float = 36, n_series: int = 3) -> Path:
    """Pods with a daily sine plus noise, sampled about every 60 s (jittered), in percent.

    A day and a half, because ``seasonal_naive_24h`` only has a basis for held-out windows a day in.
    """
    rng = np.random.default_rng(7)
    frames = []
    for i in range(n_series):
        n = int(hours * 60)
        seconds = T0 + 60 * np.arange(n) + rng.uniform(0, 20, size=n)
        phase = 2 * np.pi * (seconds % 86_400) / 86_400 + i
        util = np.clip(50 + 30 * np.sin(phase) + rng.normal(0, 8, size=n), 0, 100)
        frames.append(pd.DataFrame({"timestamp_anon": seconds, "value": util, "container_ip": f"10.0.0.{i}"}))
    pd.concat(frames).to_csv(path, index=False)
    return path


def tiny_spec_file(path: Path) -> Path:
    raw = yaml.safe_load((MODELS_DIR / "gpu_load_forecaster.yaml").read_text())
    raw |= {"window_steps": 16, "min_observed_steps": 8}
    raw["architecture"] |= {"lstm_units": 8, "dense_units": 8, "dropout": 0.0}
    raw["training"] |= {"epochs_per_update": 2, "batch_size": 64, "time_budget_s": 10, "learning_rate": 0.01}
    path.write_text(yaml.safe_dump(raw))
    return path
