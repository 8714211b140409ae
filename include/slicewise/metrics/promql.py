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


def quote_regex_alternation(values: Sequence[str]) -> str:
    """A PromQL regex matching exactly ``values`` (escaped for RE2 and for the PromQL string)."""
    escaped = (re.escape(v).replace("\\", "\\\\").replace('"', '\\"') for v in sorted(values))
    return "|".join(escaped)


def gpu_field_query(metric: str, hosts: Sequence[str] | None, step_s: int) -> str:
    """Range-query expression for one DCGM metric on ``hosts`` (all hosts when None).

    ``last_over_time(...[step])`` instead of the bare selector: a bare selector would fill a gap of up to
    Prometheus' 5-minute lookback with the previous value, hiding missing scrapes from the completeness check.
    """
    parts = []
    for label in HOSTNAME_LABELS:
        matcher = f'{label}=~"{quote_regex_alternation(hosts)}"' if hosts is not None else f'{label}!=""'
        parts.append(f"last_over_time({metric}{{{matcher}}}[{step_s}s])")
    return " or ".join(parts)


def host_inventory_query(window_s: int) -> str:
    """Instant query: number of GPU series per host over the window (drives the sharding)."""
    metric = schema.GPU_FIELDS["engine_active"][0]
    return " or ".join(
        f'count by ({label}) (last_over_time({metric}{{{label}!=""}}[{window_s}s]))'
        for label in HOSTNAME_LABELS
    )


def demand_requests_query(step_s: int) -> str:
    return f'last_over_time({schema.KSM_REQUESTS}{{resource=~"{schema.GPU_RESOURCE_REGEX}"}}[{step_s}s])'


def demand_unschedulable_query(step_s: int) -> str:
    return f"last_over_time({schema.KSM_UNSCHEDULABLE}[{step_s}s]) == 1"


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
