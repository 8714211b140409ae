"""Do the traces hold a signal the forecaster does not read yet? Two checks behind docs/benchmarks.md
("Forecast accuracy on the public traces"), printed as figures; about 15 s for both on 2 cores.

- ``philly``: a Philly job's other GPUs. For every series (job x machine x GPU, 14 minutes around the job's
  start) and every cut from 8 minutes before the start to 2 after, the mean load over the rest of the window is
  forecast by the mean of the GPU's own last 5 minutes, by the mean of its job-mates' last 5 minutes (the
  job's other GPUs at the same minutes), and by the two averaged; MAE on the 0-1 load.
- ``genai``: GenAI's request-rate series (``alibaba_gentd26_qps.csv``) as four more features of a quantile GBM
  (the rate over the last 5, 15 and 60 minutes, the share of active minutes) beside nine of the utilisation's
  own, 60-minute horizon, one 70/30 time split, on the pods present in both files; P90 pinball loss, MAE of the
  P50 and the P90's under-provisioning, mean of three seeds, with the simple baselines beside them.

Usage: ``.venv/bin/python benchmarks/forecast_signals.py [--only philly|genai] [--traces DIR]``
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from slicewise.forecasting.metrics import mae, pinball, under_provision_rate

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
PHILLY = "philly_dre_jobstart_windows_gpu_util.parquet"
GENAI_UTIL, GENAI_QPS = "alibaba_gentd26_gpu_util_dev.csv", "alibaba_gentd26_qps.csv"
RECENT = 5  # minutes of history each Philly forecast averages
HORIZON, HISTORY, STRIDE = 60, 60, 5  # GenAI: minutes ahead, minutes behind, minutes between windows


def philly(traces: Path) -> None:
    raw = pd.read_parquet(traces / PHILLY)
    raw["load"] = raw["gpu_util_pct"].where(raw["gpu_util_pct"] >= 0) / 100.0  # -1 = not available
    raw["series"] = raw["job_id"] + "/" + raw["machine"] + "/" + raw["gpu_index"].astype(str)
    wide = raw.pivot_table(index="series", columns="minute_offset", values="load", aggfunc="mean")
    load = wide.to_numpy()
    observed = ~np.isnan(load)
    by_job = wide.index.str.split("/").str[0]
    job_sum = pd.DataFrame(np.nan_to_num(load), index=by_job).groupby(level=0).transform("sum").to_numpy()
    job_count = (
        pd.DataFrame(observed.astype(float), index=by_job).groupby(level=0).transform("sum").to_numpy()
    )
    others = job_count - observed
    mates = np.where(others > 0, (job_sum - np.nan_to_num(load)) / np.maximum(others, 1), np.nan)
    offsets = [int(offset) for offset in wide.columns]
    print(f"Philly: {len(wide):,} series; MAE of the mean load over the rest of the window (0-1)")
    print(f"{'cut':>4} {'windows':>8} {'own last 5':>11} {'mates last 5':>13} {'both':>7}")
    with warnings.catch_warnings():  # all-missing slices are NaN, dropped below
        warnings.simplefilter("ignore", RuntimeWarning)
        for cut in range(-8, 3):
            at = offsets.index(cut)
            target = np.nanmean(load[:, at + 1 :], axis=1)
            own = np.nanmean(load[:, max(0, at - RECENT + 1) : at + 1], axis=1)
            theirs = np.nanmean(mates[:, max(0, at - RECENT + 1) : at + 1], axis=1)
            ok = np.isfinite(target) & np.isfinite(own) & np.isfinite(theirs)
            y = target[ok]
            errors = [mae(y, f) for f in (own[ok], theirs[ok], (own[ok] + theirs[ok]) / 2)]
            print(f"{cut:>4} {ok.sum():>8,} {errors[0]:>11.4f} {errors[1]:>13.4f} {errors[2]:>7.4f}")


def _minute_grid(frame: pd.DataFrame, pods: list[str], start: int, steps: int, how: str) -> np.ndarray:
    grid = np.full((len(pods), steps), np.nan)
    frame = frame[frame["container_ip"].isin(pods)]
    rows = frame["container_ip"].map({pod: i for i, pod in enumerate(pods)}).to_numpy()
    cols = ((frame["timestamp_anon"].to_numpy() - start) // 60).astype(int)
    cells = pd.Series(frame["value"].to_numpy()).groupby([rows, cols]).agg(how)
    grid[cells.index.get_level_values(0), cells.index.get_level_values(1)] = cells.to_numpy()
    return grid


def genai(traces: Path) -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    util = pd.read_csv(traces / GENAI_UTIL)
    qps = pd.read_csv(traces / GENAI_QPS).dropna(subset=["container_ip"])
    qps = qps[qps["request_type"] == "Generative Requests"]
    pods = sorted(set(util["container_ip"]) & set(qps["container_ip"]))
    start = int(min(util["timestamp_anon"].min(), qps["timestamp_anon"].min()) // 60 * 60)
    steps = (int(max(util["timestamp_anon"].max(), qps["timestamp_anon"].max())) - start) // 60 + 1
    load = _minute_grid(util, pods, start, steps, "mean") / 100.0
    rate = np.nan_to_num(_minute_grid(qps, pods, start, steps, "sum"))  # no row: no request that minute
    fleet = np.nanmean(load, axis=0)
    decay = 0.5 ** (np.arange(HISTORY)[::-1] / 10)
    rows, targets, times = [], [], []
    for i in range(len(pods)):
        for t in range(HISTORY, steps - HORIZON, STRIDE):
            past, future = load[i, t - HISTORY + 1 : t + 1], load[i, t + 1 : t + 1 + HORIZON]
            seen = ~np.isnan(past)
            if not seen[-1] or seen.sum() < 15 or (~np.isnan(future)).sum() < 15:
                continue
            ewma = np.sum(np.nan_to_num(past) * decay * seen) / np.sum(decay * seen)
            recent = rate[i, t - HISTORY + 1 : t + 1]
            levels = [past[-1], np.nanmean(past[-15:]), np.nanmean(past), np.nanpercentile(past, 90)]
            context = [np.nanmax(past), ewma, fleet[t], np.nanmean(fleet[t - HISTORY + 1 : t + 1]), t % 1440]
            requests = [recent[-5:].mean(), recent[-15:].mean(), recent.mean(), (recent > 0).mean()]
            rows.append([*levels, *context, *requests])
            targets.append(np.nanmean(future))
            times.append(t)
    x, y, at = np.array(rows), np.array(targets), np.array(times)
    split = int(steps * 0.7)
    train, test = at + HORIZON < split, at > split
    share = float(np.mean(np.isclose(qps["value"], 0.09)))
    print(f"GenAI: {len(pods)} pods in both files; {share:.1%} of the request rows read 0.09 requests/s")
    print(f"windows: {train.sum():,} train, {test.sum():,} test", end="; ")
    print(f"mean load {y[train].mean():.3f} -> {y[test].mean():.3f}")
    print(f"{'forecast':<26} {'P90 pinball':>11} {'MAE':>8} {'under-provisioned':>18}")
    for name, column in (("last value", 0), ("hour's mean", 2), ("hour's P90", 3), ("EWMA", 5)):
        f = x[test, column]
        print(f"{name:<26} {pinball(y[test], f, 0.9):>11.5f} {mae(y[test], f):>8.5f} {'':>18}")
    for name, width in (("GBM, utilisation", 9), ("GBM, + request rate", 13)):
        scores = []
        for seed in range(3):
            fitted = {
                tau: HistGradientBoostingRegressor(
                    loss="quantile",
                    quantile=tau,
                    max_iter=300,
                    max_depth=3,
                    learning_rate=0.05,
                    random_state=seed,
                ).fit(x[train, :width], y[train])
                for tau in (0.5, 0.9)
            }
            p50, p90 = (fitted[tau].predict(x[test, :width]) for tau in (0.5, 0.9))
            scores.append((pinball(y[test], p90, 0.9), mae(y[test], p50), under_provision_rate(y[test], p90)))
        loss, error, under = np.mean(scores, axis=0)
        print(f"{name:<26} {loss:>11.5f} {error:>8.5f} {under:>17.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", choices=["philly", "genai"], default=None, help="one check only (default: both)"
    )
    parser.add_argument("--traces", type=Path, default=TRACES, help=f"the traces folder (default: {TRACES})")
    args = parser.parse_args()
    if not args.traces.is_dir():
        raise SystemExit(f"public GPU traces not found at {args.traces} (they live in ../shared/data/traces)")
    for name, check in (("philly", philly), ("genai", genai)):
        if args.only in (None, name):
            check(args.traces)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
