"""Query building, host sharding and time chunking."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from slicewise.metrics import promql

START = datetime(2026, 11, 29, 10, tzinfo=UTC)


def test_gpu_query_matches_both_hostname_dialects_and_limits_lookback_to_one_step() -> None:
    query = promql.gpu_field_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ["node-a", "node-b"], 60)
    assert 'Hostname=~"node\\\\-a|node\\\\-b"' in query
    assert 'hostname=~"node\\\\-a|node\\\\-b"' in query
    assert query.count("[59999ms]") == 2 and " or " in query


def test_host_regex_is_anchored_to_exact_names() -> None:
    # PromQL regex matchers are fully anchored; escaping keeps "." from matching any character.
    alternation = promql.quote_regex_alternation(["gpu.node-1", "gpu.node-10"])
    pattern = alternation.replace("\\\\", "\\")
    assert re.fullmatch(pattern, "gpu.node-1")
    assert not re.fullmatch(pattern, "gpuxnode-1")


def test_all_hosts_query_also_reads_series_without_a_node_label() -> None:
    query = promql.gpu_field_query("DCGM_FI_DEV_FB_USED", None, 30)
    assert 'Hostname!=""' in query and 'hostname!=""' in query
    assert '{Hostname="",hostname=""}' in query


def test_the_empty_host_of_a_shard_selects_unlabelled_series_only() -> None:
    # `Hostname=~""` would also match every series of the other dialect: never put "" in the regex.
    query = promql.gpu_field_query("DCGM_FI_DEV_FB_USED", ["", "node-a"], 60)
    assert '=~"node\\\\-a"' in query and '=~""' not in query and "|" not in query
    assert '{Hostname="",hostname=""}' in query
    only_unlabelled = promql.gpu_field_query("DCGM_FI_DEV_FB_USED", [""], 60)
    assert only_unlabelled == 'last_over_time(DCGM_FI_DEV_FB_USED{Hostname="",hostname=""}[59999ms])'


def test_inventory_counts_unlabelled_series_too() -> None:
    assert 'count(last_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname="",hostname=""}[3600s]))' in (
        promql.host_inventory_query(3600)
    )


def test_shards_respect_series_budget_and_never_split_a_host() -> None:
    hosts = {f"node-{i:03d}": 8 for i in range(25)}
    shards = promql.shard_hosts(hosts, series_per_shard=20)
    assert all(sum(hosts[h] for h in shard) <= 20 for shard in shards)
    assert sorted(h for shard in shards for h in shard) == sorted(hosts)
    assert len(shards) == 13  # two 8-series hosts fit in 20, a third does not


def test_oversized_host_gets_its_own_shard() -> None:
    shards = promql.shard_hosts({"big": 50, "small": 1}, series_per_shard=10)
    assert shards == [["big"], ["small"]]


def test_one_hour_at_60s_is_a_single_chunk_ending_one_step_before_the_interval_end() -> None:
    chunks = promql.time_chunks(START, START + timedelta(hours=1), 60, 10_000)
    assert chunks == [promql.TimeChunk(START, START + timedelta(minutes=59))]


def test_chunks_cover_every_step_exactly_once_under_the_point_limit() -> None:
    end = START + timedelta(days=10)
    chunks = promql.time_chunks(START, end, 60, 11_000)
    steps = [
        c.start + timedelta(minutes=k)
        for c in chunks
        for k in range(int((c.end - c.start).total_seconds() // 60) + 1)
    ]
    assert len(steps) == len(set(steps)) == 10 * 24 * 60
    assert all((c.end - c.start).total_seconds() / 60 + 1 <= 11_000 for c in chunks)
    assert steps[0] == START and steps[-1] == end - timedelta(minutes=1)


def test_empty_interval_is_rejected() -> None:
    with pytest.raises(ValueError, match="empty interval"):
        promql.time_chunks(START, START, 60, 100)
