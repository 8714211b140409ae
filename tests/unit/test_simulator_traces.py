"""The simulator's workload classes against the public GPU traces they are shaped on.

For each traced class, 512 whole GPUs running only that class are simulated for a week (15-minute steps, so
thousands of pods take part), and the utilisation of running pods is compared with the trace's samples:

- share of samples exactly 0: within 0.05 (absolute);
- mean utilisation: within 15% (relative);
- one upper quantile (q90 for GenAI serving, q75 for Philly training): within 15% (relative).

The traces are read from ``../shared/data/traces`` next to the checkout and never copied into the project.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slicewise.simulator import gpu_samples
from slicewise.simulator.fleet import Fleet, load_config

pytestmark = pytest.mark.traces

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
MONDAY = 1_704_672_000  # 2024-01-08 00:00 UTC
ZERO_TOLERANCE = 0.05
RELATIVE_TOLERANCE = 0.15


def _trace(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.skip(
            f"public GPU trace not found: {path} (expected in ../shared/data/traces next to the checkout)"
        )
    return path


def _simulated_util(workload: str) -> np.ndarray:
    """gpu_util of running pods of one workload on 512 whole H100s over a week at 15-minute steps."""
    config = copy.deepcopy(load_config())
    config["nodes"] = [
        {"name": f"trace-{i}", "model": "H100-80GB", "gpus": 8, "workloads": [workload]} for i in range(64)
    ]
    frame = gpu_samples(Fleet.from_config(config), np.arange(MONDAY, MONDAY + 7 * 86_400, 900))
    return frame.loc[frame["pod"] != "", "gpu_util"].to_numpy(dtype=float)


def _assert_close(simulated: np.ndarray, trace: np.ndarray, quantile: float) -> None:
    sim_zero, trace_zero = np.mean(simulated == 0), np.mean(trace == 0)
    assert abs(sim_zero - trace_zero) <= ZERO_TOLERANCE, (
        f"zero share {sim_zero:.3f} vs trace {trace_zero:.3f}"
    )
    sim_mean, trace_mean = simulated.mean(), trace.mean()
    assert sim_mean == pytest.approx(trace_mean, rel=RELATIVE_TOLERANCE), (
        f"mean {sim_mean:.2f} vs {trace_mean:.2f}"
    )
    sim_q, trace_q = np.quantile(simulated, quantile), np.quantile(trace, quantile)
    assert sim_q == pytest.approx(trace_q, rel=RELATIVE_TOLERANCE), (
        f"q{quantile} {sim_q:.1f} vs {trace_q:.1f}"
    )


def test_bursty_inference_matches_the_alibaba_genai_serving_trace() -> None:
    # given the GenAI serving pods' utilisation samples (percent, one per 57 s)
    trace = pd.read_csv(_trace("alibaba_gentd26_gpu_util_dev.csv"))["value"].to_numpy(dtype=float)

    # when the inference-bursty class is simulated
    simulated = _simulated_util("vision-infer")

    # then the zero share, mean and q90 agree within tolerance (trace: ~0.66 zeros, mean ~7.5%)
    _assert_close(simulated, trace, quantile=0.9)


def test_training_matches_the_philly_trace() -> None:
    # given Philly's per-GPU per-minute utilisation (-1 = not available)
    raw = pd.read_parquet(_trace("philly_dre_jobstart_windows_gpu_util.parquet"), columns=["gpu_util_pct"])
    trace = raw["gpu_util_pct"].to_numpy(dtype=float)
    trace = trace[trace >= 0]

    # when the training class is simulated
    simulated = _simulated_util("llm-train")

    # then the zero share, mean and q75 agree within tolerance (trace: ~0.36 zeros, mean ~42%)
    _assert_close(simulated, trace, quantile=0.75)
