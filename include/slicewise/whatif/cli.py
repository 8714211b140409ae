"""``slicewise backtest --pods CSV --nodes CSV [--policies a,b,..] [--json]``: the what-if backtest.

Or on the cluster's own history: ``--prometheus URL --since ISO --until ISO`` reads the pods' GPU requests
(kube-state-metrics) and the nodes (DCGM) with the ingest's reader instead of the CSV files.

Three modes: the replay (default: a table of headline figures per policy and an HTML report, ``--html``);
``--saturate`` (pods drawn from the trace until they ask for the whole fleet: the share each policy allocates);
``--size-for-wait SECONDS`` (the smallest share of the nodes on which each policy keeps the mean wait at or
under SECONDS). Exit codes: 0 done, 2 bad input (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slicewise.whatif.fleet import FIRST_FIT, SCHEDULERS
from slicewise.whatif.policies import POLICIES

DEFAULT_POLICIES = "static,static-mig,reactive,packing,oracle,ideal"


def register(subparsers: Any) -> None:
    from slicewise.planning.config import REHOME, WHOLE_GPU_DEMAND, PlannerConfig

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
        default=DEFAULT_POLICIES,
        help=f"comma-separated, of {', '.join(POLICIES)} (default {DEFAULT_POLICIES})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--html", type=Path, help="where to write the HTML report (default: beside the store)"
    )
    parser.add_argument("--times-from", type=Path, help="timed pod list for a pod list without time columns")
    parser.add_argument(
        "--gpu-model", help="model every GPU as this catalogue model (default: each node's own, see docs)"
    )
    parser.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="NAME=MODEL",
        help="the node list's GPU model NAME is catalogue MODEL (repeatable), e.g. G2=A100-80GB",
    )
    parser.add_argument(
        "--leave-gpus-without-mig",
        action="store_true",
        help="the planner leaves GPUs without MIG alone (planner_gpus_without_mig=false)",
    )
    parser.add_argument(
        "--split-layouts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the planner may propose per-GPU split configs, sw-<k>of<n>-* (planner_split_layouts; default on, "
        "as production)",
    )
    parser.add_argument(
        "--consolidation",
        type=_consolidation_modes,
        default=("whole-gpus",),
        help="the planner's consolidation (planner_consolidation: off, whole-gpus, nodes; default whole-gpus, as "
        "production); several, comma-separated, or 'all': each policy of the packing planner (reactive, packing, "
        "oracle) once per mode (packing/nodes, ...), to choose the mode on this cluster's own history",
    )
    parser.add_argument(
        "--release-below",
        type=float,
        default=PlannerConfig().release_below,
        help="with consolidation nodes: a node of fewer than 8 GPUs whose pods hold at most this share of them may "
        "be emptied and released (planner_release_below; default 0.5, as production)",
    )
    parser.add_argument(
        "--release-below-large",
        type=float,
        default=PlannerConfig().release_below_large,
        help="the same for a node of 8 GPUs or more (planner_release_below_large; default 0.25, as production)",
    )
    parser.add_argument(
        "--release-min-pod-age-h",
        type=float,
        default=PlannerConfig().release_min_pod_age_hours,
        help="with consolidation nodes: a node is emptied to be released only when every pod on it started at "
        "least this many hours ago (planner_release_min_pod_age_hours; default as production)",
    )
    parser.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default=FIRST_FIT,
        help="scheduler model: first-fit by node name, spread (Kubernetes' default LeastAllocated) or "
        "binpack (MostAllocated); default first-fit",
    )
    parser.add_argument(
        "--prefer-shared",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fractional pods prefer MPS nodes, as the preferred node affinity docs/planner.md recommends "
        "(default on; --no-prefer-shared: they take whatever node the scheduler model scores first)",
    )
    parser.add_argument(
        "--shared-reserve",
        type=float,
        default=PlannerConfig().shared_reserve,
        help="MPS tenants the planner keeps ready on empty nodes, this many times the fractional pods of at most "
        "half a GPU (planner_shared_reserve; 0: none; default as production)",
    )
    parser.add_argument(
        "--standby",
        action=argparse.BooleanOptionalAction,
        default=PlannerConfig().standby,
        help="the planner taints empty nodes without MIG or MPS PreferNoSchedule, one taint per size rank up to "
        "four, so the scheduler opens them after the nodes in use, the larger later (planner_standby; default as "
        "production)",
    )
    parser.add_argument(
        "--keep-shaped",
        action=argparse.BooleanOptionalAction,
        default=PlannerConfig().keep_shaped,
        help="the planner marks nodes with MIG that host pods scale-down-disabled, so the replay's autoscaler "
        "(--scale-down-unneeded-s) does not drain them (planner_keep_shaped; default as production)",
    )
    parser.add_argument(
        "--scarce-kind-share",
        type=float,
        default=PlannerConfig().scarce_kind_share,
        help="with --pinned-share: once some pod names a GPU model, the planner keeps the nodes of every model that "
        "holds at most this share of the GPUs for pinned pods too (planner_scarce_kind_share; default 0.0625, as "
        "production; 0: only the models pods named)",
    )
    parser.add_argument(
        "--pinned-share",
        type=float,
        default=PlannerConfig().pinned_share,
        help="the planner keeps the nodes of a pin (a gpu_spec) whose nodes hold at most this share of the GPUs for "
        "the pods pinned there (planner_pinned_share; default 0.125, as production; 0: none)",
    )
    parser.add_argument(
        "--mps-release-below",
        type=float,
        default=PlannerConfig().mps_release_below,
        help="with --keep-shaped: nodes shared by MPS whose pods take more than this share of their tenants are "
        "marked too (planner_mps_release_below; default 0.25, as production; 1: none; 0: every one that hosts pods)",
    )
    parser.add_argument(
        "--rehome",
        choices=REHOME,
        default=PlannerConfig().rehome,
        help="the planner evicts fractional pods from whole GPUs when a free MPS tenant fits them: always, only while "
        "whole-GPU pods wait (waiting), or off (planner_rehome; default as production)",
    )
    parser.add_argument(
        "--whole-gpu-demand",
        choices=WHOLE_GPU_DEMAND,
        default=PlannerConfig().whole_gpu_demand,
        help="whole-GPU pods the planner keeps GPUs whole for: those that waited most of the last hour (median) or "
        "those still pending now (pending-now) (planner_whole_gpu_demand; default as production)",
    )
    parser.add_argument(
        "--compare-whole-gpu-demand",
        action="store_true",
        help="replay packing once more with the other --whole-gpu-demand, and print what the setting trades "
        "(mean wait, node-GPU-hours)",
    )
    parser.add_argument(
        "--compare-mps-release-below",
        type=float,
        nargs="+",
        metavar="V",
        help="with --scale-down-unneeded-s and --keep-shaped: replay packing once more per value of "
        "--mps-release-below given (other than the setting), and print what the setting trades (mean wait, "
        "node-GPU-hours, paid GPU-hours)",
    )
    parser.add_argument(
        "--compare-standby",
        action="store_true",
        help="replay packing once more with --standby the other way round, and print what the setting trades "
        "(mean wait, node-GPU-hours)",
    )
    parser.add_argument(
        "--node-share", type=float, default=1.0, help="replay on this share of the nodes (default 1: all)"
    )
    parser.add_argument(
        "--node-offset",
        type=int,
        default=0,
        help="another sample of the same --node-share: the picks shifted this many nodes (0 .. 1/share - 1; "
        "default 0)",
    )
    parser.add_argument(
        "--reconfigure-s", type=float, default=300.0, help="seconds a node is gone for a change (default 300)"
    )
    parser.add_argument(
        "--eviction-cost-s",
        type=float,
        default=300.0,
        help="run time an evicted pod loses (restart, image, warm-up; default 300)",
    )
    parser.add_argument(
        "--evictable",
        # engine.EVICTABLE, as a literal: the parser imports nothing heavy
        choices=("all", "best-effort", "annotated"),
        default="all",
        help="which pods opt in to Slicewise's evictions: all (default), best-effort (the trace's qos BE) or "
        "annotated (with --prometheus: the pods whose slicewise.io/evictable=true kube-state-metrics exported; a "
        "trace file has none); the others block changes of their node; the autoscaler's drains are not affected",
    )
    parser.add_argument(
        "--cordon-to-drain",
        action="store_true",
        help="the planner's planner_cordon_to_drain: a change blocked by pods that may not be evicted holds the "
        "node (cordoned, pods run on) until they end; matters only when --evictable is not all",
    )
    parser.add_argument(
        "--scale-up-s",
        type=float,
        default=300.0,
        help="seconds the autoscaler takes to add back a node a consolidation released (default 300)",
    )
    parser.add_argument(
        "--keep-released",
        action="store_true",
        help="no autoscaler at all: a node a consolidation empties stays in service, idle and free to take pods "
        "again, as every policy's empty nodes do (default: it is removed and added back after --scale-up-s); not "
        "with --scale-down-unneeded-s",
    )
    parser.add_argument(
        "--scale-down-unneeded-s",
        type=float,
        default=None,
        help="model a cluster autoscaler for every node of every policy: a node empty this long is removed "
        "(cluster-autoscaler's --scale-down-unneeded-time; 600 is its default) and added back after --scale-up-s "
        "when pods need it (default: none; only nodes a consolidation releases leave service)",
    )
    parser.add_argument(
        "--scale-down-utilization-threshold",
        type=float,
        default=0.5,
        help="with --scale-down-unneeded-s: a node whose GPU utilisation (nvidia.com/gpu requested / allocatable) "
        "is under this and whose pods all fit the other nodes is unneeded too, and is drained and removed "
        "(cluster-autoscaler's flag of that name; default 0.5, its default; 0: only empty nodes are removed)",
    )
    parser.add_argument(
        "--scale-down-delay-after-add-s",
        type=float,
        default=600.0,
        help="with --scale-down-unneeded-s: the autoscaler removes no node this long after it added one "
        "(cluster-autoscaler's --scale-down-delay-after-add; default 600, its default)",
    )
    parser.add_argument(
        "--plan-offset-s",
        type=int,
        default=0,
        help="the planner policies (reactive, thresholds, packing, oracle) plan this many seconds past each hour "
        "of the replay, as the hourly DAG runs at some minute (a multiple of 300 under 3600; default 0, on the hour)",
    )
    parser.add_argument(
        "--shared-node-group",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with an autoscaler, a node it adds for a fractional pod of at most half a GPU comes from a node group "
        "shared by MPS (2 tenants per GPU; policies that share GPUs only; default on; --no-shared-node-group: every "
        "node comes back as its group started, whole GPUs)",
    )
    parser.add_argument(
        "--shared-node-group-max-gpus",
        type=int,
        metavar="N",
        help="with --shared-node-group: only machine types of at most N GPUs have a group shared by MPS; a larger "
        "machine added for a fractional pod comes up whole (default: every type has one)",
    )
    parser.add_argument(
        "--drain-cap-days",
        type=float,
        default=30.0,
        help="after the window, serve the pods left for at most this long (default 30)",
    )
    parser.add_argument("--days", type=float, help="replay only the first DAYS of the trace")
    parser.add_argument(
        "--saturate",
        action="store_true",
        help="saturation mode: the share of the fleet each policy allocates",
    )
    parser.add_argument("--seed", type=int, default=0, help="saturation mode: the draw of pods (default 0)")
    parser.add_argument(
        "--size-for-wait",
        type=float,
        metavar="SECONDS",
        help="sizing mode: the smallest share of the nodes keeping each policy's mean wait <= SECONDS",
    )
    parser.add_argument(
        "--workers", type=int, help="processes (default: one per core, at most one per policy)"
    )
    parser.set_defaults(func=run_backtest)


def run_backtest(args: argparse.Namespace) -> int:
    from slicewise.catalog import CatalogError
    from slicewise.metrics.prometheus import PrometheusError
    from slicewise.whatif.trace import TraceError

    began = time.monotonic()
    try:
        inputs = _inputs(args)
    except (TraceError, CatalogError, ValueError, PrometheusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.saturate:
        return _saturate(args, inputs, began)
    if args.size_for_wait is not None:
        return _size(args, inputs)
    return _replay(args, inputs, began)


def _mps_release_values(args: argparse.Namespace) -> bool:
    """Whether ``--compare-mps-release-below`` was given, checked: ValueError where the replays could not
    differ (no autoscaler or no ``--keep-shaped``: nothing reads the marks) or a value is out of range."""
    values = args.compare_mps_release_below
    if not values:
        return False
    if any(not 0 <= v <= 1 for v in values):
        raise ValueError("--compare-mps-release-below values must be in [0, 1]")
    if args.scale_down_unneeded_s is None or not args.keep_shaped:
        raise ValueError(
            "--compare-mps-release-below needs --scale-down-unneeded-s and --keep-shaped: without an autoscaler "
            "that reads the planner's scale-down-disabled marks every value replays the same"
        )
    from slicewise.whatif.policies import mps_release_name

    if all(mps_release_name(v) == mps_release_name(args.mps_release_below) for v in values):
        raise ValueError(
            f"--compare-mps-release-below: give a value other than the setting ({args.mps_release_below:g})"
        )
    return True


def _inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the three modes share, checked: ValueError / TraceError / CatalogError on bad input."""
    import dataclasses
    from functools import partial

    from slicewise.catalog import load_catalog
    from slicewise.whatif.engine import BacktestConfig
    from slicewise.whatif.gpus import parse_model_map
    from slicewise.whatif.policies import (
        parse_policies,
        per_consolidation,
        with_mps_release_compared,
        with_standby_flipped,
        with_whole_demand_flipped,
    )
    from slicewise.whatif.trace import hostable_on, load_nodes, load_pods, spread_sample

    policies = per_consolidation(parse_policies(args.policies), args.consolidation)
    if len(args.consolidation) > 1 and not any(p.consolidation for p in policies):
        raise ValueError(
            "several --consolidation modes compare only policies of the packing planner (reactive, packing, "
            "oracle); none is among --policies"
        )
    base = BacktestConfig()
    consolidation = args.consolidation[0] if len(args.consolidation) == 1 else base.planner.consolidation
    flips = (  # each comparison asked for: packing once more with one setting the other way round
        ("--compare-standby", args.compare_standby, partial(with_standby_flipped, standby=args.standby)),
        (
            "--compare-whole-gpu-demand",
            args.compare_whole_gpu_demand,
            partial(with_whole_demand_flipped, rule=args.whole_gpu_demand),
        ),
        (
            "--compare-mps-release-below",
            _mps_release_values(args),
            partial(
                with_mps_release_compared,
                values=args.compare_mps_release_below or (),
                setting=args.mps_release_below,
            ),
        ),
    )
    for flag, asked, flip in flips:
        if not asked:
            continue
        compared = flip(policies, consolidation=consolidation)
        if len(compared) == len(policies):
            raise ValueError(f"{flag} compares the packing policy, which is not among --policies")
        if consolidation not in args.consolidation:
            raise ValueError(
                f"{flag} compares in production's consolidation mode ({consolidation}): give it among "
                "--consolidation"
            )
        policies = compared
    catalog = load_catalog()
    if args.prometheus:
        trace, nodes = _from_prometheus(args, catalog)
    elif args.pods and args.nodes:
        trace, nodes = load_pods(args.pods, args.times_from), load_nodes(args.nodes)
    else:
        raise ValueError("give --pods and --nodes, or --prometheus with --since")
    if min(args.reconfigure_s, args.eviction_cost_s, args.scale_up_s, args.drain_cap_days) < 0:
        raise ValueError("--reconfigure-s, --eviction-cost-s, --scale-up-s and --drain-cap-days must be >= 0")
    if args.scale_down_unneeded_s is not None and args.scale_down_unneeded_s < 0:
        raise ValueError("--scale-down-unneeded-s must be >= 0")
    if args.keep_released and args.scale_down_unneeded_s is not None:
        raise ValueError("--keep-released is a fleet without an autoscaler: not with --scale-down-unneeded-s")
    if args.scale_down_delay_after_add_s < 0:
        raise ValueError("--scale-down-delay-after-add-s must be >= 0")
    if not 0 <= args.plan_offset_s < 3600 or args.plan_offset_s % BacktestConfig.step_s:
        raise ValueError(f"--plan-offset-s must be a multiple of {BacktestConfig.step_s} under 3600")
    if not 0 <= args.scale_down_utilization_threshold <= 1:
        raise ValueError("--scale-down-utilization-threshold must be in [0, 1]")
    if args.shared_node_group_max_gpus is not None and args.shared_node_group_max_gpus < 1:
        raise ValueError("--shared-node-group-max-gpus must be >= 1")
    if not 0 <= args.release_below <= 1:
        raise ValueError("--release-below must be in [0, 1]")
    if not 0 <= args.release_below_large <= 1:
        raise ValueError("--release-below-large must be in [0, 1]")
    if not args.release_min_pod_age_h >= 0:
        raise ValueError("--release-min-pod-age-h must be >= 0")
    if not 0 <= args.mps_release_below <= 1:
        raise ValueError("--mps-release-below must be in [0, 1]")
    if not 0 <= args.pinned_share <= 1:
        raise ValueError("--pinned-share must be in [0, 1]")
    if not 0 <= args.scarce_kind_share <= 1:
        raise ValueError("--scarce-kind-share must be in [0, 1]")
    if not 0 <= args.shared_reserve <= 100:
        raise ValueError("--shared-reserve must be in [0, 100]")
    if args.days is not None and args.days <= 0:
        raise ValueError("--days must be > 0")
    if args.saturate and args.size_for_wait is not None:
        raise ValueError("--saturate and --size-for-wait are two modes: give one")
    if args.size_for_wait is not None and args.size_for_wait < 0:
        raise ValueError("--size-for-wait must be >= 0 seconds")
    fleet = spread_sample(nodes, args.node_share, args.node_offset)
    # Sizing samples the fleet further: a pod is left out only when no node of the whole fleet fits it.
    trace = hostable_on(trace, fleet)
    config = BacktestConfig.priced(
        gpu_model=args.gpu_model,
        model_map=parse_model_map(args.model_map),
        scheduler=args.scheduler,
        prefer_shared=args.prefer_shared,
        reconfigure_s=args.reconfigure_s,
        eviction_cost_s=args.eviction_cost_s,
        evictable=args.evictable,
        drain_cap_s=args.drain_cap_days * 86_400,
        scale_up_s=args.scale_up_s,
        keep_released=args.keep_released,
        scale_down_unneeded_s=args.scale_down_unneeded_s,
        scale_down_utilization_threshold=args.scale_down_utilization_threshold,
        scale_down_delay_after_add_s=args.scale_down_delay_after_add_s,
        shared_node_group=args.shared_node_group,
        shared_node_group_max_gpus=args.shared_node_group_max_gpus,
        plan_offset_s=args.plan_offset_s,
        planner=dataclasses.replace(
            base.planner,
            plan_gpus_without_mig=not args.leave_gpus_without_mig,
            split_layouts=args.split_layouts,
            # With several modes, each packing-planner policy carries its own; the rest keep production's.
            consolidation=consolidation,
            eviction_cost_s=args.eviction_cost_s,  # the planner weighs what the replay charges
            cordon_to_drain=args.cordon_to_drain,
            release_below=args.release_below,
            release_below_large=args.release_below_large,
            release_min_pod_age_hours=args.release_min_pod_age_h,
            shared_reserve=args.shared_reserve,
            standby=args.standby,
            keep_shaped=args.keep_shaped,
            mps_release_below=args.mps_release_below,
            pinned_share=args.pinned_share,
            scarce_kind_share=args.scarce_kind_share,
            rehome=args.rehome,
            whole_gpu_demand=args.whole_gpu_demand,
        ),
    )
    models = config.fleet_models(fleet, catalog)  # checks --gpu-model and --model-map
    start = min(p.arrival_s for p in trace.pods)
    end = trace.end_s if args.days is None else min(trace.end_s, start + args.days * 86_400)
    return {
        "policies": policies,
        "trace": trace,
        "fleet": fleet,
        "config": config,
        "window": (start, end),
        "notes": (*_sample_note(args), *models.notes()),
    }


def _sample_note(args: argparse.Namespace) -> tuple[str, ...]:
    if args.node_share >= 1:
        return ()
    return (f"nodes: a {args.node_share:g} share, offset {args.node_offset}",)


def _replay(args: argparse.Namespace, inputs: dict[str, Any], began: float) -> int:
    from slicewise.whatif import report
    from slicewise.whatif.run import Backtest, run_policies

    trace, fleet, config, window = inputs["trace"], inputs["fleet"], inputs["config"], inputs["window"]
    results = run_policies(inputs["policies"], trace, fleet, config, window, args.workers)
    source = args.prometheus or str(args.pods)
    backtest = Backtest(
        source,
        str(args.nodes or source),
        trace,
        fleet,
        config,
        window,
        results,
        time.monotonic() - began,
        inputs["notes"],
    )
    if args.json:
        print(json.dumps(report.as_json(backtest)))
        return 0
    target = args.html or _default_html(args.pods or Path("prometheus-history.csv"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report.render_html(backtest))
    print(report.text_table(backtest))
    print("\nWhere the paid GPU-hours went:")
    print(report.paid_table(backtest))
    evictions = report.eviction_table(backtest)
    if evictions:
        print("\nEvictions by rule:")
        print(evictions)
    choices = (
        report.setup_choice,
        report.consolidation_choice,
        report.standby_choice,
        report.whole_demand_choice,
        report.mps_release_choice,
    )
    for line in [line for choice in choices for line in choice(backtest)]:
        print(line)
    print(
        f"\n{len(trace.pods):,} pods, {len(fleet):,} nodes, {sum(n.gpus for n in fleet):,} GPUs; "
        f"{'; '.join(inputs['notes'])}; {backtest.seconds:.0f} s. HTML report: {target}"
    )
    return 0


def _saturate(args: argparse.Namespace, inputs: dict[str, Any], began: float) -> int:
    from slicewise.whatif.report import format_table
    from slicewise.whatif.run import run_policies
    from slicewise.whatif.saturation import inflate

    try:
        saturation = inflate(inputs["trace"], inputs["fleet"], inputs["config"], args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = run_policies(
        inputs["policies"],
        saturation.trace,
        inputs["fleet"],
        saturation.config,
        saturation.window,
        args.workers,
    )
    figures = {
        name: {
            "allocated_share": round(saturation.allocated_share(r), 6),
            "pods_waiting": r.still_waiting,
            "reconfigs_per_node_hour": round(r.reconfigs_per_node_hour, 6),
            "pods_evicted": r.pods_evicted,
        }
        for name, r in results.items()
    }
    notes = [*saturation.trace.notes, *inputs["notes"]]
    if args.json:
        print(json.dumps({"saturation": figures, "gpus": saturation.gpus, "notes": notes}))
        return 0
    lines = [["policy", "allocated share", "pods waiting", "reconfigs/node/h", "evicted"]]
    lines += [
        [
            name,
            f"{f['allocated_share']:.1%}",
            f"{f['pods_waiting']:,}",
            f"{f['reconfigs_per_node_hour']:.4f}",
            f"{f['pods_evicted']:,}",
        ]
        for name, f in figures.items()
    ]
    print(format_table(lines))
    print(f"\n{'; '.join(notes)}; {time.monotonic() - began:.0f} s")
    return 0


def _size(args: argparse.Namespace, inputs: dict[str, Any]) -> int:
    import dataclasses

    from slicewise.whatif.report import format_table
    from slicewise.whatif.run import replay
    from slicewise.whatif.sizing import size_policies

    sizings = size_policies(
        inputs["policies"],
        inputs["trace"],
        inputs["fleet"],
        inputs["config"],
        inputs["window"],
        args.size_for_wait,
        replay,
        args.workers,
    )
    if args.json:
        print(json.dumps({"sizing": [dataclasses.asdict(s) for s in sizings]}))
        return 0
    lines = [["policy", "nodes", "GPUs", "node share", "mean wait s", "replays"]]
    for s in sizings:
        found = s.nodes is not None
        lines.append(
            [
                s.policy,
                f"{s.nodes:,}" if found else "not reached",
                f"{s.gpus:,}" if s.gpus is not None else "-",
                f"{s.share:.4f}" if s.share is not None else "-",
                f"{s.wait_mean_s:,.0f}",
                str(len(s.probes)),
            ]
        )
    print(format_table(lines))
    print(
        f"\nsmallest evenly spread sample of the {len(inputs['fleet']):,} nodes with mean wait "
        f"<= {args.size_for_wait:g} s"
    )
    return 0


def _consolidation_modes(raw: str) -> tuple[str, ...]:
    from slicewise.planning.consolidation import parse_modes

    try:
        return parse_modes(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
