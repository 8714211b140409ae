"""PromQL for the series Slicewise reads, and the sharding that keeps each query small.

Two dcgm-exporter dialects exist: releases up to 4.5.3-4.8.2 label the node ``Hostname``, later ones
``hostname``. Every GPU query matches both, so one Slicewise works against either exporter version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slicewise import schema

HOSTNAME_LABELS = ("Hostname", "hostname")


def step_window(step_s: int) -> str:
    """The range of one step, open on the left: ``(t - step, t]``.

    Prometheus 2 range selectors include both ends, so a plain ``[60s]`` at ``t`` would also see the sample at
    ``t - 60s`` and report a series one step after it ended. One millisecond less gives the same half-open
    window on Prometheus 2 and 3.
    """
    return f"{step_s * 1000 - 1}ms"


def quote_regex_alternation(values: Sequence[str]) -> str:
    """A PromQL regex matching exactly ``values`` (escaped for RE2 and for the PromQL string)."""
    escaped = (re.escape(v).replace("\\", "\\\\").replace('"', '\\"') for v in sorted(values))
    return "|".join(escaped)


#: Matches series that carry neither node label: unattributable, so validation must see them, not miss them.
UNLABELLED = ",".join(f'{label}=""' for label in HOSTNAME_LABELS)


def gpu_field_query(metric: str, hosts: Sequence[str] | None, step_s: int) -> str:
    """Range-query expression for one DCGM metric on ``hosts`` (every series when None).

    The host ``""`` stands for series without any node label. ``last_over_time(...[step])`` instead of the
    bare selector: a bare selector would fill a gap of up to Prometheus' 5-minute lookback with the previous
    value, hiding missing scrapes from the completeness check.
    """
    named = [h for h in hosts if h] if hosts is not None else None
    matchers = []
    if named is None or named:
        for label in HOSTNAME_LABELS:
            matchers.append(f'{label}=~"{quote_regex_alternation(named)}"' if named else f'{label}!=""')
    if hosts is None or "" in hosts:
        matchers.append(UNLABELLED)
    return " or ".join(
        f"last_over_time({metric}{{{matcher}}}[{step_window(step_s)}])" for matcher in matchers
    )


def host_inventory_query(window_s: int) -> str:
    """Instant query: number of GPU series per host over the window (drives the sharding).

    Series without a node label are counted under an empty label set, which reads as host ``""``.
    """
    metric = schema.GPU_FIELDS["engine_active"][0]
    per_host = [
        f'count by ({label}) (last_over_time({metric}{{{label}!=""}}[{window_s}s]))'
        for label in HOSTNAME_LABELS
    ]
    unlabelled = f"count(last_over_time({metric}{{{UNLABELLED}}}[{window_s}s]))"
    return " or ".join([*per_host, unlabelled])


def demand_requests_query(step_s: int) -> str:
    return f'last_over_time({schema.KSM_REQUESTS}{{resource=~"{schema.GPU_RESOURCE_REGEX}"}}[{step_window(step_s)}])'


def demand_unschedulable_query(step_s: int) -> str:
    return f"last_over_time({schema.KSM_UNSCHEDULABLE}[{step_window(step_s)}]) == 1"


def demand_share_query(step_s: int) -> str:
    """Pods' declared shares (``slicewise.io/gpu-share``), as kube-state-metrics exports allowlisted annotations."""
    return (
        f'last_over_time({schema.KSM_POD_ANNOTATIONS}{{{schema.SHARE_ANNOTATION_LABEL}!=""}}'
        f"[{step_window(step_s)}])"
    )


def demand_opt_in_query(step_s: int) -> str:
    """Pods that opt in to Slicewise's evictions (``slicewise.io/evictable=true``), as kube-state-metrics exports
    allowlisted annotations."""
    return (
        f'last_over_time({schema.KSM_POD_ANNOTATIONS}{{{schema.EVICTABLE_ANNOTATION_LABEL}="true"}}'
        f"[{step_window(step_s)}])"
    )


def demand_selector_query(step_s: int) -> str:
    """Pods' nodeSelectors on ``nvidia.com/gpu.product``, ``nvidia.com/gpu.sharing-strategy`` or
    ``nvidia.com/gpu.replicas`` (kube-state-metrics' opt-in ``kube_pod_nodeselectors``; one series per pod, so
    ``or`` returns each pod naming any of them once)."""
    return " or ".join(
        f'last_over_time({schema.KSM_POD_NODESELECTORS}{{{label}!=""}}[{step_window(step_s)}])'
        for label in schema.SELECTOR_LABELS.values()
    )


def shard_hosts(series_per_host: dict[str, int], series_per_shard: int) -> list[list[str]]:
    """Group hosts so each shard holds at most ``series_per_shard`` series (a host is never split).

    Hosts are taken in name order so the same fleet always gives the same shards (repeatable logs and runs).
    """
    shards: list[list[str]] = []
    current: list[str] = []
    current_series = 0
    for host in sorted(series_per_host):
        count = max(1, series_per_host[host])
        if current and current_series + count > series_per_shard:
            shards.append(current)
            current, current_series = [], 0
        current.append(host)
        current_series += count
    if current:
        shards.append(current)
    return shards


@dataclass(frozen=True)
class TimeChunk:
    """An inclusive range-query window ``[start, end]`` evaluated every ``step``."""

    start: datetime
    end: datetime


def time_chunks(start: datetime, end: datetime, step_s: int, max_points: int) -> list[TimeChunk]:
    """Split ``[start, end)`` into non-overlapping range-query windows of at most ``max_points`` steps.

    Range queries include both ends, so each chunk ends one step before the next begins: no sample is
    fetched twice (unlike prometheus-api-client's own chunking, which repeats boundary samples).
    """
    if end <= start:
        raise ValueError(f"empty interval: {start.isoformat()} .. {end.isoformat()}")
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    step = timedelta(seconds=step_s)
    chunks = []
    chunk_start = start
    while chunk_start < end:
        chunk_end = min(chunk_start + step * (max_points - 1), end - step)
        if chunk_end < chunk_start:  # interval shorter than one step
            chunk_end = chunk_start
        chunks.append(TimeChunk(chunk_start, chunk_end))
        chunk_start = chunk_end + step
    return chunks
