"""
### GPU what-if review

Every Monday at 02:30 UTC, replays the **previous 7 days of this cluster's validated metrics** under `static`
(whole GPUs, nothing changes), Slicewise's `packing` planner **once per consolidation mode** (with the cluster's
own planner settings), `packing` with each compared setting changed (standby, whole-GPU demand and, with an
autoscaler, MPS release), and `ideal` (the bound), and publishes what Slicewise's decisions would have bought on
this cluster's own load and what each setting trades (docs/backtest.md, "The what-if review").

| task | does |
|---|---|
| `replay_history` | reads the window's published (validated) partitions — quarantined or missing hours left out and counted —, replays them and publishes `whatif/<since>_<until>/report.html` and `summary.json` under the storage root at once; logs those choices and how many pods opted in to evictions; emits `slicewise_whatif_review` with the headline figures. No validated hour in the window: skipped with the reason |

Params: each is described in the trigger form, and docs/backtest.md ("The what-if review") has their table.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import CronTriggerTimetable, Param, dag, task

from slicewise.assets import WHATIF_REVIEW
from slicewise.errors import task_outcome


@dag(
    schedule=CronTriggerTimetable("30 2 * * 1", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,  # an old week is reviewed on purpose (Param until), not by accident
    max_active_runs=1,
    tags=["slicewise", "whatif", "report"],
    default_args={
        "owner": "slicewise",
        "retries": 1,
        "retry_delay": timedelta(minutes=5),
        "execution_timeout": timedelta(hours=2),
    },
    params={
        "days": Param(7, type="integer", minimum=1, maximum=31, description="Days of history to replay."),
        "until": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}$",
            description="End of the window, YYYY-MM-DDTHH UTC (default: the run's hour).",
        ),
        "scheduler": Param(
            "spread",
            enum=["spread", "binpack", "first-fit"],
            description="Scheduler model: spread (Kubernetes' default), binpack (the shipped profile).",
        ),
        "prefer_shared": Param(
            True,
            type="boolean",
            description="Fractional pods prefer MPS nodes (the affinity docs/planner.md recommends).",
        ),
        "consolidation": Param(
            "all",
            type="string",
            pattern=r"^(all|(off|whole-gpus|nodes)(,(off|whole-gpus|nodes))*)$",
            description="Consolidation modes to compare: all, or comma-separated of off, whole-gpus, nodes.",
        ),
        "evictable": Param(
            "annotated",
            enum=["annotated", "all"],
            description="Pods the replay may evict: annotated (slicewise.io/evictable=true, as in your cluster) or all.",
        ),
        "compare_standby": Param(True, type="boolean", description="Replay packing with the other standby."),
        "compare_whole_gpu_demand": Param(
            True, type="boolean", description="Replay packing with the other planner_whole_gpu_demand."
        ),
        "compare_mps_release_below": Param(
            [0, 1],
            type="array",
            items={"type": "number", "minimum": 0, "maximum": 1},
            description="With scale_down_unneeded_s: replay packing once more per planner_mps_release_below value.",
        ),
        "scale_down_unneeded_s": Param(
            None,
            type=["null", "number"],
            minimum=0,
            description="Your cluster autoscaler's --scale-down-unneeded-time in seconds (its default: 600), to "
            "replay it for every node; empty: the fleet has none (nodes a consolidation empties stay idle).",
        ),
        "scale_down_utilization_threshold": Param(
            0.5,
            type="number",
            minimum=0,
            maximum=1,
            description="Your cluster autoscaler's --scale-down-utilization-threshold (its default: 0.5); 0: it "
            "removes empty nodes only.",
        ),
        "scale_down_delay_after_add_s": Param(
            600,
            type="number",
            minimum=0,
            description="Your cluster autoscaler's --scale-down-delay-after-add in seconds (its default: 600).",
        ),
        "shared_node_group": Param(
            True,
            type="boolean",
            description="Your cluster has a node group shared by MPS that the autoscaler adds nodes from for "
            "fractional pods (docs/planner.md, 'A node group shared by MPS').",
        ),
        "shared_node_group_max_gpus": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description="Only your machine types of at most this many GPUs have that group (empty: every type).",
        ),
    },
    doc_md=__doc__,
)
def gpu_whatif_review() -> None:
    @task(outlets=[WHATIF_REVIEW])
    @task_outcome()
    def replay_history(params: Any = None, dag_run: Any = None, outlet_events: Any = None) -> dict[str, Any]:
        from slicewise.connections import task_settings
        from slicewise.planning.consolidation import parse_modes
        from slicewise.whatif.steps import run_review, window_of

        since, until = window_of(params.get("until"), params["days"], dag_run.run_after)
        modes = parse_modes(params["consolidation"])  # the Param's pattern admits only valid ones
        summary = run_review(
            task_settings(params),
            since,
            until,
            params["scheduler"],
            modes,
            params["prefer_shared"],
            params["compare_standby"],
            params["compare_whole_gpu_demand"],
            params.get("scale_down_unneeded_s"),
            params.get("shared_node_group", True),
            params.get("scale_down_utilization_threshold", 0.5),
            params.get("scale_down_delay_after_add_s", 600),
            params.get("compare_mps_release_below", [0, 1]),
            params.get("evictable", "annotated"),
            params.get("shared_node_group_max_gpus"),
        )
        outlet_events[WHATIF_REVIEW].extra = summary
        return summary

    replay_history()


gpu_whatif_review()
