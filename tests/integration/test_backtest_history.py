"""``slicewise backtest --prometheus``: the cluster's own history, read from a real Prometheus (backfilled with
the simulated fleet) by the ingest's reader, replayed under the policies."""

from __future__ import annotations

import json

import pytest

from slicewise.cli import main

from .conftest import CLEAN_HOURS, PrometheusWithHistory, hour

pytestmark = pytest.mark.integration


def test_the_history_in_prometheus_is_a_trace_the_backtest_replays(
    prometheus: PrometheusWithHistory, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--prometheus", prometheus.url, "--since", hour(0).isoformat()]
    args += [
        "--until",
        hour(CLEAN_HOURS).isoformat(),
        "--policies",
        "static,packing",
        "--workers",
        "1",
        "--evictable",
        "annotated",
        "--json",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    # Only the pods whose slicewise.io/evictable=true kube-state-metrics exported may be evicted: the serving
    # workloads' pods, not the training jobs'.
    assert out["model"]["evictable"] == "annotated"
    [opt_ins] = [note for note in out["trace"]["notes"] if "carried slicewise.io/evictable=true" in note]
    opted_in, pods = (int(n.replace(",", "")) for n in opt_ins.split(" pods ")[0].split(" of "))
    assert 0 < opted_in < pods
    # Every node of the simulated fleet, with its physical GPU count, from the DCGM series.
    fleet = {node.name: node.gpus for node in prometheus.fleet.nodes}
    assert out["trace"]["nodes"] == len(fleet)
    assert out["trace"]["gpus"] == sum(fleet.values())
    static, packing = out["policies"]["static"], out["policies"]["packing"]
    # The pods that held GPUs in those hours (kube-state-metrics requests), replayed by both policies.
    assert static["pods"] == packing["pods"] > 0
    assert static["reconfigs_per_node_hour"] == 0
    assert 0 < static["gpu_utilisation"] <= 1


def test_a_window_without_pods_is_refused_with_one_line(
    prometheus: PrometheusWithHistory, capsys: pytest.CaptureFixture[str]
) -> None:
    before = hour(-48)
    args = ["backtest", "--prometheus", prometheus.url, "--since", before.isoformat()]
    assert main([*args, "--until", hour(-47).isoformat()]) == 2
    assert capsys.readouterr().err.startswith("error: no pod requested a GPU")
