"""The step of the ``gpu_whatif_review`` DAG: the cluster's own validated history replayed under ``static``,
``packing`` once per consolidation mode, and ``ideal``, published beside the cost reports.

It reads only published (validated) metrics partitions — a quarantined or missing hour is left out and counted —
and turns them into a pod trace as ``slicewise backtest --prometheus`` does (:mod:`slicewise.whatif.history`):
the pods from the demand frames, the nodes from the GPU frame of the newest hour. The planner runs with the
cluster's own settings (acting on the baseline forecast, as the backtest does), under the scheduler model the
caller names. The result, ``whatif/<since>_<until>/`` under the storage root: ``report.html`` (the backtest's
page) and ``summary.json`` (its ``--json`` object plus the window and the hours read), written to a staging
folder and published at once, so a reader never sees half a review.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise.errors import NotYet, PermanentError
from slicewise.settings import Settings
from slicewise.whatif import reviews

if TYPE_CHECKING:
    import pandas as pd

POLICIES = "static,packing,ideal"
#: The replay's ``evictable`` rules that mean something on a cluster's history (it has no trace ``qos``).
REVIEW_EVICTABLE = ("annotated", "all")
log = logging.getLogger(__name__)


class ReviewError(PermanentError, ValueError):
    """A review that cannot run on these inputs (a window or a scheduler model that makes no sense)."""


class NoValidatedHistory(NotYet):
    """No validated metrics partition in the window: nothing to replay yet."""


def pod_ends(demand: pd.DataFrame) -> pd.DataFrame:
    """The rows of each pod's first and last sample in ``demand``: all a trace reads (when a pod was there, and
    what it requested, which Kubernetes does not change for a running pod's GPU resources)."""
    if demand.empty:
        return demand
    seen = demand.groupby(["namespace", "pod"], observed=True)["timestamp"]
    keep = (demand["timestamp"] == seen.transform("min")) | (demand["timestamp"] == seen.transform("max"))
    return demand[keep]


def window_of(until: str | None, days: int, run_after: datetime) -> tuple[datetime, datetime]:
    """``[until - days, until)``: ``until`` as ``YYYY-MM-DDTHH`` (UTC), else ``run_after``'s hour; a malformed or
    future ``until`` is a :class:`ReviewError`."""
    now = run_after.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if until:
        try:
            end = datetime.strptime(until, "%Y-%m-%dT%H").replace(tzinfo=UTC)
        except ValueError as exc:
            raise ReviewError(f"until must be YYYY-MM-DDTHH (UTC), got {until!r}: {exc}") from None
        if end > now:
            raise ReviewError(
                f"until {until} is after this run's hour ({now:%Y-%m-%dT%H}): nothing is known there"
            )
    else:
        end = now
    if days < 1:
        raise ReviewError(f"days must be at least 1, got {days}")
    return end - timedelta(days=days), end


def _read_hours(found: Sequence[tuple[datetime, str]]) -> tuple[pd.DataFrame, pd.DataFrame, int, int]:
    """The demand of every readable hour (each pod's first and last sample), the GPU frame of the newest
    readable one, the sample step, and how many hours could not be read (a corrupt or incomplete partition is
    counted and left out; a storage error propagates, to be retried)."""
    import pandas as pd
    import pyarrow as pa

    from slicewise import store

    demand_hours, step, unreadable = [], 0, 0
    newest: str | None = None
    for _, folder in found:
        try:
            hour_demand, meta = store.read_frame(store.storage_path(folder) / store.DEMAND_FILE)
            demand_hours.append(pod_ends(hour_demand))  # a week of every sample would not fit in memory
        except (FileNotFoundError, KeyError, ValueError, pa.ArrowException):
            unreadable += 1
            continue
        step = step or int(float(meta.get("step_s", "60")))
        newest = folder
    if newest is None:
        raise ReviewError(f"none of the {len(found)} validated hours could be read (corrupt partitions?)")
    gpu, _ = store.read_frame(store.storage_path(newest) / store.GPU_FILE)
    return pd.concat(demand_hours, ignore_index=True), gpu, step, unreadable


def run_review(
    settings: Settings,
    since: datetime,
    until: datetime,
    scheduler: str,
    modes: Sequence[str],
    prefer_shared: bool = True,
    compare_standby: bool = True,
    compare_whole_gpu_demand: bool = True,
    scale_down_unneeded_s: float | None = None,
    shared_node_group: bool = True,
    scale_down_utilization_threshold: float = 0.5,
    scale_down_delay_after_add_s: float = 600.0,
    compare_mps_release_below: Sequence[float] = (0.0, 1.0),
    evictable: str = "annotated",
    shared_node_group_max_gpus: int | None = None,
) -> dict[str, Any]:
    """Replay ``[since, until)`` (whole UTC hours) and publish the review; returns what the task reports: the
    window, hours read and missing, each policy's headline figures, the consolidation and standby choices and the
    paths. ``prefer_shared``: whether the cluster's fractional pods prefer MPS nodes (the scheduler model's);
    ``compare_standby``: replay ``packing`` once more with ``planner_standby`` the other way round, in the
    cluster's consolidation mode (when that mode is among ``modes``); ``compare_whole_gpu_demand``: the same with
    the other ``planner_whole_gpu_demand``; ``scale_down_unneeded_s``: the cluster autoscaler's unneeded time, to
    replay it for every node of every policy (None: a fleet without one, where a node a consolidation empties stays
    in service: ``BacktestConfig.keep_released``); ``shared_node_group``: whether
    the autoscaler adds nodes for fractional pods from a node group shared by MPS (``shared_node_group_max_gpus``:
    only for machine types of at most that many GPUs; None: every type); ``scale_down_utilization_threshold``:
    its threshold under which a node in use whose pods fit elsewhere is drained too (0: empty nodes only;
    BacktestConfig); ``scale_down_delay_after_add_s``: how long after a scale-up it removes nothing;
    ``compare_mps_release_below``: with an autoscaler and ``planner_keep_shaped``, replay ``packing`` once more
    per value of ``planner_mps_release_below`` other than the setting (without either nothing reads the marks,
    and nothing is replayed); ``evictable``: which pods Slicewise's replayed evictions may take, ``annotated``
    (those whose ``slicewise.io/evictable=true`` the history shows, as the cluster allows) or ``all`` (what the
    cluster's pods would allow if every one opted in)."""
    from slicewise import store
    from slicewise.catalog import load_catalog
    from slicewise.costs.sources import published_hours
    from slicewise.planning.config import PlannerConfig
    from slicewise.whatif import report
    from slicewise.whatif.engine import BacktestConfig
    from slicewise.whatif.fleet import SCHEDULERS
    from slicewise.whatif.history import trace_from_frames
    from slicewise.whatif.policies import (
        STATIC_SHARED,
        parse_policies,
        per_consolidation,
        with_mps_release_compared,
        with_standby_flipped,
        with_whole_demand_flipped,
    )
    from slicewise.whatif.run import Backtest, run_policies
    from slicewise.whatif.trace import TraceError, hostable_on

    began = time.monotonic()
    if until <= since or since.minute or since.second or until.minute or until.second:
        raise ReviewError(f"the window must be whole hours, since before until: {since} .. {until}")
    if scheduler not in SCHEDULERS:
        raise ReviewError(f"unknown scheduler model {scheduler!r}; known: {', '.join(SCHEDULERS)}")
    if scale_down_unneeded_s is not None and scale_down_unneeded_s < 0:
        raise ReviewError(f"the autoscaler's unneeded time must be >= 0 s, not {scale_down_unneeded_s}")
    if not 0 <= scale_down_utilization_threshold <= 1:
        raise ReviewError(
            f"the autoscaler's utilisation threshold must be in [0, 1], not {scale_down_utilization_threshold}"
        )
    if any(not 0 <= v <= 1 for v in compare_mps_release_below):
        raise ReviewError(
            f"the MPS release values to compare must be in [0, 1], not {list(compare_mps_release_below)}"
        )
    if evictable not in REVIEW_EVICTABLE:
        raise ReviewError(f"evictable must be one of {', '.join(REVIEW_EVICTABLE)}, not {evictable!r}")
    if scale_down_delay_after_add_s < 0:
        raise ReviewError(
            f"the autoscaler's delay after a scale-up must be >= 0 s, not {scale_down_delay_after_add_s}"
        )
    root = store.storage_path(settings.storage_root)
    hours = [since + timedelta(hours=h) for h in range(int((until - since) / timedelta(hours=1)))]
    found = published_hours(root, hours)
    if not found:
        raise NoValidatedHistory(
            f"no validated metrics partition between {since.isoformat()} and {until.isoformat()}"
        )
    demand, gpu, step, unreadable = _read_hours(found)
    catalog = load_catalog()
    try:
        trace, nodes = trace_from_frames(demand, gpu, since, step, catalog)
        trace = hostable_on(trace, nodes)
    except TraceError as exc:
        raise NoValidatedHistory(f"nothing to replay in the validated hours: {exc}") from exc
    planner = dataclasses.replace(PlannerConfig.from_settings(settings), fallback="baseline")
    if len(modes) == 1:  # one mode: the packing row is that mode, not the cluster's setting
        planner = dataclasses.replace(planner, consolidation=modes[0])
    config = BacktestConfig.priced(
        scheduler=scheduler,
        prefer_shared=prefer_shared,
        eviction_cost_s=planner.eviction_cost_s,
        scale_down_unneeded_s=scale_down_unneeded_s,
        keep_released=scale_down_unneeded_s is None,
        scale_down_utilization_threshold=scale_down_utilization_threshold,
        scale_down_delay_after_add_s=scale_down_delay_after_add_s,
        shared_node_group=shared_node_group,
        shared_node_group_max_gpus=shared_node_group_max_gpus,
        evictable=evictable,
        planner=planner,
    )
    policies = per_consolidation(parse_policies(POLICIES), modes)
    if scale_down_unneeded_s is not None and shared_node_group:
        # The setup without the planner: what the hourly decisions add beyond it (report.setup_choice).
        policies = [policies[0], *parse_policies(STATIC_SHARED), *policies[1:]]
    # Without the setting's own mode among ``modes`` there is no row of the setting to compare with.
    if compare_standby and planner.consolidation in modes:
        policies = with_standby_flipped(policies, planner.standby, planner.consolidation)
    if compare_whole_gpu_demand and planner.consolidation in modes:
        policies = with_whole_demand_flipped(policies, planner.whole_gpu_demand, planner.consolidation)
    if scale_down_unneeded_s is not None and planner.keep_shaped and planner.consolidation in modes:
        policies = with_mps_release_compared(
            policies, compare_mps_release_below, planner.mps_release_below, planner.consolidation
        )
    window = (min(p.arrival_s for p in trace.pods), trace.end_s)
    results = run_policies(policies, trace, nodes, config, window, workers=1)
    source = f"validated metrics partitions {since.isoformat()} .. {until.isoformat()}"
    notes = tuple(config.fleet_models(nodes, catalog).notes())
    seconds = time.monotonic() - began
    backtest = Backtest(source, source, trace, nodes, config, window, results, seconds, notes)
    summary = {
        **report.as_json(backtest),
        "window": {"since": since.isoformat(), "until": until.isoformat()},
        "hours": {
            "read": len(found) - unreadable,
            "missing_or_quarantined": len(hours) - len(found),
            "unreadable": unreadable,
        },
    }
    target = reviews.folder_of(root, since, until)
    staging = root / "_staging" / reviews.FOLDER / uuid.uuid4().hex[:12]
    try:
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "report.html").write_text(report.render_html(backtest))
        (staging / "summary.json").write_text(json.dumps(summary, indent=2))
        store.publish(staging, target, {"window": summary["window"], "hours": summary["hours"]})
    finally:
        store.remove(staging)  # published: already moved; failed: nothing half-written is left
    opted_in = sum(pod.opted_in for pod in trace.pods)
    log.info(
        "%d of %d pods carried slicewise.io/evictable=true; %s",
        opted_in,
        len(trace.pods),
        reviews.evictable_words(summary["model"]),
    )
    for line in reviews.choice_lines(summary):
        log.info("%s", line)
    return {
        "window": summary["window"],
        "hours": summary["hours"],
        "pods": len(trace.pods),
        "pods_opted_in": opted_in,
        "evictable": evictable,
        "nodes": len(nodes),
        "consolidation_choice": summary["consolidation_choice"],
        "standby_choice": summary["standby_choice"],
        "whole_gpu_demand_choice": summary["whole_gpu_demand_choice"],
        "mps_release_choice": summary["mps_release_choice"],
        "setup_choice": summary["setup_choice"],
        "policies": {
            name: {
                k: figures[k]
                for k in (
                    "wait_mean_s",
                    "node_gpu_hours",
                    "service_gpu_hours",
                    "pods_evicted",
                    "still_waiting",
                )
            }
            for name, figures in summary["policies"].items()
        },
        "report": str(target / "report.html"),
        "summary": str(target / "summary.json"),
    }
