"""The backtest's saturation and sizing modes on tiny fleets, every answer computed by hand, and on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slicewise.catalog import load_catalog
from slicewise.cli import main
from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.run import replay, run_policies
from slicewise.whatif.saturation import inflate
from slicewise.whatif.sizing import smallest_fleet
from slicewise.whatif.trace import PodTrace, TraceNode, TracePod

CATALOG = load_catalog()
CONFIG = BacktestConfig(eviction_cost_s=0.0)
TWO_T4 = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]


def pod(
    name: str, arrival: float, duration: float, share: float, gpus: int = 1, models: tuple[str, ...] = ()
) -> TracePod:
    return TracePod(name, arrival, duration, gpus, share, "LS", models)


def test_saturation_fills_the_fleet_with_drawn_pods_and_measures_what_each_policy_allocates() -> None:
    # Every request asks 0.3 of a GPU: 7 arrive (2.1 GPU-equivalents >= 2 GPUs). Whole GPUs host 2 of them
    # (0.6 of 2 GPUs); fractional sharing 3 per GPU (1.8 of 2). A request for a V100 fits no node: left out.
    trace = PodTrace(
        (pod("a", 0, 10, 0.3), pod("b", 5, 10, 0.3), pod("v", 5, 10, 0.3, models=("V100M32",))), ()
    )
    saturation = inflate(trace, TWO_T4, CONFIG, seed=1)
    assert len(saturation.trace.pods) == 7 and {p.name.split("#")[0] for p in saturation.trace.pods} <= {
        "a",
        "b",
    }
    assert [p.arrival_s for p in saturation.trace.pods] == [60.0 * i for i in range(7)]
    assert saturation.config.drain_cap_s == 0
    policies = [POLICIES[name] for name in ("static", "ideal")]
    results = run_policies(
        policies, saturation.trace, TWO_T4, saturation.config, saturation.window, workers=1
    )
    assert saturation.allocated_share(results["static"]) == pytest.approx(0.3)
    assert results["static"].still_waiting == 5
    assert saturation.allocated_share(results["ideal"]) == pytest.approx(0.9)
    assert results["ideal"].still_waiting == 1
    with pytest.raises(ValueError, match="no request of the trace fits"):
        inflate(PodTrace((pod("v", 0, 10, 0.3, models=("V100M32",)),), ()), TWO_T4, CONFIG)


def test_sizing_finds_the_smallest_share_of_the_nodes_that_keeps_the_wait_under_the_target() -> None:
    # Four half-GPU pods at once for 1000 s. Whole GPUs need all four one-GPU nodes (with three, one pod waits
    # 1000 s: mean 250 > 100); fractional sharing needs two (with one, two pods wait: mean 500).
    nodes = [TraceNode(f"n{i}", 1, "T4") for i in range(4)]
    trace = PodTrace(tuple(pod(f"p{i}", 0, 1000, 0.5) for i in range(4)), ())
    window = (0.0, 5000.0)
    static = smallest_fleet(POLICIES["static"], trace, nodes, CONFIG, window, 100.0, replay)
    assert (static.nodes, static.gpus, static.share, static.wait_mean_s) == (4, 4, 1.0, 0.0)
    assert static.probes == ((2, 500.0), (3, 250.0), (4, 0.0))
    bound = smallest_fleet(POLICIES["ideal"], trace, nodes, CONFIG, window, 100.0, replay)
    assert (bound.nodes, bound.share) == (2, 0.5)
    never = smallest_fleet(POLICIES["static"], trace, nodes[:1], CONFIG, window, 100.0, replay)
    assert never.nodes is None and never.wait_mean_s == pytest.approx(1500)  # 0, 1000, 2000, 3000 s


PODS = """name,num_gpu,gpu_milli,creation_time,deletion_time
p0,1,500,0,3600
p1,1,500,0,3600
p2,1,300,60,3600
p3,2,1000,120,1800
"""
NODES = "sn,gpu,model\nn0,2,T4\nn1,2,G2\n"


@pytest.fixture
def small(tmp_path: Path) -> list[str]:
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "nodes.csv").write_text(NODES)
    return ["backtest", "--pods", str(tmp_path / "pods.csv"), "--nodes", str(tmp_path / "nodes.csv")]


def test_the_command_runs_the_saturation_mode(small: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*small, "--saturate", "--policies", "static,ideal", "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 4
    assert out["saturation"]["ideal"]["allocated_share"] > out["saturation"]["static"]["allocated_share"] > 0
    assert any("G2: not a known model" in note for note in out["notes"])


def test_the_command_runs_the_sizing_mode(small: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*small, "--size-for-wait", "60", "--policies", "static,ideal", "--workers", "1"]) == 0
    table = capsys.readouterr().out
    assert "static" in table and "ideal" in table and "mean wait <= 60 s" in table
    assert main([*small, "--size-for-wait", "60", "--saturate"]) == 2
    assert "two modes" in capsys.readouterr().err
    assert main([*small, "--model-map", "G2=B200"]) == 2
    assert "unknown GPU model 'B200'" in capsys.readouterr().err


def test_the_html_report_plots_wait_and_node_gpus_over_time_per_policy(
    small: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    assert main([*small, "--policies", "static,ideal", "--workers", "1", "--html", str(page)]) == 0
    text = page.read_text()
    assert text.count("<img alt='plot' src='data:image/png;base64,") == 5
    assert "its share of the way from\n<code>static</code> to <code>ideal</code>" in text
    table = capsys.readouterr().out
    assert table.splitlines()[0].startswith("policy") and "ideal" in table
    # Where the paid GPU-hours went, on the page and in the text: one row per policy.
    assert "<h2>Where the paid GPU-hours went</h2>" in text
    paid = table.split("Where the paid GPU-hours went:\n")[1].splitlines()
    assert paid[0].split()[:3] == ["policy", "paid", "GPU-h"]
    assert [row.split()[0] for row in paid[1:3]] == ["static", "ideal"]
