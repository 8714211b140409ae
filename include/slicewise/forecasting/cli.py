"""``slicewise forecast-backtest``: train the forecaster on the past of a CSV trace, score it on the future.

Exit codes: 0 done (a table, or exactly one JSON object with ``--json``); 2 bad input (missing file or column,
a fraction outside (0, 1), a bad spec, too little data for any window), one line on stderr; 1 anything else,
also one line. Never a traceback. TensorFlow loads only once the input has been checked, so ``--help`` and bad
input answer at once.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

PROG = "forecast-backtest"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: Column order of the table; the metrics of the shipped spec (P50 and P90).
TABLE_METRICS = ("mae", "smape", "mase", "pinball_p50", "pinball_p90", "under_provision_rate_p90")


def default_spec_path() -> Path:
    """The shipped spec, ``models/gpu_load_forecaster.yaml`` of the checkout (whatever the working directory)."""
    from slicewise.forecasting.spec import MODELS_DIR

    return MODELS_DIR / "gpu_load_forecaster.yaml"


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``forecast-backtest`` to the main CLI's sub-parsers; its ``func`` returns the exit code."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        PROG,
        help="backtest the LSTM forecaster against the baselines on a long-format CSV trace",
        description=(
            "Resample a long CSV (timestamp, series, value) onto a regular grid, train a fresh forecaster on "
            "the first part of its time span and score it and every baseline on the rest."
        ),
    )
    parser.add_argument("--csv", type=Path, required=True, help="the long-format CSV trace")
    parser.add_argument("--timestamp-col", required=True, help="timestamp column: unix seconds or datetimes")
    parser.add_argument("--series-col", required=True, help="column naming the series (GPU, pod, ...)")
    parser.add_argument("--value-col", required=True, help="column holding the load")
    parser.add_argument(
        "--train-fraction",
        type=float,
        required=True,
        help="share of the time span to train on, in (0, 1); the rest is held out",
    )
    parser.add_argument("--horizon-minutes", type=int, required=True, help="forecast horizon in minutes")
    parser.add_argument("--step-s", type=int, default=60, help="grid step in seconds (default 60)")
    parser.add_argument(
        "--value-scale",
        type=float,
        default=1.0,
        help="divide values by this, e.g. 100 for percent -> 0-1 (default 1.0)",
    )
    parser.add_argument(
        "--spec", type=Path, default=None, help="model spec YAML (default models/gpu_load_forecaster.yaml)"
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=None,
        help="training time budget in seconds (default: the spec's training.time_budget_s)",
    )
    parser.add_argument(
        "--folds",
        type=int,
        default=1,
        help="rolling origin: cut the held-out span into this many folds, updating the model incrementally "
        "before each (expanding window); the table shows each metric's median over the folds (default 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the backtest ``args`` describe and print the result; returns the exit code."""
    import pandas as pd
    import yaml

    from slicewise.forecasting.backtest import panel_from_long, run_backtest
    from slicewise.forecasting.spec import parse_spec

    if not 0.0 < args.train_fraction < 1.0:
        return _error(f"--train-fraction must lie strictly between 0 and 1, got {args.train_fraction}")
    if args.horizon_minutes < 1:
        return _error(f"--horizon-minutes must be positive, got {args.horizon_minutes}")
    if args.folds < 1:
        return _error(f"--folds must be at least 1, got {args.folds}")
    if args.time_budget_s is not None and not args.time_budget_s > 0:
        return _error(f"--time-budget-s must be positive, got {args.time_budget_s}")
    spec_path = args.spec or default_spec_path()
    for what, path in (("CSV", args.csv), ("spec", spec_path)):
        if not path.is_file():
            return _error(f"no such {what} file: {path}")
    try:
        spec = parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path))
        header = list(pd.read_csv(args.csv, nrows=0).columns)
        wanted = [args.timestamp_col, args.series_col, args.value_col]
        missing = [c for c in wanted if c not in header]
        if missing:
            return _error(f"{args.csv}: no column(s) {', '.join(map(repr, missing))}; it has {header}")
        # Only the three named columns: a wide export need not fit in memory whole.
        frame = pd.read_csv(args.csv, usecols=list(dict.fromkeys(wanted)))
        panel = panel_from_long(
            frame, args.timestamp_col, args.series_col, args.value_col, args.step_s, args.value_scale
        )
        result = run_backtest(
            panel,
            spec,
            args.train_fraction,
            args.horizon_minutes,
            seed=args.seed,
            time_budget_s=args.time_budget_s,
            folds=args.folds,
        )
    except (OSError, ValueError, yaml.YAMLError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        # ValueError covers SpecError, a CSV that is not UTF-8, and every check of the backtest itself.
        return _error(_first_line(exc))
    except Exception as exc:  # one line, never a traceback, even for a failure nobody foresaw
        return _error(f"backtest failed: {type(exc).__name__}: {_first_line(exc)}", EXIT_FAILED)
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result))
    return EXIT_OK


def format_table(result: dict[str, Any]) -> str:
    """Model rows x metric columns, ``*`` on the winner per metric, with a header line of the setting.

    The winner is the lowest value for the error metrics and, for the under-provision rate, the value
    closest to the nominal rate (0.10 for a P90): never under-provisioning is easy (predict 1.0) and wasteful.
    """
    models: dict[str, dict[str, Any]] = result["models"]
    winners = {metric: _winner(models, metric) for metric in TABLE_METRICS}
    headers = ["model", *(m.replace("under_provision_rate", "under_prov") for m in TABLE_METRICS), "n"]
    rows = [
        [
            name,
            *(_cell(scores.get(metric), name in winners[metric]) for metric in TABLE_METRICS),
            f"{scores.get('n', 0):,}",
        ]
        for name, scores in models.items()
    ]
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = [
        f"horizon {result['horizon_minutes']} min: trained on {result['train_windows']:,} windows "
        f"({result.get('epochs', '?')} epochs, {result['train_seconds']:.1f} s), "
        f"scored on {result['test_windows']:,} held-out windows"
        + (
            f" in {len(result['folds'])} rolling-origin folds (median per metric)"
            if len(result.get("folds", ())) > 1
            else ""
        )
        + _calibration_note(result),
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        ),
    ]
    for row in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    lines.append(
        "* best per column (under_prov: closest to 0.10); '-' = no basis (e.g. under a day of history)"
    )
    return "\n".join(lines)


def _calibration_note(result: dict[str, Any]) -> str:
    """The calibration factors the (last) fold applied to the LSTM's quantiles."""
    folds = result.get("folds") or []
    if not folds or not folds[-1].get("calibration"):
        return ""
    factors = ", ".join(f"{q} x{math.exp(f):.2f}" for q, f in folds[-1]["calibration"].items())
    return f"; calibration {factors}"


def _winner(models: dict[str, dict[str, Any]], metric: str) -> set[str]:
    """The model(s) with the best finite value of ``metric``; ties all win."""
    values = {name: s.get(metric) for name, s in models.items()}
    finite = {name: float(v) for name, v in values.items() if v is not None and math.isfinite(v)}
    if not finite:
        return set()
    if metric.startswith("under_provision_rate_p"):
        # A calibrated P90 is exceeded 10 % of the time: the target rate is 1 - the quantile.
        nominal = 1.0 - int(metric.rsplit("_p", 1)[1]) / 100
        badness = {name: abs(v - nominal) for name, v in finite.items()}
    else:
        badness = finite
    best = min(badness.values())
    return {name for name, v in badness.items() if v == best}


def _cell(value: float | None, best: bool) -> str:
    return "-" if value is None else f"{value:.4f}{'*' if best else ' '}"


def _error(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
