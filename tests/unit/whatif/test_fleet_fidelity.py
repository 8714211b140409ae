"""The backtest's fleet as the node list describes it, its scheduler models, and what it charges: every expected
figure computed by hand on tiny traces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slicewise.catalog import CatalogError, load_catalog
from slicewise.planning.config import PlannerConfig
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.fleet import Ask, ReplayFleet, SimNode
from slicewise.whatif.gpus import UNNAMED, parse_model_map, resolve_models
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.trace import (
    FRACTIONAL,
    MULTI_GPU,
    ONE_GPU,
    PodTrace,
    TraceError,
    TraceNode,
    TracePod,
    hostable_on,
    load_pods,
)

CATALOG = load_catalog()
NO_COSTS = BacktestConfig(eviction_cost_s=0.0)


def pod(
    name: str, arrival: float, duration: float, share: float, gpus: int = 1, models: str = ""
) -> TracePod:
    return TracePod(name, arrival, duration, gpus, share, "LS", tuple(models.split("|")) if models else ())


def replay(
    policy: str,
    pods: list[TracePod],
    nodes: list[TraceNode],
    end: float,
    config: BacktestConfig = NO_COSTS,
    start_as: list[tuple[str, str]] | None = None,
) -> PolicyResult:
    return Replay(POLICIES[policy], tuple(pods), nodes, CATALOG, config, (0.0, end), start_as).run()


# --- GPU models from the node list ------------------------------------------------------------------------------


def test_node_list_names_map_to_catalogue_models_and_unknown_ones_are_assumed_without_mig() -> None:
    models = resolve_models(["T4", "V100M32", "G2", "NVIDIA A100-SXM4-80GB", "A30-24GB"], CATALOG)
    assert {name: m.name for name, m in models.by_name.items()} == {
        "T4": "T4-16GB",
        "V100M32": "V100-32GB",
        "G2": UNNAMED,
        "NVIDIA A100-SXM4-80GB": "A100-80GB",  # a DCGM model name, as --prometheus reads nodes
        "A30-24GB": "A30-24GB",
    }
    assert models.assumed == ("G2",)
    assert "G2: not a known model, assumed to be a GPU without MIG" in models.notes()[1]
    mapped = resolve_models(["T4", "G2"], CATALOG, mapping=parse_model_map(["G2=A100-80GB"]))
    assert mapped.of("G2").name == "A100-80GB" and mapped.assumed == ()
    everything = resolve_models(["T4", "G2"], CATALOG, override="H100-80GB")
    assert {m.name for m in everything.by_name.values()} == {"H100-80GB"}
    with pytest.raises(CatalogError, match="unknown GPU model 'B200'"):
        resolve_models(["T4"], CATALOG, mapping={"T4": "B200"})
    with pytest.raises(ValueError, match="NAME=MODEL"):
        parse_model_map(["G2"])


def test_a_node_without_mig_stays_whole_gpus_under_every_policy() -> None:
    nodes = [TraceNode("t4", 2, "T4"), TraceNode("a100", 2, "A100M80")]
    config = BacktestConfig(model_map={"A100M80": "A100-80GB"})
    fleet = Replay(
        POLICIES["static-mig"], (pod("p", 0, 10, 0.2),), nodes, CATALOG, config, (0.0, 100.0)
    ).fleet
    assert [(n.name, n.model.name, n.mig_config) for n in fleet.nodes] == [
        ("t4", "T4-16GB", "all-disabled"),
        ("a100", "A100-80GB", "all-balanced"),
    ]


def test_gpu_spec_is_read_from_the_pod_list(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        "a,1,1000,V100M32|V100M16|V100M32,0,100\nb,1,500,,0,100\n"
    )
    by_name = {p.name: p for p in load_pods(path).pods}
    assert by_name["a"].models == ("V100M16", "V100M32") and by_name["b"].models == ()
    assert (by_name["a"].size_class, by_name["b"].size_class) == (ONE_GPU, FRACTIONAL)


def test_a_pod_that_names_one_gpu_model_waits_for_it_while_other_gpus_are_free() -> None:
    # a: one T4; b: one V100-32GB. Both pods may run only on the V100: p1 waits for p0 although a is free.
    nodes = [TraceNode("a", 1, "T4"), TraceNode("b", 1, "V100M32")]
    pods = [pod("p0", 0, 100, 1.0, models="V100M32"), pod("p1", 10, 100, 1.0, models="V100M32")]
    result = replay("static", pods, nodes, end=1000)
    assert result.wait_mean_s == pytest.approx((0 + 90) / 2)  # p1: 10 -> 100
    assert result.node_gpu_hours == pytest.approx(200 / 3600)  # b busy 0-200, a never
    # a is releasable all the time, b after 200 s: (1000 + 800) / 1000 GPUs on average.
    assert result.gpus_releasable == pytest.approx(1.8)
    free = replay("static", [pod("p0", 0, 100, 1.0), pod("p1", 10, 100, 1.0)], nodes, end=1000)
    assert free.wait_mean_s == 0  # without the spec p1 takes a at once


# --- scheduler models -------------------------------------------------------------------------------------------

TWO_NODES = [TraceNode("n1", 2, "T4"), TraceNode("n2", 2, "T4")]
# Two one-GPU pods, then a pod that needs both GPUs of one node.
THREE = [pod("p0", 0, 1000, 1.0), pod("p1", 10, 1000, 1.0), pod("p2", 20, 100, 1.0, gpus=2)]


@pytest.mark.parametrize("scheduler", ["first-fit", "binpack"])
def test_bin_packing_keeps_a_node_whole_for_the_two_gpu_pod(scheduler: str) -> None:
    # p0 -> n1 (a tie: name order); p1 -> n1 (MostAllocated: n1 would be full, n2 half; first fit: n1 has
    # room); p2 -> n2 at once.
    config = BacktestConfig(scheduler=scheduler, eviction_cost_s=0.0)
    result = replay("static", THREE, TWO_NODES, end=2000, config=config)
    assert result.wait_mean_s == 0
    assert result.node_gpu_hours == pytest.approx((2 * 1010 + 2 * 100) / 3600)  # n1 0-1010, n2 20-120


def test_spreading_splits_the_one_gpu_pods_and_the_two_gpu_pod_waits() -> None:
    # p0 -> n1 (tie); p1 -> n2 (LeastAllocated: n2 would be half full, n1 full); p2 finds no node with two
    # free GPUs until p0 leaves n1 at 1000, and runs 1000-1100.
    config = BacktestConfig(scheduler="spread", eviction_cost_s=0.0)
    result = replay("static", THREE, TWO_NODES, end=2000, config=config)
    assert result.wait_mean_s == pytest.approx(980 / 3)
    assert result.wait_by_class[MULTI_GPU].mean_s == pytest.approx(980)
    assert result.node_gpu_hours == pytest.approx((2 * 1100 + 2 * 1000) / 3600)  # n1 0-1100, n2 10-1010


def test_an_unknown_scheduler_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scheduler 'random'"):
        replay("static", THREE, TWO_NODES, end=10, config=BacktestConfig(scheduler="random"))


# --- what a replay charges --------------------------------------------------------------------------------------


def test_waits_are_reported_per_size_class_and_idle_nodes_as_releasable() -> None:
    # n1 takes f (half a GPU) and w (one GPU), n2 the 2-GPU pod m; m2 (2 GPUs) arrives at 50 and starts on n1
    # at 100, when f and w have left.
    pods = [
        pod("f", 0, 100, 0.5),
        pod("w", 0, 100, 1.0),
        pod("m", 0, 100, 1.0, 2),
        pod("m2", 50, 100, 1.0, 2),
    ]
    result = replay("static", pods, TWO_NODES, end=200)
    assert result.wait_mean_s == pytest.approx(50 / 4)
    assert {c: (w.pods, w.mean_s) for c, w in result.wait_by_class.items()} == {
        FRACTIONAL: (1, 0.0),
        ONE_GPU: (1, 0.0),
        MULTI_GPU: (2, 25.0),
    }
    assert result.wait_over_5min == 0
    assert result.gpus_releasable == pytest.approx((0 * 100 + 2 * 100) / 200)  # n2 idle from 100 to 200


def test_pods_left_at_the_windows_end_are_served_and_charged_after_it() -> None:
    one = [TraceNode("n1", 1, "T4")]
    pods = [pod("p0", 0, 800, 1.0), pod("p1", 100, 500, 1.0)]  # p1 waits 700 s and runs 800-1300
    served = replay("static", pods, one, end=1000)
    assert (served.end_s, served.still_waiting) == (1300, 0)
    assert served.node_gpu_hours == pytest.approx(1300 / 3600)
    assert served.wait_mean_s == pytest.approx(700 / 2)
    cut = replay("static", pods, one, end=1000, config=BacktestConfig(eviction_cost_s=0.0, drain_cap_s=0.0))
    assert cut.node_gpu_hours == pytest.approx(1000 / 3600)  # what the old window-bound figure undercounted


def test_an_evicted_pod_loses_the_eviction_cost_in_run_time() -> None:
    # As in test_scheduler_model's MPS split: at 3600 s reactive gives the A100 three MPS tenants, evicting a
    # (0.2 GPU, 7200 s, 3600 s done); the node is back at 3700 s. b and c (3000 s each) end at 6700 s; a's
    # last 3600 s end at 7300 s, or 7400 s when an eviction costs 100 s.
    pods = [pod("a", 0, 7200, 0.2), pod("b", 10, 3000, 0.2), pod("c", 10, 3000, 0.2)]
    one = [TraceNode("n1", 1, "A100")]
    start = [("all-disabled", "default")]
    for cost, end_of_a in ((0.0, 7300), (100.0, 7400)):
        config = BacktestConfig(gpu_model="A100-80GB", reconfigure_s=100.0, eviction_cost_s=cost)
        result = replay("reactive", pods, one, end=20_000, config=config, start_as=start)
        assert result.pods_evicted == 1
        assert result.wait_mean_s == pytest.approx((100 + 3690 + 3690) / 3)
        assert result.node_gpu_hours == pytest.approx((3600 + end_of_a - 3700) / 3600)


def test_cost_prices_each_node_at_its_models_price() -> None:
    nodes = [TraceNode("a", 1, "T4"), TraceNode("b", 2, "V100M32")]
    pods = [pod("p0", 0, 3600, 1.0, models="T4"), pod("p1", 0, 3600, 1.0, models="V100M32")]
    config = BacktestConfig(price_per_gpu_hour=1.0, prices={"V100-32GB": 3.0})
    result = replay("static", pods, nodes, end=3600, config=config)
    assert result.node_gpu_hours == pytest.approx(3.0)  # a's one GPU and b's two, for an hour
    assert result.cost == pytest.approx(1 * 1.0 + 2 * 3.0)


def test_pods_no_node_of_the_fleet_can_host_are_left_out_with_a_note() -> None:
    nodes = [TraceNode("a", 2, "T4")]
    trace = PodTrace(
        (pod("t4", 0, 10, 0.5), pod("a10", 0, 10, 0.5, models="A10"), pod("big", 0, 10, 1.0, 8)), ()
    )
    kept = hostable_on(trace, nodes)
    assert [p.name for p in kept.pods] == ["t4"]
    assert kept.notes == ("2 pods no node of this fleet can host (GPUs or gpu_spec) left out",)
    assert hostable_on(kept, nodes) is kept
    with pytest.raises(TraceError, match="no pod of the trace fits"):
        hostable_on(PodTrace(trace.pods[1:], ()), nodes)


def test_a_consolidation_frees_a_node_for_a_two_gpu_pod() -> None:
    # Spreading puts a on n1 and b on n2; c needs both GPUs of one node and waits. At 3600 s reactive empties n1:
    # a fits n2's free GPU, so it is evicted and placed there at once; n1 stays cordoned 60 s and then takes c.
    pods = [pod("a", 0, 20_000, 1.0), pod("b", 1, 20_000, 1.0), pod("c", 10, 3000, 1.0, gpus=2)]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = BacktestConfig(scheduler="spread", eviction_cost_s=0.0, drain_s=60.0, planner=planner)
    result = replay("reactive", pods, TWO_NODES, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted, result.reconfigs_per_node_hour) == (1, 1, 0.0)
    assert result.evictions_by_rule["consolidation"] == 1 and result.most_evicted_pod_by_rule == {
        "consolidation": 1
    }
    assert result.wait_mean_s == pytest.approx((0 + 0 + 3650) / 3)  # c: 10 -> 3660
    # n1: a until 3600, c 3660-6660; n2: b 1-20001 and a's last 16,400 s from 3600.
    assert result.node_gpu_hours == pytest.approx(2 * (3600 + 3000 + 20_000) / 3600)
    off = dataclasses.replace(config, planner=dataclasses.replace(planner, consolidation="off"))
    stuck = replay("reactive", pods, TWO_NODES, end=30_000, config=off)
    assert stuck.consolidations == 0 and stuck.wait_mean_s == pytest.approx((20_000 - 10) / 3)


def test_the_planner_runs_at_its_offset_past_each_hour() -> None:
    # The trace of the test above with the plans 900 s past each hour: the first comes at 4500 s, not 3600, so n1
    # is emptied then, and c waits 10 -> 4560 (after the 60 s drain) instead of 10 -> 3660.
    pods = [pod("a", 0, 20_000, 1.0), pod("b", 1, 20_000, 1.0), pod("c", 10, 3000, 1.0, gpus=2)]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = BacktestConfig(
        scheduler="spread", eviction_cost_s=0.0, drain_s=60.0, planner=planner, plan_offset_s=900
    )
    result = replay("reactive", pods, TWO_NODES, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted) == (1, 1)
    assert result.wait_mean_s == pytest.approx((0 + 0 + 4550) / 3)
    # n1: a until 4500, c 4560-7560; n2: b 1-20001 and a's last 15,500 s from 4500.
    assert result.node_gpu_hours == pytest.approx(2 * (4500 + 3000 + 20_000) / 3600)
    # static has no planner: the clock changes nothing of it.
    assert replay("static", pods, TWO_NODES, 30_000, config).wait_mean_s == pytest.approx(
        replay("static", pods, TWO_NODES, 30_000, dataclasses.replace(config, plan_offset_s=0)).wait_mean_s
    )


@pytest.mark.parametrize("offset", [-300, 100, 3600])
def test_a_plan_offset_off_the_sampling_steps_or_past_the_hour_is_refused(offset: int) -> None:
    with pytest.raises(ValueError, match="plan_offset_s must be a multiple of step_s"):
        BacktestConfig(plan_offset_s=offset)


def test_each_consolidation_mode_is_replayed_as_its_own_policy_and_the_choice_names_the_modes() -> None:
    # The trace of the test above, every consolidation mode at once (slicewise backtest --consolidation all):
    # reactive/off leaves c waiting for a or b to finish (as static does), the other two empty n1 for it.
    from slicewise.whatif.policies import per_consolidation
    from slicewise.whatif.report import consolidation_choice
    from slicewise.whatif.run import Backtest, run_policies

    pods = [pod("a", 0, 20_000, 1.0), pod("b", 1, 20_000, 1.0), pod("c", 10, 3000, 1.0, gpus=2)]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)  # whole-gpus unless a policy says
    config = BacktestConfig(scheduler="spread", eviction_cost_s=0.0, drain_s=60.0, planner=planner)
    policies = per_consolidation([POLICIES["static"], POLICIES["reactive"]], ("off", "whole-gpus", "nodes"))
    assert [p.name for p in policies] == ["static", "reactive/off", "reactive/whole-gpus", "reactive/nodes"]
    assert per_consolidation(policies[:2], ("nodes",)) == policies[:2]  # one mode: as they are
    trace = PodTrace(tuple(pods), ())
    results = run_policies(policies, trace, TWO_NODES, config, (0.0, 30_000.0), workers=1)
    waits = {name: r.wait_mean_s for name, r in results.items()}
    assert waits["reactive/off"] == waits["static"] == pytest.approx((20_000 - 10) / 3)
    assert waits["reactive/whole-gpus"] == waits["reactive/nodes"] == pytest.approx(3650 / 3)
    backtest = Backtest("pods", "nodes", trace, TWO_NODES, config, (0.0, 30_000.0), results, 0.0)
    [line] = consolidation_choice(backtest)
    assert line.startswith("reactive: least wait with planner_consolidation=whole-gpus, nodes (1,217 s)")
    # What each mode cost in disruption: off moves nothing, the other two evict one pod to empty n1.
    assert line.endswith("; pods evicted: off 0, whole-gpus 1, nodes 1")
    assert "waits longer than static" not in line and "never served" not in line
    slower = dict(results, static=results["reactive/whole-gpus"])  # a baseline that waited less than off
    [line] = consolidation_choice(dataclasses.replace(backtest, results=slower))
    assert line.endswith("waits longer than static with off")
    # A mode that left pods waiting used fewer node-GPU-hours for it: it is named, never the fewest.
    stuck = dataclasses.replace(results["reactive/off"], still_waiting=1, node_gpu_hours=0.0)
    [line] = consolidation_choice(
        dataclasses.replace(backtest, results=dict(results, **{"reactive/off": stuck}))
    )
    assert "fewest node-GPU-hours with off" not in line and "pods never served with off (1)" in line
    # The evictions table: only the modes that evicted, each of its one pod by consolidation.
    from slicewise.whatif.report import eviction_rows, eviction_table, render_html

    assert eviction_rows(backtest) == [
        ["reactive/whole-gpus", "1", "0", "1", "0", "0", "1 (consolidation 1)", "0"],
        ["reactive/nodes", "1", "0", "1", "0", "0", "1 (consolidation 1)", "0"],
    ]
    assert "<h2>Evictions by rule</h2>" in render_html(backtest)
    calm = dataclasses.replace(backtest, results={"static": results["static"]})
    assert eviction_table(calm) == "" and "Evictions by rule" not in render_html(calm)


def test_a_consolidation_empties_the_node_a_pinned_two_gpu_pod_may_run_on() -> None:
    # Both nodes modelled as one catalogue model, but c's gpu_spec names n2's node-list model only: the planner
    # must see the pin on the pending request, not only on running pods. Spreading puts a on n1 and b on n2. At
    # 3600 s reactive empties n2 (not n1, which c may not use): b fits n1's free GPU at once; n2 stays cordoned
    # 60 s and takes c. Blind to the pin, it would empty n1 first and c would wait another hour.
    nodes = [TraceNode("n1", 2, "V100M16"), TraceNode("n2", 2, "V100M32")]
    pods = [pod("a", 0, 20_000, 1.0), pod("b", 1, 20_000, 1.0), pod("c", 10, 3000, 1.0, 2, models="V100M32")]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = BacktestConfig(
        scheduler="spread", eviction_cost_s=0.0, drain_s=60.0, planner=planner, gpu_model="T4-16GB"
    )
    result = replay("reactive", pods, nodes, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted) == (1, 1)
    assert result.wait_mean_s == pytest.approx((0 + 0 + 3650) / 3)  # c: 10 -> 3660


def test_a_consolidation_empties_the_only_node_a_pinned_fractional_pod_may_run_on() -> None:
    # First-fit puts a (any model) on n1, the only node of c's model; c needs half a GPU and waits. At 3600 s
    # reactive empties n1 for c: a fits n2 at once, n1 stays cordoned 60 s and takes c. Counting only requests
    # that need whole GPUs, c would wait for a to finish at 20,000 s.
    nodes = [TraceNode("n1", 1, "V100M32"), TraceNode("n2", 1, "V100M16")]
    pods = [pod("a", 0, 20_000, 1.0), pod("c", 10, 3000, 0.5, models="V100M32")]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = BacktestConfig(eviction_cost_s=0.0, drain_s=60.0, planner=planner, gpu_model="T4-16GB")
    result = replay("reactive", pods, nodes, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted) == (1, 1)
    assert result.wait_mean_s == pytest.approx((0 + 3650) / 2)  # c: 10 -> 3660


def test_mps_goes_off_on_the_only_node_of_a_pinned_pod_too_large_for_a_tenant() -> None:
    # n1, the only node of c's model, shares its GPU by MPS (two half-GPU tenants); a (0.4 GPU, any model) takes a
    # tenant. c needs 0.8 of an n1 GPU: no tenant hosts it. At 3600 s reactive empties n1 with MPS off: a moves to
    # n2's free GPU at once, n1 is back with a whole GPU 300 s later (a change of configuration) and takes c at
    # 3900 s. Counting only requests that need whole GPUs on an MPS node, c would wait for a to finish at 20,000 s.
    # c leaves at 6900 s; at 7200 s the shared reserve switches the empty n1 back to MPS, and a is re-homed there.
    nodes = [TraceNode("n1", 1, "V100M32"), TraceNode("n2", 1, "V100M16")]
    pods = [pod("a", 0, 20_000, 0.4), pod("c", 10, 3000, 0.8, models="V100M32")]
    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = BacktestConfig(
        eviction_cost_s=0.0, drain_s=60.0, reconfigure_s=300.0, planner=planner, gpu_model="T4-16GB"
    )
    start = [("all-disabled", CATALOG.device_plugin_config_for(2)), ("all-disabled", "default")]
    result = replay("reactive", pods, nodes, end=30_000, config=config, start_as=start)
    assert {rule: n for rule, n in result.evictions_by_rule.items() if n} == {"consolidation": 1, "rehome": 1}
    assert result.wait_mean_s == pytest.approx((0 + 3890) / 2)


def test_a_node_emptied_for_the_autoscaler_stays_empty_until_a_pod_fits_nowhere_else() -> None:
    # First-fit: a and b on n1 (2 GPUs), c on n2 (4 GPUs). b leaves at 101. At 3600 s n2 holds 1 of its 4 GPUs
    # (planner_consolidation=nodes): c fits n1's free GPU, so n2 is emptied and released; the autoscaler removes
    # it. d at 4000 s fits no node in service: the autoscaler adds n2 back 200 s later and d starts there.
    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 4, "T4")]
    pods = [
        pod("a", 0, 20_000, 1.0),
        pod("b", 1, 100, 1.0),
        pod("c", 2, 20_000, 1.0),
        pod("d", 4000, 1000, 1.0),
    ]
    # The pods here are an hour old when their node is released: no minimum age (planner_release_min_pod_age_hours);
    # a node is released at a quarter of its GPUs held (not the default half), so that n1, half held, stays in use.
    planner = PlannerConfig(
        fallback="baseline",
        eviction_cost_s=0.0,
        consolidation="nodes",
        release_min_pod_age_hours=0.0,
        release_below=0.25,
    )
    config = BacktestConfig(eviction_cost_s=0.0, drain_s=60.0, scale_up_s=200.0, planner=planner)
    result = replay("packing", pods, nodes, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted, result.nodes_added) == (1, 1, 1)
    assert result.most_evictions_of_a_pod == 1
    assert result.wait_mean_s == pytest.approx(200 / 4)  # c moves at once; d waits for n2
    # n1: 0 -> 20,002 (c's last 16,402 s from 3600); n2: c 2-3600, d 4200-5200.
    assert result.node_gpu_hours == pytest.approx((2 * 20_002 + 4 * (3598 + 1000)) / 3600)
    # Emptied for whole-GPU demand instead (the default mode), a node is not released: none here.
    default = dataclasses.replace(config, planner=dataclasses.replace(planner, consolidation="whole-gpus"))
    kept = replay("packing", pods, nodes, end=30_000, config=default)
    assert (kept.consolidations, kept.nodes_added, kept.wait_mean_s) == (0, 0, 0.0)
    # With no autoscaler at all (keep_released), the emptied n2 stays in service, idle: d starts there at once,
    # for the same node-GPU-hours (n2 holds d 4000-5000 instead of 4200-5200).
    stays = replay("packing", pods, nodes, end=30_000, config=dataclasses.replace(config, keep_released=True))
    assert (stays.consolidations, stays.pods_evicted, stays.nodes_added) == (1, 1, 0)
    assert stays.wait_mean_s == 0.0
    assert stays.node_gpu_hours == pytest.approx(result.node_gpu_hours)
    # With the shipped minimum age (6 hours) c, an hour old at 3600 s, holds n2 until it ends: nothing is moved,
    # and d starts at once on n2.
    aged = dataclasses.replace(planner, release_min_pod_age_hours=PlannerConfig().release_min_pod_age_hours)
    young = replay("packing", pods, nodes, end=30_000, config=dataclasses.replace(config, planner=aged))
    assert (young.consolidations, young.pods_evicted, young.wait_mean_s) == (0, 0, 0.0)
    assert young.most_evictions_of_a_pod == 0


def test_the_meter_counts_evictions_per_pod_and_rule() -> None:
    # Pod 7 moved three times (twice re-homed, once by the autoscaler) and pod 2 once: four evictions, at most
    # three of one pod, and that pod's rules.
    from slicewise.whatif.metrics import Meter

    meter = Meter(0.0, 2)
    for pod_id, rule in ((7, "rehome"), (2, "consolidation"), (7, "autoscaler"), (7, "rehome")):
        meter.evicted(pod_id, rule)
    assert (meter.evictions, max(meter.evictions_by_pod.values())) == (4, 3)
    assert meter.evictions_by_rule() == {
        "reconfiguration": 0,
        "consolidation": 1,
        "rehome": 2,
        "autoscaler": 1,
    }
    assert meter.most_evicted_pod_by_rule() == {"rehome": 2, "autoscaler": 1}
    assert Meter(0.0, 1).most_evicted_pod_by_rule() == {}
    with pytest.raises(ValueError, match="unknown eviction rule 'drain'"):
        meter.evicted(2, "drain")


def test_the_autoscaler_adds_every_released_node_the_waiting_pods_need_at_once() -> None:
    # First-fit: a, b, f, g fill n1; c and the 3-GPU m fill n2; e goes to n3. f, g and m leave by 100 s. n2 and
    # n3 then each hold 1 of their 4 GPUs (planner_consolidation=nodes) and c and e fit n1's two free GPUs: n2 is
    # emptied and released at 3600 s, n3 at 7200 s (the change budget allows one node per run). Five one-GPU pods
    # arrive at 9000 s and fit no node in service: like cluster-autoscaler's binpacking estimator, the
    # autoscaler adds n2 (for four of them) and n3 (the fifth) in one scale-up, and all five start 200 s later.
    # One node per kind of request at a time would have made the fifth wait for a second scale-up: 400 s.
    nodes = [TraceNode("n1", 4, "T4"), TraceNode("n2", 4, "T4"), TraceNode("n3", 4, "T4")]
    pods = [
        pod("a", 0, 20_000, 1.0),
        pod("b", 1, 20_000, 1.0),
        pod("f", 2, 98, 1.0),
        pod("g", 3, 97, 1.0),
        pod("c", 4, 20_000, 1.0),
        pod("m", 5, 95, 1.0, gpus=3),
        pod("e", 6, 20_000, 1.0),
        *(pod(f"d{i}", 9000, 1000, 1.0) for i in range(5)),
    ]
    # The pods here are an hour old when their node is released: no minimum age (planner_release_min_pod_age_hours);
    # a node is released at a quarter of its GPUs held (not the default half), so that n1, half held, stays in use.
    planner = PlannerConfig(
        fallback="baseline",
        eviction_cost_s=0.0,
        consolidation="nodes",
        release_min_pod_age_hours=0.0,
        release_below=0.25,
    )
    config = BacktestConfig(eviction_cost_s=0.0, drain_s=60.0, scale_up_s=200.0, planner=planner)
    result = replay("packing", pods, nodes, end=30_000, config=config)
    assert (result.consolidations, result.pods_evicted, result.nodes_added) == (2, 2, 2)
    assert result.wait_mean_s == pytest.approx(5 * 200 / len(pods))


def test_released_nodes_take_no_pods_and_the_smallest_fitting_one_is_added_back() -> None:
    nodes = [
        SimNode(name, gpus, CATALOG.model("A100-80GB"), CATALOG, "all-disabled", "default")
        for name, gpus in (("n1", 8), ("n2", 2), ("n3", 4))
    ]
    fleet = ReplayFleet(nodes)
    fleet.release(nodes[0])
    fleet.release(nodes[1])
    found = fleet.find(Ask(1, 1.0))
    assert found is not None and found[0].name == "n3"  # n1 is first by name, but gone
    assert fleet.could_fit(Ask(4, 1.0)) and fleet.find(Ask(8, 1.0)) is None
    assert fleet.to_add(Ask(1, 1.0)) == 1  # n2: the smallest released node that hosts it
    assert fleet.to_add(Ask(1, 1.0), exclude={1}) == 0
    assert fleet.to_add(Ask(4, 1.0)) == 0
    fleet.restore(nodes[1])
    assert fleet.releasable_gpus == 14 and fleet.free[1.0] == 6
    with pytest.raises(RuntimeError, match="not released"):
        fleet.restore(nodes[1])


def test_pods_that_may_not_be_evicted_block_the_change_or_hold_the_node_until_they_end() -> None:
    # One A100 of whole GPUs; a (0.2 GPU) runs 0-7200 s, b, c, d (0.2 GPU, 3000 s each) arrive at 10 s. Every pod
    # latency-sensitive (qos LS), only best-effort pods evictable: the split into MPS tenants that reactive wants
    # at 3600 s would evict a, so it is blocked, and the pods take the whole GPU in turn: b 7200, c 10,200,
    # d 13,200 (at 10,800 s c runs there and blocks the change again).
    pods = [pod("a", 0, 7200, 0.2), *(pod(name, 10, 3000, 0.2) for name in "bcd")]
    one = [TraceNode("n1", 1, "A100")]
    start = [("all-disabled", "default")]
    base = BacktestConfig(
        gpu_model="A100-80GB", reconfigure_s=100.0, eviction_cost_s=0.0, evictable="best-effort"
    )
    blocked = replay("reactive", pods, one, end=30_000, config=base, start_as=start)
    assert (blocked.pods_evicted, blocked.reconfigs_per_node_hour, blocked.holds) == (0, 0.0, 0)
    assert blocked.wait_mean_s == pytest.approx((0 + 7190 + 10_190 + 13_190) / 4)
    # Holding the node instead (cordon_to_drain): held at 3600 and 7200 s while a runs, no pod lands when a ends;
    # the plan at 10,800 s finds it empty and splits it, and back at 10,900 s b, c and d start together.
    holding = dataclasses.replace(base, planner=dataclasses.replace(base.planner, cordon_to_drain=True))
    held = replay("reactive", pods, one, end=30_000, config=holding, start_as=start)
    assert (held.pods_evicted, held.holds) == (0, 1)
    assert held.reconfigs_per_node_hour > 0
    assert held.wait_mean_s == pytest.approx((0 + 3 * 10_890) / 4)
    # a best-effort: the split evicts it at 3600 s, and all four start on tenants at 3700 s.
    best_effort = [dataclasses.replace(pods[0], qos="BE"), *pods[1:]]
    moved = replay("reactive", best_effort, one, end=30_000, config=base, start_as=start)
    assert moved.pods_evicted == 1 and moved.wait_mean_s == pytest.approx((100 + 3 * 3690) / 4)
    # With evictable "annotated" the qos does not count, the pod's own annotation does (a cluster's history):
    # blocked as above while only the best-effort a is annotated, moved as above once a carries it.
    annotated = dataclasses.replace(base, evictable="annotated")
    unmarked = replay("reactive", best_effort, one, end=30_000, config=annotated, start_as=start)
    assert (unmarked.pods_evicted, unmarked.wait_mean_s) == (0, blocked.wait_mean_s)
    marked = [dataclasses.replace(pods[0], opted_in=True), *pods[1:]]
    opted = replay("reactive", marked, one, end=30_000, config=annotated, start_as=start)
    assert (opted.pods_evicted, opted.wait_mean_s) == (1, moved.wait_mean_s)


def test_a_held_node_whose_change_no_longer_pays_is_released_and_takes_pods_again() -> None:
    # As above with only b and c: held at 3600 and 7200 s while a runs; at 10,800 s the empty node's split would
    # host 0.4 GPU where the whole GPU hosts 0.2, a gain under the 0.25 GPU-h/h hysteresis, so the hold is lifted
    # (uncordon): b starts at once, c when b ends (13,800 s).
    pods = [pod("a", 0, 7200, 0.2), pod("b", 10, 3000, 0.2), pod("c", 10, 3000, 0.2)]
    planner = PlannerConfig(fallback="baseline", cordon_to_drain=True)
    config = BacktestConfig(
        gpu_model="A100-80GB",
        reconfigure_s=100.0,
        eviction_cost_s=0.0,
        evictable="best-effort",
        planner=planner,
    )
    result = replay(
        "reactive", pods, [TraceNode("n1", 1, "A100")], 30_000, config, [("all-disabled", "default")]
    )
    assert (result.holds, result.pods_evicted, result.reconfigs_per_node_hour) == (1, 0, 0.0)
    assert result.wait_mean_s == pytest.approx((0 + 10_790 + 13_790) / 3)


def test_an_unknown_evictable_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="evictable must be one of all, best-effort, annotated"):
        BacktestConfig(evictable="latency-sensitive")
