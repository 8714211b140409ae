"""Reading pod and node lists (the openb format), and ``slicewise backtest`` end to end on small inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slicewise.cli import main
from slicewise.whatif.trace import TraceError, load_nodes, load_pods, sample_offsets, spread_sample

PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1000,1024,1,1000,,LS,Running,0,7200,0
p1,1000,1024,1,460,,BE,Running,100,3700,160
p2,1000,1024,0,0,,BE,Running,100,3700,100
p3,1000,1024,8,1000,,LS,Pending,200,4000,
"""
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,T4\nn1,1,1,0,\nn2,1,1,8,V100M32\n"


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "pods_default.csv").write_text(PODS)
    (tmp_path / "nodes.csv").write_text(NODES)
    return tmp_path / "pods_default.csv", tmp_path / "nodes.csv"


def test_pods_get_their_run_time_from_scheduling_to_deletion_and_gpu_less_pods_are_left_out(
    small: tuple[Path, Path],
) -> None:
    trace = load_pods(small[0])
    by_name = {p.name: p for p in trace.pods}
    assert set(by_name) == {"p0", "p1", "p3"}
    assert by_name["p1"].duration_s == 3700 - 160 and by_name["p1"].share == pytest.approx(0.46)
    # Never scheduled: its lifetime stands for its run time; 8 whole GPUs.
    assert by_name["p3"].duration_s == 3800 and (by_name["p3"].gpus, by_name["p3"].share) == (8, 1.0)
    assert any("1 pods without GPUs" in note for note in trace.notes)
    nodes = load_nodes(small[1])
    assert [(n.name, n.gpus) for n in nodes] == [("n0", 2), ("n2", 8)]


def test_a_pod_list_without_times_borrows_them_from_the_default_list_beside_it(
    small: tuple[Path, Path],
) -> None:
    untimed = small[0].with_name("pods_multigpu20.csv")
    untimed.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1,1,1,300\nextra,1,1,2,1000\n")
    trace = load_pods(untimed)
    by_name = {p.name: p for p in trace.pods}
    assert by_name["p1"].arrival_s == 100 and by_name["p1"].share == pytest.approx(0.3)
    assert by_name["extra"].arrival_s == 100  # no such name: the timed pod of the same row (p1)
    assert "taken from pods_default.csv" in trace.notes[0]
    alone = small[0].parent / "lonely" / "pods_multigpu20.csv"
    alone.parent.mkdir()
    alone.write_text(untimed.read_text())
    with pytest.raises(TraceError, match="--times-from"):
        load_pods(alone)


def test_malformed_rows_are_refused_with_the_reason(small: tuple[Path, Path]) -> None:
    bad = small[0].with_name("bad.csv")
    bad.write_text(PODS.replace("p1,1000,1024,1,460", "p1,1000,1024,1,4600"))
    with pytest.raises(TraceError, match="1 malformed rows"):
        load_pods(bad)
    with pytest.raises(TraceError, match="missing columns"):
        load_nodes(small[0])


def test_a_node_share_keeps_the_mix_of_nodes() -> None:
    from slicewise.whatif.trace import TraceNode

    nodes = [TraceNode(f"n{i}", 2 if i % 2 else 8, "") for i in range(10)]
    assert [n.name for n in spread_sample(nodes, 0.2)] == ["n4", "n9"]
    assert spread_sample(nodes, 1.0) == nodes


def test_the_offsets_of_a_node_share_are_its_other_samples() -> None:
    from slicewise.whatif.trace import TraceNode

    nodes = [TraceNode(f"n{i}", 2 if i % 2 else 8, "") for i in range(10)]
    assert sample_offsets(0.2) == 5 and sample_offsets(0.004) == 250 and sample_offsets(1.0) == 1
    samples = [[n.name for n in spread_sample(nodes, 0.2, offset)] for offset in range(5)]
    assert samples[0] == ["n4", "n9"] and samples[1] == ["n3", "n8"]
    # Every node in exactly one sample, each sample the same size; the sizes of their nodes differ.
    assert sorted(name for sample in samples for name in sample) == sorted(n.name for n in nodes)
    assert {len(sample) for sample in samples} == {2}
    assert {n.gpus for n in spread_sample(nodes, 0.2, 0)} == {2, 8}
    assert {n.gpus for n in spread_sample(nodes, 0.5, 1)} == {8}
    for share, offset in ((0.2, 5), (0.2, -1), (1.0, 1)):
        with pytest.raises(TraceError, match="node offset must be in"):
            spread_sample(nodes, share, offset)


def test_the_command_prints_one_json_object_per_policy(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--json", "--workers", "1"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"static", "static-mig", "reactive", "packing", "oracle", "ideal"}
    for figures in out["policies"].values():
        for key in (
            "node_gpu_hours",
            "wait_mean_s",
            "wait_p95_s",
            "wait_over_5min",
            "wait_by_class",
            "gpus_releasable",
            "reconfigs_per_node_hour",
            "pods_evicted",
            "gpu_utilisation",
            "cost",
            "wait_cut_share_of_ideal",
            "node_gpu_hours_cut_share_of_ideal",
            "service_gpu_hours",
            "nodes_removed",
        ):
            assert key in figures
        assert 0 <= figures["gpu_utilisation"] <= 1
        assert figures["fragmentation"] is None or 0 <= figures["fragmentation"] <= 1
        paid = figures["paid"]
        assert set(paid) == {"requested", "slot_slack", "free_in_use", "no_pods"}
        assert sum(paid.values()) == pytest.approx(figures["service_gpu_hours"], abs=1e-4)
    assert out["policies"]["static"]["reconfigs_per_node_hour"] == 0
    assert out["trace"]["gpus"] == 10


def test_bad_arguments_give_one_error_line(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--policies", "magic"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown policies")
    assert main(["backtest", "--pods", "/nonexistent.csv", "--nodes", str(small[1])]) == 2
    capsys.readouterr()
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1])]
    assert main([*args, "--release-below", "1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --release-below must be in [0, 1]")
    assert main([*args, "--release-min-pod-age-h", "-1"]) == 2
    assert capsys.readouterr().err.startswith("error: --release-min-pod-age-h must be >= 0")
    assert main([*args, "--mps-release-below", "-0.1"]) == 2
    assert capsys.readouterr().err.startswith("error: --mps-release-below must be in [0, 1]")
    assert main([*args, "--pinned-share", "1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --pinned-share must be in [0, 1]")
    assert main([*args, "--scarce-kind-share", "-1"]) == 2
    assert capsys.readouterr().err.startswith("error: --scarce-kind-share must be in [0, 1]")
    assert main([*args, "--shared-reserve", "-1"]) == 2
    assert capsys.readouterr().err.startswith("error: --shared-reserve must be in [0, 100]")
    assert main([*args, "--node-share", "0.5", "--node-offset", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: node offset must be in [0, 1] for a node share of 0.5")
    assert main([*args, "--scale-down-unneeded-s", "-1"]) == 2
    assert capsys.readouterr().err.startswith("error: --scale-down-unneeded-s must be >= 0")
    assert main([*args, "--scale-down-utilization-threshold", "1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --scale-down-utilization-threshold must be in [0, 1]")
    assert main([*args, "--scale-down-delay-after-add-s", "-1"]) == 2
    assert capsys.readouterr().err.startswith("error: --scale-down-delay-after-add-s must be >= 0")
    assert main([*args, "--shared-node-group-max-gpus", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --shared-node-group-max-gpus must be >= 1")
    assert main([*args, "--keep-released", "--scale-down-unneeded-s", "600"]) == 2
    assert capsys.readouterr().err.startswith("error: --keep-released is a fleet without an autoscaler")
    for offset in ("100", "3600", "-300"):
        assert main([*args, "--plan-offset-s", offset]) == 2
        assert capsys.readouterr().err.startswith(
            "error: --plan-offset-s must be a multiple of 300 under 3600"
        )


def test_an_autoscaler_for_every_node_removes_idle_ones_and_the_cluster_pays_less(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--policies", "static"]
    args += ["--workers", "1", "--json"]
    assert main(args) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert main([*args, "--scale-down-unneeded-s", "600"]) == 0
    scaled = json.loads(capsys.readouterr().out)
    assert (fixed["model"]["scale_down_unneeded_s"], scaled["model"]["scale_down_unneeded_s"]) == (None, 600)
    before, after = fixed["policies"]["static"], scaled["policies"]["static"]
    assert before["nodes_removed"] == 0 and after["nodes_removed"] >= 1
    assert after["service_gpu_hours"] < before["service_gpu_hours"]
    assert scaled["model"]["shared_node_group"] is True  # the default: a node group shared by MPS
    # cluster-autoscaler's defaults
    assert (
        scaled["model"]["scale_down_utilization_threshold"],
        scaled["model"]["scale_down_delay_after_add_s"],
    ) == (
        0.5,
        600.0,
    )
    assert main([*args, "--scale-down-unneeded-s", "600", "--no-shared-node-group"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["shared_node_group"] is False
    assert scaled["model"]["shared_node_group_max_gpus"] is None  # every machine type has a group
    assert main([*args, "--scale-down-unneeded-s", "600", "--shared-node-group-max-gpus", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["shared_node_group_max_gpus"] == 2
    assert main([*args, "--scale-down-unneeded-s", "600", "--scale-down-utilization-threshold", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["scale_down_utilization_threshold"] == 0.0
    assert scaled["model"]["planner"]["keep_shaped"] is True  # planner_keep_shaped, as production
    assert main([*args, "--scale-down-unneeded-s", "600", "--no-keep-shaped"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["keep_shaped"] is False
    assert scaled["model"]["planner"]["mps_release_below"] == 0.25  # planner_mps_release_below, as production
    assert main([*args, "--scale-down-unneeded-s", "600", "--mps-release-below", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["mps_release_below"] == 1.0
    assert scaled["model"]["planner"]["pinned_share"] == 0.125  # planner_pinned_share, as production
    assert main([*args, "--pinned-share", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["pinned_share"] == 0.0
    assert (
        scaled["model"]["planner"]["scarce_kind_share"] == 0.0625
    )  # planner_scarce_kind_share, as production
    assert main([*args, "--scarce-kind-share", "0.125"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["scarce_kind_share"] == 0.125
    assert scaled["model"]["plan_offset_s"] == 0  # plans on the hour unless asked
    assert main([*args, "--plan-offset-s", "900"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["plan_offset_s"] == 900
    assert scaled["model"]["planner"]["rehome"] == "always"  # planner_rehome, as production
    assert main([*args, "--rehome", "waiting"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["rehome"] == "waiting"


def test_a_node_offset_replays_another_sample_and_says_which(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--policies", "static"]
    args += ["--workers", "1", "--json", "--node-share", "0.5"]
    traces = []
    for offset in ("0", "1"):
        assert main([*args, "--node-offset", offset]) == 0
        traces.append(json.loads(capsys.readouterr().out)["trace"])
    # The 8-GPU V100 node, then the 2-GPU T4 node, which cannot host the 8-GPU pod (left out).
    assert [t["gpus"] for t in traces] == [8, 2]
    assert [t["pods"] for t in traces] == [3, 2]
    assert "nodes: a 0.5 share, offset 1" in traces[1]["notes"]


def test_several_consolidation_modes_give_one_row_per_planner_policy_and_mode(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--workers", "1"]
    assert (
        main([*args, "--policies", "static,packing,thresholds", "--consolidation", "off,nodes", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert list(out["policies"]) == ["static", "packing/off", "packing/nodes", "thresholds"]
    assert out["model"]["planner"]["consolidation"] == "whole-gpus"  # thresholds keeps production's
    assert out["model"]["planner"]["release_below"] == 0.5
    assert out["model"]["planner"]["release_below_large"] == 0.25
    assert out["model"]["planner"]["shared_reserve"] == 2.0 and out["model"]["prefer_shared"] is True
    assert main([*args, "--policies", "static", "--shared-reserve", "0", "--no-prefer-shared", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert (model["planner"]["shared_reserve"], model["prefer_shared"]) == (0.0, False)
    assert model["planner"]["whole_gpu_demand"] == "median"
    assert main([*args, "--policies", "static", "--whole-gpu-demand", "pending-now", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["planner"]["whole_gpu_demand"] == "pending-now"
    [choice] = out["consolidation_choice"]
    assert choice.startswith("packing: least wait with planner_consolidation=")
    assert main([*args, "--policies", "static,packing", "--consolidation", "all", "--html", "/dev/null"]) == 0
    printed = capsys.readouterr().out
    assert "packing/whole-gpus" in printed and "packing: least wait with planner_consolidation=" in printed
    assert main([*args, "--policies", "static,thresholds", "--consolidation", "off,nodes"]) == 2
    assert "none is among --policies" in capsys.readouterr().err
    assert main([*args, "--consolidation", "off,sometimes"]) == 2
    assert "unknown consolidation ['sometimes']" in capsys.readouterr().err


def test_compare_standby_adds_packing_the_other_way_round(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--workers", "1"]
    assert main([*args, "--policies", "static,packing", "--no-standby", "--compare-standby", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["policies"]) == ["static", "packing", "packing, standby on"]
    assert out["model"]["planner"]["standby"] is False
    [line] = out["standby_choice"]
    assert line.startswith("packing with standby off (the setting): ")
    assert main([*args, "--policies", "static,packing", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["standby_choice"] == []
    assert main([*args, "--policies", "static,ideal", "--compare-standby"]) == 2
    assert "--compare-standby compares the packing policy" in capsys.readouterr().err
    assert main([*args, "--policies", "static,packing", "--compare-whole-gpu-demand", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["policies"]) == ["static", "packing", "packing, whole GPUs for pending-now"]
    [line] = out["whole_gpu_demand_choice"]
    assert line.startswith("packing with whole GPUs for median (the setting): ")
    assert main([*args, "--policies", "static", "--compare-whole-gpu-demand"]) == 2
    assert "--compare-whole-gpu-demand compares the packing policy" in capsys.readouterr().err
    assert main([*args, "--consolidation", "off,nodes", "--compare-standby"]) == 2
    assert "production's consolidation mode (whole-gpus)" in capsys.readouterr().err


def test_compare_mps_release_below_adds_a_packing_row_per_other_value_under_an_autoscaler(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--workers", "1"]
    ca = [*args, "--policies", "static,packing", "--scale-down-unneeded-s", "600"]
    assert main([*ca, "--compare-mps-release-below", "1", "0.25", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # The setting's own value (0.25) is not replayed twice; the others follow packing, lowest first.
    assert list(out["policies"]) == [
        "static",
        "packing",
        "packing, MPS release below 0",
        "packing, MPS release below 1",
    ]
    lines = out["mps_release_choice"]
    assert [line.split("; ")[1].split(":")[0] for line in lines] == [
        "MPS release below 0",
        "MPS release below 1",
    ]
    assert all(line.startswith("packing with MPS release below 0.25 (the setting): ") for line in lines)
    assert all("paid GPU-hours" in line for line in lines)
    for bad, message in (
        ([*args, "--policies", "static,packing", "--compare-mps-release-below", "1"], "needs --scale-down"),
        (
            [*ca, "--no-keep-shaped", "--compare-mps-release-below", "1"],
            "needs --scale-down-unneeded-s and --keep",
        ),
        ([*ca, "--compare-mps-release-below", "0.25", "0.2500001"], "a value other than the setting (0.25)"),
        ([*ca, "--compare-mps-release-below", "1.5"], "values must be in [0, 1]"),
        (
            [
                *args,
                "--policies",
                "static",
                "--scale-down-unneeded-s",
                "600",
                "--compare-mps-release-below",
                "1",
            ],
            "--compare-mps-release-below compares the packing policy",
        ),
    ):
        assert main(bad) == 2
        assert message in capsys.readouterr().err


@pytest.mark.traces
def test_on_the_real_sharing_trace_a_small_cluster_queues_less_with_the_planner(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 4 of the 1,213 nodes (26 GPUs) and the first 125 days: the fractional requests queue for whole GPUs;
    # on A100s the planner's MPS and MIG changes host several per GPU.
    pods = traces_dir / "alibaba_v2023_openb_pod_list_gpushare100.csv"
    nodes = traces_dir / "alibaba_v2023_openb_node_list_gpu_node.csv"
    args = ["backtest", "--pods", str(pods), "--nodes", str(nodes), "--node-share", "0.004"]
    args += ["--days", "125", "--policies", "static,reactive", "--workers", "1", "--gpu-model", "A100-80GB"]
    assert main([*args, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["policies"]
    static, reactive = figures["static"], figures["reactive"]
    assert static["pods"] == reactive["pods"] > 2000
    assert reactive["wait_mean_s"] < 0.5 * static["wait_mean_s"]
    assert reactive["gpu_utilisation"] > static["gpu_utilisation"]
    assert static["fragmentation"] == 0  # whole GPUs host any one-GPU request
    html = tmp_path / "report.html"
    assert main([*args, "--html", str(html)]) == 0
    assert "data:image/png;base64," in html.read_text()


def test_evictable_pods_and_holds_reach_the_replay_and_its_json(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--policies", "static,packing"]
    args += ["--workers", "1", "--json"]
    assert main(args) == 0
    every = json.loads(capsys.readouterr().out)
    assert (every["model"]["evictable"], every["model"]["planner"]["cordon_to_drain"]) == ("all", False)
    assert main([*args, "--evictable", "best-effort", "--cordon-to-drain"]) == 0
    some = json.loads(capsys.readouterr().out)
    assert (some["model"]["evictable"], some["model"]["planner"]["cordon_to_drain"]) == ("best-effort", True)
    assert some["policies"]["packing"]["holds"] >= 0 and every["policies"]["packing"]["holds"] == 0
    assert main([*args, "--evictable", "latency-sensitive"]) == 2


def test_static_shared_says_what_the_hourly_decisions_add_beyond_the_node_group(
    small: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backtest", "--pods", str(small[0]), "--nodes", str(small[1]), "--workers", "1"]
    ca = [*args, "--policies", "static,static-shared,packing", "--scale-down-unneeded-s", "600"]
    assert main([*ca, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    figures = out["policies"]
    [line] = out["setup_choice"]
    assert line.startswith(
        f"the hourly decisions: packing waits {figures['packing']['wait_mean_s']:,.0f} s, "
    )
    assert f"against static-shared ({figures['static-shared']['wait_mean_s']:,.0f} s: " in line
    assert f"static {figures['static']['wait_mean_s']:,.0f} s)" in line
    assert main(ca) == 0
    assert line in capsys.readouterr().out  # the text output prints it too
    # Without packing, or without static-shared, there is nothing to say.
    assert (
        main([*args, "--policies", "static,static-shared", "--scale-down-unneeded-s", "600", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["setup_choice"] == []
