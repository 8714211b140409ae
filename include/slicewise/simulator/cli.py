"""``slicewise simulate backfill|serve|cluster``: history for the embedded Prometheus, the live exporter, and
the simulated cluster's state (``cluster show|fault|reset``).

Every sub-command returns an exit code (``args.func(args)``); bad input prints one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from slicewise.simulator.exposition import HOSTNAME_LABELS

#: The scrape job of the embedded Prometheus (slicewise.stack.prometheus) and the serve command's default target.
DEFAULT_JOB = "slicewise-simulated-fleet"
DEFAULT_INSTANCE = "127.0.0.1:9400"
FAULT_KINDS = (
    "fail",
    "stuck",
    "none",
)  # slicewise.simulator.mig_manager.FAULTS (not imported: keeps --help light)


def register(subparsers: Any) -> None:
    """Add ``simulate`` (with ``backfill`` and ``serve``) to the main CLI's sub-parsers."""
    simulate = subparsers.add_parser(
        "simulate", help="the simulated GPU fleet: backfill history or serve metrics"
    )
    commands = simulate.add_subparsers(dest="simulate_command", required=True)

    backfill = commands.add_parser("backfill", help="write the fleet's history into a Prometheus data folder")
    backfill.add_argument("--days", type=float, default=7.0, help="length of the history (default 7)")
    backfill.add_argument("--step", type=int, default=60, help="seconds between samples (default 60)")
    backfill.add_argument(
        "--end",
        default="now",
        help="end of the history, exclusive: 'now', unix seconds or ISO-8601 (UTC if naive)",
    )
    backfill.add_argument("--data-dir", type=Path, required=True, help="Prometheus --storage.tsdb.path")
    # A scrape attaches job and instance: the history must carry the same ones to continue the live series.
    backfill.add_argument(
        "--job",
        default=DEFAULT_JOB,
        help=f"job label of the live scrape this history continues (default {DEFAULT_JOB}; '' = none)",
    )
    backfill.add_argument(
        "--instance",
        default=DEFAULT_INSTANCE,
        help=f"instance label of the live scrape (default {DEFAULT_INSTANCE}, the serve default; '' = none)",
    )
    _common(backfill)
    backfill.set_defaults(func=run_backfill)

    serve = commands.add_parser("serve", help="serve the fleet's dcgm-exporter and kube-state-metrics series")
    serve.add_argument("--port", type=int, default=9400, help="port (default 9400, dcgm-exporter's)")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--container",
        action="store_true",
        help="allow a non-loopback --host (only inside a container of the compose stack)",
    )
    serve.add_argument(
        "--cluster-state",
        type=Path,
        default=None,
        help="simulated cluster state file: serve the MIG layouts / MPS replicas applied there",
    )
    _common(serve)
    serve.set_defaults(func=run_serve)
    _register_cluster(commands)


def _register_cluster(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="the simulated cluster: node labels, pods, MIG manager")
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    show = actions.add_parser("show", help="one line per node: layout, MIG manager state, pods")
    fault = actions.add_parser("fault", help="arm a MIG-manager fault on a node")
    fault.add_argument("node")
    fault.add_argument("kind", choices=FAULT_KINDS, help="fail: next apply fails; stuck: stays pending")
    reset = actions.add_parser("reset", help="forget all changes: back to the simulator config")
    for parser, func in ((show, run_cluster_show), (fault, run_cluster_fault), (reset, run_cluster_reset)):
        parser.add_argument(
            "--state",
            type=Path,
            default=None,
            help="state file (default: setting simulated_cluster_state, else $SLICEWISE_HOME/cluster/state.json)",
        )
        parser.add_argument(
            "--config", type=Path, default=None, help="simulator YAML (default: the shipped one)"
        )
        parser.set_defaults(func=func)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hostname-label",
        choices=HOSTNAME_LABELS,
        default="Hostname",
        help="node label name: dcgm-exporter <= 4.5.3-4.8.2 writes Hostname, later ones hostname",
    )
    parser.add_argument("--config", type=Path, default=None, help="simulator YAML (default: the shipped one)")


def parse_end(text: str, step_s: int, now: float | None = None) -> int:
    """The history's end in unix seconds, rounded down to a multiple of ``step_s``."""
    if text == "now":
        value = time.time() if now is None else now
    elif text.lstrip("-").isdigit():
        value = float(text)
    else:
        parsed = datetime.fromisoformat(text)
        value = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    return int(value) // step_s * step_s


def _fleet(config: Path | None) -> Any:
    from slicewise.simulator.fleet import Fleet, load_config

    return Fleet.from_config(load_config(config)) if config else Fleet.default()


def run_backfill(args: argparse.Namespace) -> int:
    from slicewise.simulator.backfill import PromtoolError, backfill

    try:
        if args.days <= 0 or args.step <= 0:
            raise ValueError("--days and --step must be positive")
        end = parse_end(args.end, args.step)
        start = end - int(args.days * 86_400)
        fleet = _fleet(args.config)
        targets = {name: value for name, value in (("job", args.job), ("instance", args.instance)) if value}
        report = backfill(
            fleet,
            start,
            end,
            args.step,
            args.data_dir,
            hostname_label=args.hostname_label,
            target_labels=targets,
        )
    except (ValueError, KeyError, OSError, yaml.YAMLError, PromtoolError) as exc:
        print(f"simulate backfill: {exc!s}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    first = datetime.fromtimestamp(start, tz=UTC).isoformat()
    last = datetime.fromtimestamp(end, tz=UTC).isoformat()
    print(
        f"backfilled {first} .. {last} every {args.step}s for {fleet.n_gpus} GPUs: "
        f"{report.files} files -> {len(report.blocks)} blocks in {args.data_dir} ({report.seconds:.1f}s)"
    )
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from slicewise.simulator.exporter import serve

    try:
        fleet = _fleet(args.config)
        server, port = serve(
            fleet,
            args.host,
            args.port,
            hostname_label=args.hostname_label,
            state_path=args.cluster_state,
            container=args.container,
        )
    except (ValueError, KeyError, OSError, yaml.YAMLError) as exc:
        print(f"simulate serve: {exc!s}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    print(
        f"serving {fleet.n_gpus} simulated GPUs on http://{args.host}:{port}/metrics (Ctrl-C stops)",
        flush=True,
    )
    try:
        _block_until_interrupted()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


def _block_until_interrupted() -> None:
    threading.Event().wait()


# -- simulate cluster -----------------------------------------------------------------------------------------
def _cluster(args: argparse.Namespace, *, reset: bool = False) -> Any:
    from slicewise.cluster.factory import simulated_state_path
    from slicewise.settings import load_settings
    from slicewise.simulator.cluster import SimulatedCluster

    path = args.state if args.state is not None else simulated_state_path(load_settings())
    return SimulatedCluster.open(path, fleet=_fleet(args.config), reset=reset)


def _cluster_command(name: str, args: argparse.Namespace, action: Any, *, reset: bool = False) -> int:
    from slicewise.cluster.base import ClusterError, NodeNotFound

    try:
        action(_cluster(args, reset=reset))
    except (ClusterError, ValueError, KeyError, OSError, yaml.YAMLError) as exc:
        print(f"simulate cluster {name}: {exc!s}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError | NodeNotFound) else 1
    return 0


def format_status(rows: list[Any]) -> str:
    """The ``cluster show`` table of ``SimulatedCluster.status()`` rows; conditions on indented lines below."""
    header = ("NODE", "MODEL", "MIG.CONFIG", "STATE", "DEVICE-PLUGIN", "CORDONED", "ALLOCATABLE", "GPU PODS")
    table = [header]
    for row in rows:
        node = row.node
        allocatable = ",".join(f"{r.removeprefix('nvidia.com/')}={n}" for r, n in node.allocatable.items())
        table.append((
            node.name, row.model, node.mig_config or "-", node.mig_config_state or "-",
            node.device_plugin_config or "-", "yes" if node.unschedulable else "no", allocatable or "-",
            str(row.running_pods),
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for i, line in enumerate(table):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if i:
            lines.extend(f"    {note}" for note in rows[i - 1].conditions)
    return "\n".join(lines)


def run_cluster_show(args: argparse.Namespace) -> int:
    def show(cluster: Any) -> None:
        print(f"simulated cluster {cluster.state_path}")
        print(format_status(cluster.status()))

    return _cluster_command("show", args, show)


def run_cluster_fault(args: argparse.Namespace) -> int:
    def fault(cluster: Any) -> None:
        cluster.inject_fault(args.node, args.kind)
        print(f"{args.node}: MIG-manager fault {args.kind}")

    return _cluster_command("fault", args, fault)


def run_cluster_reset(args: argparse.Namespace) -> int:
    def reset(cluster: Any) -> None:
        print(f"simulated cluster {cluster.state_path} reset to the simulator config")

    return _cluster_command("reset", args, reset, reset=True)
