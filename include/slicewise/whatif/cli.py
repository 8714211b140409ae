"""``slicewise backtest --pods CSV --nodes CSV [--policies a,b,..] [--json]``: the what-if backtest.

Or on the cluster's own history: ``--prometheus URL --since ISO --until ISO`` reads the pods' GPU requests
(kube-state-metrics) and the nodes (DCGM) with the ingest's reader instead of the CSV files.

Without ``--json``: a table on stdout and an HTML report with plots (``--html``). Exit codes: 0 done, 2 bad input
(one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slicewise.whatif.policies import POLICIES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "backtest",
        help="replay a pod trace under several partitioning policies (Slicewise's planner included)",
        description=__doc__,
    )
    parser.add_argument("--pods", type=Path, help="pod list CSV (Alibaba openb format)")
    parser.add_argument("--nodes", type=Path, help="node list CSV (sn, gpu, model)")
    parser.add_argument("--prometheus", help="instead of the CSVs: the cluster's Prometheus (base URL)")
    parser.add_argument("--since", type=_moment, help="with --prometheus: window start, ISO 8601 with a zone")
    parser.add_argument(
        "--until", type=_moment, help="with --prometheus: window end (default: the last hour)"
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma-separated, of {', '.join(POLICIES)} (default all)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--html", type=Path, help="where to write the HTML report (default: beside the store)"
    )
    parser.add_argument("--times-from", type=Path, help="timed pod list for a pod list without time columns")
    parser.add_argument(
        "--gpu-model",
        default="A100-80GB",
        help="catalogue model every GPU is modelled as (default A100-80GB)",
    )
    parser.add_argument(
        "--node-share", type=float, default=1.0, help="replay on this share of the nodes (default 1: all)"
    )
    parser.add_argument(
        "--reconfigure-s", type=float, default=300.0, help="seconds a node is gone for a change (default 300)"
    )
    parser.add_argument("--days", type=float, help="replay only the first DAYS of the trace")
    parser.add_argument(
        "--workers", type=int, help="processes (default: one per core, at most one per policy)"
    )
    parser.set_defaults(func=run_backtest)


def run_backtest(args: argparse.Namespace) -> int:
    from slicewise.catalog import CatalogError, load_catalog
    from slicewise.costs.pricing import load_prices
    from slicewise.metrics.prometheus import PrometheusError
    from slicewise.whatif import report
    from slicewise.whatif.engine import BacktestConfig
    from slicewise.whatif.policies import parse_policies
    from slicewise.whatif.run import Backtest, run_policies
    from slicewise.whatif.trace import TraceError, load_nodes, load_pods, spread_sample

    began = time.monotonic()
    try:
        policies = parse_policies(args.policies)
        catalog = load_catalog()
        catalog.model(args.gpu_model)
        if args.prometheus:
            trace, nodes = _from_prometheus(args, catalog)
        elif args.pods and args.nodes:
            trace, nodes = load_pods(args.pods, args.times_from), load_nodes(args.nodes)
        else:
            raise ValueError("give --pods and --nodes, or --prometheus with --since")
        fleet = spread_sample(nodes, args.node_share)
        if args.reconfigure_s < 0 or (args.days is not None and args.days <= 0):
            raise ValueError("--reconfigure-s must be >= 0 and --days > 0")
    except (TraceError, CatalogError, ValueError, PrometheusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    price = load_prices().price_for(args.gpu_model).per_gpu_hour
    config = BacktestConfig(
        gpu_model=args.gpu_model, reconfigure_s=args.reconfigure_s, price_per_gpu_hour=price
    )
    start = min(p.arrival_s for p in trace.pods)
    end = trace.end_s if args.days is None else min(trace.end_s, start + args.days * 86_400)
    window = (start, end)
    results = run_policies(policies, trace, fleet, config, window, args.workers)
    source = args.prometheus or str(args.pods)
    backtest = Backtest(
        source, str(args.nodes or source), trace, fleet, config, window, results, time.monotonic() - began
    )
    if args.json:
        print(json.dumps(report.as_json(backtest)))
        return 0
    target = args.html or _default_html(args.pods or Path("prometheus-history.csv"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report.render_html(backtest))
    print(report.text_table(backtest))
    print(
        f"\n{len(trace.pods):,} pods, {len(fleet):,} nodes, {sum(n.gpus for n in fleet):,} GPUs "
        f"as {args.gpu_model}; {backtest.seconds:.0f} s. HTML report: {target}"
    )
    return 0


def _moment(raw: str) -> datetime:
    moment = datetime.fromisoformat(raw)
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{raw!r} has no time zone (e.g. 2026-11-01T00:00:00+00:00)")
    return moment


def _from_prometheus(args: argparse.Namespace, catalog: Any) -> tuple[Any, Any]:
    """The pod trace and nodes of ``[--since, --until)`` read from Prometheus with the ingest's reader."""
    from slicewise.metrics.prometheus import PrometheusEndpoint, PrometheusReader
    from slicewise.settings import load_settings
    from slicewise.whatif.history import read_history, trace_from_frames

    if args.since is None:
        raise ValueError("--prometheus needs --since")
    settings = load_settings()
    until = args.until or datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    reader = PrometheusReader(PrometheusEndpoint(args.prometheus.rstrip("/")), settings)
    demand, gpu = read_history(reader.demand, reader.gpu_samples, args.since, until)
    return trace_from_frames(demand, gpu, args.since, settings.step_s, catalog, args.gpu_model)


def _default_html(pods: Path) -> Path:
    from slicewise.settings import slicewise_home

    return slicewise_home() / "backtests" / f"{pods.stem}.html"
