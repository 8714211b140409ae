"""The backtest's scheduler model on tiny hand-made traces, every expected figure computed by hand.

Nodes have one GPU, modelled as an A100-80GB, unless said otherwise; a reconfiguration takes 100 s and an
eviction costs no run time; the window is fixed at 0-20,000 s so no figure depends on where the trace ends.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from slicewise.catalog import load_catalog
from slicewise.planning.config import PlannerConfig
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.fleet import Ask, ReplayFleet, SimNode
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.trace import TraceNode, TracePod

CATALOG = load_catalog()
MODEL = CATALOG.model("A100-80GB")
CONFIG = BacktestConfig(
    gpu_model="A100-80GB", reconfigure_s=100.0, eviction_cost_s=0.0, price_per_gpu_hour=2.0
)
END = 20_000.0
ONE_GPU = [TraceNode("n1", 1, "T4")]


def pod(name: str, arrival: float, duration: float, share: float, gpus: int = 1) -> TracePod:
    return TracePod(name, arrival, duration, gpus, share, "LS")


def replay(policy: str, pods: list[TracePod], start_as: tuple[str, str] | None = None) -> PolicyResult:
    initial = [start_as] if start_as else None
    return Replay(POLICIES[policy], tuple(pods), ONE_GPU, CATALOG, CONFIG, (0.0, END), initial).run()


# a runs 2 h; b and c arrive 10 s later and run 5000 s; each asks for 0.2 of a GPU.
SMALL = [pod("a", 0, 7200, 0.2), pod("b", 10, 5000, 0.2), pod("c", 10, 5000, 0.2)]


def test_without_sharing_pods_queue_for_the_whole_gpu() -> None:
    result = replay("static", SMALL)
    # a: 0-7200; b: 7200-12200 (waited 7190 s); c: 12200-17200 (waited 12190 s).
    assert result.wait_mean_s == pytest.approx((0 + 7190 + 12190) / 3)
    assert result.gpu_utilisation == pytest.approx(0.2)  # one 0.2 pod on the one busy GPU at any time
    assert result.node_gpu_hours == pytest.approx(17_200 / 3600)
    assert result.cost == pytest.approx(2.0 * 17_200 / 3600)
    assert (result.pods_evicted, result.still_waiting, result.reconfigs_per_node_hour) == (0, 0, 0.0)


def test_the_queue_drains_after_an_mps_split_that_evicts_the_running_pod() -> None:
    result = replay("reactive", SMALL, start_as=("all-disabled", "default"))
    # At 3600 s the planner sees a on the GPU (load 0.2) and b, c waiting: 3 tenants fit under the 70 % target,
    # so mps-3 (gain 2 hosted x 0.2 = 0.4 GPU-h/h). a is evicted after 3600 s of its 7200; the node is back
    # at 3700 s with three 1/3 slots: a waited 100 s, b and c 3690 s. a runs its last 3600 s to 7300, b and c
    # run to 8700. Later hours keep mps-3 (shrinking without overload gains nothing).
    assert result.pods_evicted == 1
    assert result.most_evicted_pod_by_rule == {"reconfiguration": 1}
    assert result.reconfigs_per_node_hour == pytest.approx(1 / (END / 3600))
    assert result.wait_mean_s == pytest.approx((100 + 3690 + 3690) / 3)
    work = 0.2 * 7200 + 2 * 0.2 * 5000
    busy = 3600 + 5000  # 0-3600 and 3700-8700
    assert result.gpu_utilisation == pytest.approx(work / busy)
    assert result.node_gpu_hours == pytest.approx(busy / 3600)


def test_the_queue_drains_after_a_mig_change_without_evicting_anyone() -> None:
    # Two 0.4-GPU pods need 3g slices; the node has seven 1g slices: both wait. At 3600 s the planner packs
    # 2 x 3g (hosts 6/7 of a GPU, strands 1/7): the node is back at 3700 s and both start.
    pods = [pod("p", 0, 3000, 0.4), pod("q", 0, 3000, 0.4)]
    result = replay("reactive", pods, start_as=("all-1g.10gb", "default"))
    assert result.wait_mean_s == pytest.approx(3700)
    assert result.pods_evicted == 0
    assert result.reconfigs_per_node_hour == pytest.approx(1 / (END / 3600))
    assert result.gpu_utilisation == pytest.approx(0.8)  # 0.4 + 0.4 on the one GPU
    # Without the planner they never start: after the window the replay waits for them until the drain cap.
    fixed = replay("static-mig", pods, start_as=("all-1g.10gb", "default"))
    assert fixed.still_waiting == 2 and fixed.wait_mean_s == pytest.approx(END + CONFIG.drain_cap_s)


def test_fragmentation_is_the_free_capacity_a_request_of_the_workload_cannot_use() -> None:
    mig = SimNode("n1", 1, MODEL, CATALOG, "all-balanced", "default")  # free: 3g, 2g, 1g, 1g = 7/7
    whole = SimNode("n2", 2, MODEL, CATALOG, "all-disabled", "default")
    fleet = ReplayFleet([mig, whole])
    slots = whole.fit(1, 1.0)
    assert slots is not None
    fleet.take(whole, 0, slots, 1.0)  # one of n2's two GPUs taken: free capacity 1 + 1 = 2 GPUs
    # A 0.4 request cannot use the 2g and the two 1g slices: 4/7 of the 2 free GPUs.
    assert fleet.fragmentation(Counter({(1, 0.4): 1})) == pytest.approx((4 / 7) / 2)
    # A whole-GPU request can use only n2's free GPU; a 2-GPU one nothing (no node has two free).
    assert fleet.fragmentation(Counter({(1, 1.0): 1})) == pytest.approx(1 / 2)
    assert fleet.fragmentation(Counter({(2, 1.0): 1})) == pytest.approx(1.0)
    # In expectation over the workload's requests.
    both = Counter({(1, 0.4): 1, (2, 1.0): 1})
    assert fleet.fragmentation(both) == pytest.approx((4 / 7 + 2) / 2 / 2)
    assert fleet.fragmentation(Counter()) is None


def test_first_fit_takes_the_smallest_free_slot_that_holds_the_request() -> None:
    node = SimNode("n1", 1, MODEL, CATALOG, "all-balanced", "default")
    shares = {i: round(s.share * 7) for i, s in enumerate(node.slots)}
    (slot,) = node.fit(1, 0.2) or []
    assert shares[slot] == 2  # 0.2 of a GPU: the 2g slice, not the 3g
    (slot,) = node.fit(1, 0.1) or []
    assert shares[slot] == 1
    assert node.fit(1, 0.5) is None  # nothing of 4g or more
    assert node.fit(1, 1.0) is None  # whole GPUs only from 7g slices or MIG-disabled GPUs


def test_a_fractional_queue_drains_once_the_node_leaves_mig_for_mps() -> None:
    # Two 0.46-GPU pods on one GPU split into seven 1g slices: neither fits. At 3600 s reactive weighs every
    # configuration: no MIG layout hosts both (only one 4g fits a GPU; 7g hosts one), MIG off with two MPS
    # tenants of 1/2 hosts both (0.92 GPU-eq, 0.08 stranded) and beats the change penalty. Back at 3700 s.
    pods = [pod("p", 0, 3000, 0.46), pod("q", 0, 3000, 0.46)]
    result = replay("reactive", pods, start_as=("all-1g.10gb", "default"))
    assert result.wait_mean_s == pytest.approx(3700)
    assert result.reconfigs_per_node_hour == pytest.approx(1 / (END / 3600))
    assert result.pods_evicted == 0


def test_a_split_node_hosts_a_whole_gpu_pod_and_small_pods_at_once() -> None:
    h100 = CATALOG.model("H100-80GB")
    node = SimNode("n1", 8, h100, CATALOG, "sw-4of8-1gx7", "default")
    assert node.free_whole() == 4  # GPUs 4-7
    assert sorted(Counter(s.gpu for s in node.slots if s.share < 1).values()) == [7] * 4  # 7 x 1g on 0-3
    whole = node.fit(4, 1.0)
    assert whole is not None and {node.slots[i].gpu for i in whole} == {4, 5, 6, 7}
    node.place(1, whole, 4.0)
    small = node.fit(1, 0.1)
    assert small is not None and node.slots[small[0]].share == pytest.approx(1 / 7)
    assert node.fit(1, 1.0) is None  # no whole GPU left: the MIG half hosts only slices


def test_a_fractional_pod_prefers_an_mps_tenant_to_a_whole_gpu_on_a_node_it_would_take_first() -> None:
    mps2 = CATALOG.device_plugin_config_for(2)

    def fleet(prefer_shared: bool) -> ReplayFleet:
        whole = SimNode("n1", 2, MODEL, CATALOG, "all-disabled", "default")
        shared = SimNode("n2", 2, MODEL, CATALOG, "all-disabled", mps2)
        return ReplayFleet([whole, shared], prefer_shared=prefer_shared)

    found = fleet(False).find(Ask(1, 0.4))
    assert found is not None and found[0].name == "n1"  # first-fit: the whole GPU of the first node
    found = fleet(True).find(Ask(1, 0.4))
    assert found is not None and found[0].name == "n2" and found[0].slots[found[1][0]].share == 0.5
    # No tenant of n2 holds 0.6 of a GPU, and whole-GPU pods never prefer: the scheduler's own order.
    for ask in (Ask(1, 0.6), Ask(1, 1.0)):
        found = fleet(True).find(ask)
        assert found is not None and found[0].name == "n1"
    # A node that becomes MPS is preferred from then on.
    preferring = ReplayFleet(
        [SimNode(f"n{i}", 2, MODEL, CATALOG, "all-disabled", "default") for i in (1, 2)], "first-fit", True
    )
    second = preferring.nodes[1]
    preferring.unavailable(second)
    preferring.back(second, "all-disabled", mps2)
    found = preferring.find(Ask(1, 0.4))
    assert found is not None and found[0].name == "n2"


@pytest.mark.parametrize("scheduler", ["first-fit", "spread", "binpack"])
def test_a_standby_node_is_opened_only_when_no_other_node_fits(scheduler: str) -> None:
    # n1 (8 whole GPUs) and n3 (4 GPUs of 2 MPS tenants) are empty and carry the standby taint; n2 (2 GPUs)
    # holds one pod. Every scheduler model puts a 1-GPU pod and a fractional one on n2's free GPU; a 4-GPU pod,
    # which n2 cannot host, still goes to n1, and once n2 is full the fractional pod takes a tenant of n3.
    mps2 = CATALOG.device_plugin_config_for(2)
    fleet = ReplayFleet(
        [
            SimNode("n1", 8, MODEL, CATALOG, "all-disabled", "default"),
            SimNode("n2", 2, MODEL, CATALOG, "all-disabled", "default"),
            SimNode("n3", 4, MODEL, CATALOG, "all-disabled", mps2),
        ],
        scheduler,
        prefer_shared=True,
    )
    n2 = fleet.nodes[1]
    fleet.take(n2, 1, n2.fit(1, 1.0) or [], 1.0)
    untainted = fleet.find(Ask(1, 1.0))
    assert untainted is not None and untainted[0].name == ("n2" if scheduler == "binpack" else "n1")
    fleet.taints[[0, 2]] = 1
    # The taint outweighs the fractional pod's preference for MPS tenants (TaintToleration 3 > NodeAffinity 2).
    for ask in (Ask(1, 1.0), Ask(1, 0.4)):
        found = fleet.find(ask)
        assert found is not None and found[0].name == "n2"
    found = fleet.find(Ask(4, 1.0))
    assert found is not None and found[0].name == "n1"
    fleet.take(n2, 2, n2.fit(1, 1.0) or [], 1.0)
    found = fleet.find(Ask(1, 0.4))
    assert found is not None and found[0].name == "n3"


@pytest.mark.parametrize("scheduler", ["first-fit", "spread", "binpack"])
def test_a_node_with_two_standby_taints_is_opened_after_one_with_one(scheduler: str) -> None:
    # n1 (8 GPUs, two taints) and n2 (2 GPUs, one taint) are empty; n3 (4 GPUs, none) holds three 1-GPU pods.
    # A 1-GPU pod goes to n3's free GPU; the next to n2, however the model scores (first-fit and spreading would
    # take n1); a 4-GPU pod, which only n1 can host, to n1.
    fleet = ReplayFleet(
        [
            SimNode(name, gpus, MODEL, CATALOG, "all-disabled", "default")
            for name, gpus in (("n1", 8), ("n2", 2), ("n3", 4))
        ],
        scheduler,
    )
    fleet.taints[:] = (2, 1, 0)
    n3 = fleet.nodes[2]
    for pod in range(3):
        fleet.take(n3, pod, n3.fit(1, 1.0) or [], 1.0)
    placed = []
    for pod, gpus in ((3, 1), (4, 1), (5, 4)):
        found = fleet.find(Ask(gpus, 1.0))
        assert found is not None
        placed.append(found[0].name)
        fleet.take(found[0], pod, found[1], 1.0)
    assert placed == ["n3", "n2", "n1"]


@pytest.mark.parametrize(("most", "chosen"), [(5, "b"), (2, "a"), (None, "a")])
def test_standby_grades_add_up_with_the_fit_score_as_kube_scheduler_weighs_them(
    most: int | None, chosen: str
) -> None:
    # Bin-packing. a (8 GPUs) holds one 1-GPU pod; b (1 GPU, one taint) is empty; c (8 GPUs) carries `most` taints
    # (None: c is full, so it does not count). Scores of a 1-GPU pod, TaintToleration x 3 + NodeResourcesFit:
    # a 3 x 100 + 100 x 2/8 = 325; b 3 x (100 - 100 x 1 // most) + 100 x 1/1, so 340 when c has 5 taints, 250
    # with 2, and 100 with c full (the most taints among the nodes that fit is b's own 1); c 0 + 12.5.
    fleet = ReplayFleet(
        [
            SimNode(name, gpus, MODEL, CATALOG, "all-disabled", "default")
            for name, gpus in (("a", 8), ("b", 1), ("c", 8))
        ],
        "binpack",
    )
    a, c = fleet.nodes[0], fleet.nodes[2]
    fleet.take(a, 0, a.fit(1, 1.0) or [], 1.0)
    if most is None:
        fleet.take(c, 1, c.fit(8, 1.0) or [], 8.0)
    fleet.taints[:] = (0, 1, most or 5)
    found = fleet.find(Ask(1, 1.0))
    assert found is not None and found[0].name == chosen


@pytest.mark.parametrize(("x_taints", "chosen"), [(2, "m"), (1, "w")])
def test_a_fractional_pod_s_preference_for_mps_can_outweigh_one_grade_of_standby(
    x_taints: int, chosen: str
) -> None:
    # Spreading, pods that prefer MPS nodes. w (4 whole GPUs) holds a 1-GPU pod, m (1 GPU of 2 MPS tenants) has
    # one standby taint, x (8 whole GPUs, empty) `x_taints`. A 0.4 pod scores, TaintToleration x 3 + NodeAffinity
    # x 2 + NodeResourcesFit (LeastAllocated): w 300 + 0 + 100 x (1 - 1.4/4) = 365; m with x at two taints
    # 3 x 50 + 2 x 100 + 100 x (1 - 0.4) = 410, with x at one 0 + 200 + 60 = 260; x 0 + 0 + 95.
    mps2 = CATALOG.device_plugin_config_for(2)
    fleet = ReplayFleet(
        [
            SimNode("m", 1, MODEL, CATALOG, "all-disabled", mps2),
            SimNode("w", 4, MODEL, CATALOG, "all-disabled", "default"),
            SimNode("x", 8, MODEL, CATALOG, "all-disabled", "default"),
        ],
        "spread",
        prefer_shared=True,
    )
    w = fleet.nodes[1]
    fleet.take(w, 0, w.fit(1, 1.0) or [], 1.0)
    fleet.taints[:] = (1, 0, x_taints)
    found = fleet.find(Ask(1, 0.4))
    assert found is not None and found[0].name == chosen


@pytest.mark.parametrize(
    ("standby", "node_gpu_hours"), [(False, (800 + 8 * 3600) / 3600), (True, 800 / 3600 + 2)]
)
def test_the_planner_s_standby_list_sends_the_next_pod_to_the_small_node(
    standby: bool, node_gpu_hours: float
) -> None:
    # big (8 GPUs) comes first in name order, small has 2. a runs 0-100 s on big (no plan yet). The plan at
    # 3600 s finds both empty and lists big as standby; b (1 GPU, 4000-7600 s) then starts small, not big.
    # Node-GPU-hours: a holds big's 8 GPUs for 100 s; b holds 2 (standby) or 8 GPUs for an hour.
    nodes = [TraceNode("big", 8, "T4"), TraceNode("small", 2, "T4")]
    config = BacktestConfig(
        gpu_model="A100-80GB",
        reconfigure_s=100.0,
        eviction_cost_s=0.0,
        price_per_gpu_hour=2.0,
        planner=dataclasses.replace(PlannerConfig(), standby=standby),
    )
    pods = (pod("a", 0, 100, 1.0), pod("b", 4000, 3600, 1.0))
    result = Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, END)).run()
    assert result.wait_mean_s == 0
    assert result.node_gpu_hours == pytest.approx(node_gpu_hours)


def test_the_standby_comparison_replays_packing_the_other_way_round_and_names_the_trade() -> None:
    # The trace of the test above with standby on (the setting) and packing once more with it off
    # (slicewise backtest --compare-standby, the what-if review): the same two figures, side by side.
    from slicewise.whatif.policies import with_standby_flipped
    from slicewise.whatif.report import standby_choice
    from slicewise.whatif.run import Backtest, run_policies
    from slicewise.whatif.trace import PodTrace

    nodes = [TraceNode("big", 8, "T4"), TraceNode("small", 2, "T4")]
    config = BacktestConfig(
        gpu_model="A100-80GB", reconfigure_s=100.0, eviction_cost_s=0.0, price_per_gpu_hour=2.0
    )
    policies = with_standby_flipped([POLICIES["static"], POLICIES["packing"]], True, "whole-gpus")
    assert [p.name for p in policies] == ["static", "packing", "packing, standby off"]
    assert with_standby_flipped([POLICIES["static"]], True, "whole-gpus") == [POLICIES["static"]]
    trace = PodTrace((pod("a", 0, 100, 1.0), pod("b", 4000, 3600, 1.0)), ())
    results = run_policies(policies, trace, nodes, config, (0.0, END), workers=1)
    assert results["packing"].node_gpu_hours == pytest.approx(800 / 3600 + 2)
    assert results["packing, standby off"].node_gpu_hours == pytest.approx((800 + 8 * 3600) / 3600)
    backtest = Backtest("pods", "nodes", trace, nodes, config, (0.0, END), results, 0.0)
    # 2.22 -> 8.22 node-GPU-hours: +270.0 %; neither waits.
    assert standby_choice(backtest) == [
        "packing with standby on (the setting): 0 s mean wait, 2 node-GPU-hours; standby off: 0 s (n/a), "
        "8 node-GPU-hours (+270.0%)"
    ]
    stuck = dataclasses.replace(results["packing, standby off"], still_waiting=1)
    [line] = standby_choice(dataclasses.replace(backtest, results={**results, "packing, standby off": stuck}))
    assert line.endswith(
        "8 node-GPU-hours, not comparable: pods never served 0 with the setting, 1 the other way round"
    )
    without = dict(results)
    del without["packing, standby off"]
    assert standby_choice(dataclasses.replace(backtest, results=without)) == []


def test_the_whole_gpu_demand_comparison_replays_packing_with_the_other_rule() -> None:
    from slicewise.whatif.policies import with_standby_flipped, with_whole_demand_flipped
    from slicewise.whatif.report import whole_demand_choice
    from slicewise.whatif.run import Backtest, run_policies
    from slicewise.whatif.trace import PodTrace

    nodes = [TraceNode("big", 8, "T4"), TraceNode("small", 2, "T4")]
    config = BacktestConfig(gpu_model="A100-80GB", reconfigure_s=100.0, eviction_cost_s=0.0)
    base = [POLICIES["static"], POLICIES["packing"], POLICIES["ideal"]]
    both = with_whole_demand_flipped(with_standby_flipped(base, True, "whole-gpus"), "median", "whole-gpus")
    assert [p.name for p in both] == [
        "static",
        "packing",
        "packing, whole GPUs for pending-now",
        "packing, standby off",
        "ideal",
    ]
    flipped = both[2]
    # The replay plans with the other rule; every other row keeps the backtest's.
    assert Replay(flipped, (), nodes, CATALOG, config, (0.0, END)).planner.whole_gpu_demand == "pending-now"
    assert Replay(both[1], (), nodes, CATALOG, config, (0.0, END)).planner.whole_gpu_demand == "median"
    trace = PodTrace((pod("a", 0, 100, 1.0), pod("b", 4000, 3600, 1.0)), ())
    results = run_policies(both[:3], trace, nodes, config, (0.0, END), workers=1)
    backtest = Backtest("pods", "nodes", trace, nodes, config, (0.0, END), results, 0.0)
    [line] = whole_demand_choice(backtest)
    assert line.startswith(
        "packing with whole GPUs for median (the setting): 0 s mean wait, 2 node-GPU-hours; "
    )
    assert "; whole GPUs for pending-now: 0 s (n/a), 2 node-GPU-hours (+0.0%)" in line
    assert whole_demand_choice(dataclasses.replace(backtest, results={"packing": results["packing"]})) == []


def test_the_autoscalers_gpu_utilisation_counts_nvidia_com_gpu_units_only() -> None:
    # cluster-autoscaler divides the pods' nvidia.com/gpu requests by the node's allocatable nvidia.com/gpu.
    mps = SimNode("n1", 2, MODEL, CATALOG, "all-disabled", CATALOG.device_plugin_config_for(2))  # 4 tenants
    mps.place(0, mps.fit(1, 0.3) or [], 0.3)
    assert mps.gpu_utilisation() == 0.25  # one tenant of four, whatever the pod's share
    h100 = CATALOG.model("H100-80GB")
    split = SimNode("n2", 8, h100, CATALOG, "sw-4of8-1gx7", "default")  # 4 whole GPUs, 28 MIG instances
    split.place(1, split.fit(1, 0.1) or [], 0.1)  # a 1g instance: no nvidia.com/gpu
    assert split.gpu_utilisation() == 0.0
    split.place(2, split.fit(2, 1.0) or [], 2.0)
    assert split.gpu_utilisation() == 0.5  # 2 of the 4 whole GPUs
    # Every GPU under MIG: no nvidia.com/gpu at all, an "unready GPU" that reads 0 however full it is.
    mig = SimNode("n3", 1, MODEL, CATALOG, "all-balanced", "default")
    for pod in range(4):
        mig.place(pod, mig.fit(1, 0.1) or [], 0.1)
    assert mig.gpu_utilisation() == 0.0
