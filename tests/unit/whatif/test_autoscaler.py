"""The replay's cluster autoscaler for every node (``BacktestConfig.scale_down_unneeded_s``): which nodes it
removes, when, what it costs the pods and what the cluster pays; every figure computed by hand."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig, Replay
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.policies import POLICIES
from slicewise.whatif.trace import FRACTIONAL, TraceNode, TracePod

CATALOG = load_catalog()
AUTOSCALED = BacktestConfig(eviction_cost_s=0.0, scale_up_s=200.0, scale_down_unneeded_s=600.0)


def pod(name: str, arrival: float, duration: float, gpus: int = 1) -> TracePod:
    return TracePod(name, arrival, duration, gpus, 1.0, "LS", ())


def replay(pods: list[TracePod], nodes: list[TraceNode], end: float, config: BacktestConfig) -> PolicyResult:
    return Replay(POLICIES["static"], tuple(pods), nodes, CATALOG, config, (0.0, end)).run()


def test_an_empty_node_is_removed_after_the_unneeded_time_and_added_back_when_a_pod_fits_nowhere() -> None:
    # n2 is empty from the start: removed at 600 s. a leaves n1 at 100: n1 is removed at 700. b arrives at
    # 1000 and fits no node in service: the autoscaler adds n1 (the first of the two, equal in size) back,
    # billed from 1000, and b starts at 1200; n1 is empty again at 1300 and removed at 1900.
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]
    pods = [pod("a", 0, 100), pod("b", 1000, 100)]
    result = replay(pods, nodes, end=2000, config=AUTOSCALED)
    assert (result.nodes_removed, result.nodes_added) == (3, 1)
    assert result.wait_mean_s == pytest.approx(200 / 2)
    assert result.service_gpu_hours == pytest.approx((700 + 900 + 600) / 3600)
    assert result.node_gpu_hours == pytest.approx(200 / 3600)  # the busy hours count no empty node
    # Without the autoscaler nothing leaves: b starts at once, and the cluster pays for both nodes throughout.
    kept = replay(pods, nodes, end=2000, config=dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=None))
    assert (kept.nodes_removed, kept.nodes_added, kept.wait_mean_s) == (0, 0, 0.0)
    assert kept.service_gpu_hours == pytest.approx(2 * 2000 / 3600)


def test_a_pod_that_lands_on_an_unneeded_node_restarts_its_clock() -> None:
    # n1 is unneeded from 0 (removal due at 600), but a lands there at 100 and leaves at 200: removed at 800.
    result = replay([pod("a", 100, 100)], [TraceNode("n1", 1, "T4")], end=1000, config=AUTOSCALED)
    assert (result.nodes_removed, result.wait_mean_s) == (1, 0.0)
    assert result.service_gpu_hours == pytest.approx(800 / 3600)


def test_the_scheduler_avoids_a_node_the_autoscaler_marked_while_another_has_room() -> None:
    # a leaves n1 at 50 and the autoscaler soft-taints it (DeletionCandidateOfClusterAutoscaler). First-fit would
    # put b, at 100, on n1 (first by name); with the taint it goes to n2, where c runs and a GPU is free. n1 is
    # removed at 650, n2 at 5601 (c leaves at 5001).
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 2, "T4")]
    pods = [pod("a", 0, 50), pod("c", 1, 5000), pod("b", 100, 1000)]
    result = replay(pods, nodes, end=6000, config=AUTOSCALED)
    assert result.nodes_removed == 2
    assert result.node_gpu_hours == pytest.approx((50 + 2 * 5000) / 3600)  # n1 0-50, n2 1-5001
    untainted = replay(
        pods, nodes, end=6000, config=dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=None)
    )
    assert untainted.node_gpu_hours == pytest.approx((50 + 1000 + 2 * 5000) / 3600)  # b on n1 100-1100


def test_a_node_the_planner_reconfigures_while_unneeded_restarts_its_clock_when_it_returns() -> None:
    # p on n1 all along; n2 is empty from 0 (removal due at 4000 s), but at 3600 s the shared reserve switches it
    # to MPS for the fractional pod's kind (gone 300 s): it returns empty at 3900 and is removed at 7900, not 4000.
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=4000.0, planner=planner)
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]
    pods = (TracePod("p", 0, 20_000, 1, 0.25, "LS", ()),)
    result = Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 10_000.0)).run()
    assert result.reconfigs_per_node_hour * 2 * 20_000 / 3600 == pytest.approx(1)  # n2, once
    assert result.nodes_removed == 1
    assert result.service_gpu_hours == pytest.approx((20_000 + 7900) / 3600)


def test_a_node_a_consolidation_emptied_stays_in_service_for_the_unneeded_time() -> None:
    # As test_fleet_fidelity's released-node case: at 3600 s n2 holds 1 of its 4 GPUs (c), c moves to n1's free
    # GPU and n2 is back, empty, at 3660. With an autoscaler for every node it is one more idle node, removed at
    # 4260 unless needed: d, at 4000, fits no other node and starts there at once (without the model, the
    # consolidation released n2 at once and d waited 200 s for it). n2 goes at 5600, n1 at 20,602. The autoscaler
    # here removes empty nodes only: with its utilisation threshold it drains n2 itself first (the next test).
    from slicewise.planning.config import PlannerConfig

    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 4, "T4")]
    pods = (pod("a", 0, 20_000), pod("b", 1, 100), pod("c", 2, 20_000), pod("d", 4000, 1000))
    # The pods here are an hour old when their node is released: no minimum age (planner_release_min_pod_age_hours);
    # a node is released at a quarter of its GPUs held (not the default half), so that n1, half held, stays in use.
    planner = PlannerConfig(
        fallback="baseline",
        eviction_cost_s=0.0,
        consolidation="nodes",
        release_min_pod_age_hours=0.0,
        release_below=0.25,
    )
    config = dataclasses.replace(
        AUTOSCALED, drain_s=60.0, planner=planner, scale_down_utilization_threshold=0.0
    )
    result = Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0)).run()
    assert (result.consolidations, result.pods_evicted, result.nodes_added, result.nodes_removed) == (
        1,
        1,
        0,
        2,
    )
    assert result.wait_mean_s == 0.0
    assert result.service_gpu_hours == pytest.approx((2 * 20_602 + 4 * 5600) / 3600)


@pytest.mark.parametrize(("delay_s", "n2_until_s"), [(600.0, 1300.0), (0.0, 800.5)])
def test_no_node_is_removed_within_the_delay_after_a_scale_up(delay_s: float, n2_until_s: float) -> None:
    # n3 (2 GPUs) is empty from 0 and removed at 600. q leaves n2 at 200.5: unneeded until 800.5. r, two GPUs, at
    # 700 fits no node in service: the autoscaler adds n3 back (r starts at 1000, ends at 1100) and removes
    # nothing until 1300 (--scale-down-delay-after-add), so n2 goes then instead of at 800.5. n3 goes at 1700,
    # n1 600 s after p ends at 5000.
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4"), TraceNode("n3", 2, "T4")]
    pods = [pod("p", 0, 5000), pod("q", 0.5, 200), pod("r", 700, 100, gpus=2)]
    config = dataclasses.replace(AUTOSCALED, scale_up_s=300.0, scale_down_delay_after_add_s=delay_s)
    result = replay(pods, nodes, end=10_000, config=config)
    assert (result.nodes_added, result.nodes_removed, result.wait_mean_s) == (1, 4, pytest.approx(100.0))
    assert result.service_gpu_hours == pytest.approx((5600 + n2_until_s + 2 * (600 + 1000)) / 3600)


@pytest.mark.parametrize(
    ("threshold", "b_s", "evicted", "n1_until_s", "n2_until_s"),
    [
        # b leaves n1 at 101 s. n2 holds c on 1 of its 4 GPUs (0.25, under 0.5) and c fits n1's free GPU: at the
        # step at 300 s n2 is unneeded; at 900 it is drained (c evicted, restarting at once on n1) and removed.
        # n1 goes 600 s after c ends (2 + 20,000 s of run; 898 of them run on n2).
        (0.5, 100, 1, 20_602, 900),
        # With b on n1 until 1001, c fits nowhere else until then: unneeded from the step at 1200, gone at 1800.
        (0.5, 1000, 1, 20_602, 1800),
        # The threshold under n2's 0.25: only empty nodes go; n2 stays until 600 s after c ends at 20,002 s, n1
        # until 600 s after a ends.
        (0.2, 100, 0, 20_600, 20_602),
    ],
)
def test_the_autoscaler_drains_an_under_used_node_whose_pods_fit_elsewhere(
    threshold: float, b_s: float, evicted: int, n1_until_s: float, n2_until_s: float
) -> None:
    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 4, "T4")]
    pods = [pod("a", 0, 20_000), pod("b", 1, b_s), pod("c", 2, 20_000)]
    config = dataclasses.replace(AUTOSCALED, scale_down_utilization_threshold=threshold)
    result = replay(pods, nodes, end=30_000, config=config)
    assert (result.nodes_removed, result.nodes_added, result.pods_evicted) == (2, 0, evicted)
    assert result.evictions_by_rule["autoscaler"] == evicted
    assert result.wait_mean_s == 0.0  # c restarts on n1 the moment it is evicted
    assert result.service_gpu_hours == pytest.approx((2 * n1_until_s + 4 * n2_until_s) / 3600)


def test_the_autoscaler_keeps_an_under_used_node_whose_pods_fit_nowhere_else() -> None:
    # n1's one GPU is a's all along: c, alone on n2's four GPUs (0.25), has nowhere to go, so n2 stays until 600 s
    # after c ends. A node of MIG instances advertises no nvidia.com/gpu (utilisation 0 to the autoscaler) but
    # is as safe: its pods' mig-* instances exist nowhere else.
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 4, "T4")]
    result = replay([pod("a", 0, 20_000), pod("c", 2, 20_000)], nodes, end=30_000, config=AUTOSCALED)
    assert (result.nodes_removed, result.pods_evicted) == (2, 0)
    assert result.service_gpu_hours == pytest.approx((20_600 + 4 * 20_602) / 3600)


def test_a_node_the_autoscaler_adds_back_comes_in_its_groups_configuration() -> None:
    # As above, n2 is removed at 7900 s while under MPS. b, a whole GPU at 9000 s, fits no node in service (p
    # holds n1's GPU): the autoscaler adds n2 back as its node group makes it, whole GPUs like every node at the
    # start (Slicewise's MPS label went with the old Node object), and b starts 200 s later. Had n2 come back
    # under MPS, b would have waited for p to end at 20,000 s.
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    config = dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=4000.0, planner=planner)
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]
    pods = (TracePod("p", 0, 20_000, 1, 0.25, "LS", ()), pod("b", 9000, 100))
    result = Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0)).run()
    assert (result.nodes_removed, result.nodes_added) == (3, 1)  # n2 at 7900 and 13,300; n1 at 24,000
    assert result.wait_mean_s == pytest.approx(200 / 2)


@pytest.mark.parametrize(
    ("policy", "shared_group", "share", "mean_wait_s"),
    [
        ("packing", True, 0.25, (200 + 100) / 2),  # n2 comes up shared by MPS: both tenants start at 1200
        ("packing", False, 0.25, (200 + 1100) / 2),  # n2 comes up whole: f2 waits for f1 to end at 2200
        ("static", True, 0.25, (200 + 1100) / 2),  # a policy that never shares GPUs has no shared group
        # packing's cluster setup without a planner: the group all the same
        ("static-shared", True, 0.25, (200 + 100) / 2),
        ("static-shared", False, 0.25, (200 + 1100) / 2),
        ("packing", True, 0.6, (200 + 1100) / 2),  # a pod over half a GPU fits no tenant: the whole-GPU group
    ],
)
def test_the_autoscaler_adds_a_node_for_fractional_pods_from_the_group_shared_by_mps(
    policy: str, shared_group: bool, share: float, mean_wait_s: float
) -> None:
    # n2 is one GPU: f2 arrives at 1100 while it boots and goes on it if a tenant is left there, else it waits
    # for f1 to end (no other released node).
    assert _fractional_scale_up(
        policy, 1, (1000, 1100), share, shared_node_group=shared_group
    ) == pytest.approx(mean_wait_s)


@pytest.mark.parametrize(
    ("max_gpus", "mean_wait_s"),
    [
        (None, (200 + 100 + 50) / 3),  # every machine type has a group: n2 comes up with 4 tenants
        (2, (200 + 100 + 50) / 3),  # n2's 2 GPUs are within the cap: the same
        (1, (200 + 100 + 1050) / 3),  # n2 is larger: it comes up whole, and f3 waits for f1 to end
    ],
)
def test_only_the_machines_within_the_cap_come_up_shared_by_mps(
    max_gpus: int | None, mean_wait_s: float
) -> None:
    # n2 is two GPUs: f2 and f3 arrive while it boots and take its slots while one is left (two tenants per GPU
    # shared by MPS, else one per whole GPU).
    waited = _fractional_scale_up(
        "static-shared", 2, (1000, 1100, 1150), 0.25, shared_node_group_max_gpus=max_gpus
    )
    assert waited == pytest.approx(mean_wait_s)


def _fractional_scale_up(
    policy: str, n2_gpus: int, arrivals: tuple[float, ...], share: float, **config: Any
) -> float:
    """The fractional pods' mean wait: p holds n1's one GPU until 2900 s; n2 (``n2_gpus`` GPUs) is empty from 0
    and removed at 600. The first fractional pod (all run 1000 s) fits no node in service: the autoscaler adds n2,
    back 200 s later, and its estimator puts the pods that arrive while it boots on it while a slot is left.
    Everything ends before the first plan (3600 s)."""
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(fallback="baseline", eviction_cost_s=0.0)
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", n2_gpus, "T4")]
    fractional = (TracePod(f"f{i}", at, 1000, 1, share, "LS", ()) for i, at in enumerate(arrivals, 1))
    replayed = Replay(
        POLICIES[policy],
        (pod("p", 0, 2900), *fractional),
        nodes,
        CATALOG,
        dataclasses.replace(AUTOSCALED, planner=planner, **config),
        (0.0, 3000.0),
    ).run()
    assert replayed.nodes_added == 1
    return replayed.wait_by_class[FRACTIONAL].mean_s


def test_a_cap_under_one_gpu_is_refused() -> None:
    with pytest.raises(ValueError, match="shared_node_group_max_gpus must be at least 1, got 0"):
        BacktestConfig(shared_node_group_max_gpus=0)


def test_static_shared_never_plans_and_on_a_fixed_fleet_is_static() -> None:
    # Over ten hours with a fractional pod waiting behind a whole one: packing plans (and may share n1 by MPS);
    # static-shared has the group but no planner, so on a fleet without the autoscaler it replays as static.
    from slicewise.planning.config import PlannerConfig

    config = BacktestConfig(planner=PlannerConfig(fallback="baseline", eviction_cost_s=0.0))
    nodes = [TraceNode("n1", 1, "T4")]
    pods = (
        pod("w", 0, 20_000),
        TracePod("f1", 100, 5000, 1, 0.25, "LS", ()),
        TracePod("f2", 200, 5000, 1, 0.25, "LS", ()),
    )
    runs = {
        name: Replay(POLICIES[name], pods, nodes, CATALOG, config, (0.0, 36_000.0)).run()
        for name in ("static", "static-shared", "packing")
    }
    assert runs["packing"].planner_runs > 0
    assert runs["static-shared"].planner_runs == runs["static"].planner_runs == 0
    assert runs["static-shared"].headline() == runs["static"].headline()
    assert runs["packing"].headline() != runs["static"].headline()


def _shaped_replay(
    nodes: list[TraceNode],
    pods: tuple[TracePod, ...],
    start: list[tuple[str, str]],
    keep_shaped: bool = True,
    mps_release_below: float = 0.25,
) -> Replay:
    """``packing`` under an autoscaler with a 4000 s unneeded time (``planner_keep_shaped`` on and
    ``planner_mps_release_below`` 0.25, as production, unless said otherwise)."""
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(
        fallback="baseline",
        eviction_cost_s=0.0,
        keep_shaped=keep_shaped,
        mps_release_below=mps_release_below,
    )
    config = dataclasses.replace(AUTOSCALED, scale_down_unneeded_s=4000.0, planner=planner)
    return Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0), start)


@pytest.mark.parametrize(
    ("keep_shaped", "evicted", "paid_s"), [(True, 0, 25_600 + 14_800), (False, 1, 6300 + 24_000)]
)
def test_the_planner_keeps_a_node_it_split_by_mig_from_the_autoscalers_drain(
    keep_shaped: bool, evicted: int, paid_s: float
) -> None:
    # Two one-GPU A100 nodes under MIG all-balanced (3g + 2g + 2 x 1g): the autoscaler reads both as 0 (no
    # nvidia.com/gpu). a (0.4: the 3g) and b (0.25: the 2g) start on n1; f (0.25) arrives at 1 s and takes n2's
    # 2g. When b leaves at 2000 s, a could move to n2's free 3g: n1 is unneeded from the step at 2100 (f could not
    # move back, n1 being the one to go). Unmarked, n1 is drained at the step at 6300 (a restarts on n2 at once)
    # and n2 goes 4000 s after a ends at 20,000. Marked by the plan at 3600 s (both host pods under MIG), nothing
    # is drained: n2 leaves the list at the first plan after f ends (10,800 s) and is removed 4000 s later; n1 at
    # the first plan after a ends (21,600 s), removed at 25,600.
    nodes = [TraceNode("n1", 1, "A100-80GB"), TraceNode("n2", 1, "A100-80GB")]
    pods = (
        TracePod("a", 0, 20_000, 1, 0.4, "LS", ()),
        TracePod("b", 0, 2000, 1, 0.25, "LS", ()),
        TracePod("f", 1, 10_000, 1, 0.25, "LS", ()),
    )
    result = _shaped_replay(nodes, pods, [("all-balanced", "default")] * 2, keep_shaped).run()
    assert (result.pods_evicted, result.nodes_removed, result.wait_mean_s) == (evicted, 2, 0.0)
    assert result.service_gpu_hours == pytest.approx(paid_s / 3600)


@pytest.mark.parametrize(
    ("mps_release_below", "evicted", "n2_paid_s"), [(1.0, 1, 6300), (0.25, 1, 6300), (0.2, 0, 14_800)]
)
def test_the_planner_leaves_a_node_it_shares_by_mps_to_the_autoscaler_under_its_setting(
    mps_release_below: float, evicted: int, n2_paid_s: float
) -> None:
    # n2 starts under MPS (two tenants per GPU, four in all). f, a quarter of a GPU, arrives while w and v fill
    # n1 and takes a tenant: a utilisation of 0.25 to the autoscaler, which counts tenants. f fits nowhere else
    # until v leaves at 2000 s (n1 then holds w alone: 0.5, not under), so n2 is unneeded from the step at 2100.
    # With planner_mps_release_below at 0.25 (as production) or more no plan marks it: drained at the step at
    # 6300 (f restarts at once on n1's free GPU) and removed. Under 0.25 the plan at 3600 s marks it (f takes
    # more than that share of its tenants): kept until the first plan after f ends (10,800 s), removed 4000 s
    # later. n1 goes 4000 s after w ends at 20,000.
    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 2, "T4")]
    pods = (pod("w", 0, 20_000), pod("v", 0, 2000), TracePod("f", 1, 10_000, 1, 0.25, "LS", ()))
    mps = ("all-disabled", CATALOG.device_plugin_config_for(2))
    replay = _shaped_replay(
        nodes, pods, [("all-disabled", "default"), mps], mps_release_below=mps_release_below
    )
    result = replay.run()
    assert (result.pods_evicted, result.nodes_removed, result.wait_mean_s) == (evicted, 2, 0.0)
    assert result.service_gpu_hours == pytest.approx((2 * 24_000 + 2 * n2_paid_s) / 3600)


def test_a_policy_replayed_with_another_mps_release_value_uses_its_own_not_the_backtests() -> None:
    # The row `slicewise backtest --compare-mps-release-below 0.2` adds, under a backtest set to 1: the same
    # trace as above, so the figures of 0.2 there (f kept on n2, n2 paid until 14,800 s), not those of 1.
    from slicewise.whatif.policies import with_mps_release_compared

    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 2, "T4")]
    pods = (pod("w", 0, 20_000), pod("v", 0, 2000), TracePod("f", 1, 10_000, 1, 0.25, "LS", ()))
    mps = ("all-disabled", CATALOG.device_plugin_config_for(2))
    base = _shaped_replay(nodes, pods, [("all-disabled", "default"), mps], mps_release_below=1.0)
    [_, other] = with_mps_release_compared([POLICIES["packing"]], [0.2, 1.0], 1.0, "whole-gpus")
    assert (other.name, other.mps_release_below) == ("packing, MPS release below 0.2", 0.2)
    # One row per shown value, the setting's left out, lowest first.
    rows = with_mps_release_compared([POLICIES["packing"]], [1.0, 0.2000001, 0.25000001, 0.2], 0.25, "off")
    assert [p.name for p in rows] == [
        "packing",
        "packing, MPS release below 0.2",
        "packing, MPS release below 1",
    ]
    replay = Replay(
        other, pods, nodes, CATALOG, base.config, (0.0, 30_000.0), [("all-disabled", "default"), mps]
    )
    assert replay.planner.mps_release_below == 0.2
    result = replay.run()
    assert (result.pods_evicted, result.nodes_removed) == (0, 2)
    assert result.service_gpu_hours == pytest.approx((2 * 24_000 + 2 * 14_800) / 3600)


def test_the_mps_release_comparison_names_the_paid_gpu_hours_the_setting_trades() -> None:
    # The two replays above side by side, as `--compare-mps-release-below 0.2` prints them: the same busy
    # node-GPU-hours and waits, but n2 paid until 14,800 s instead of 6,300 (2 x 8,500 GPU-s more).
    from slicewise.whatif.report import mps_release_choice
    from slicewise.whatif.run import Backtest
    from slicewise.whatif.trace import PodTrace

    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 2, "T4")]
    pods = (pod("w", 0, 20_000), pod("v", 0, 2000), TracePod("f", 1, 10_000, 1, 0.25, "LS", ()))
    start = [("all-disabled", "default"), ("all-disabled", CATALOG.device_plugin_config_for(2))]
    mine = _shaped_replay(nodes, pods, start, mps_release_below=1.0)
    other = _shaped_replay(nodes, pods, start, mps_release_below=0.2).run()
    results = {"packing": mine.run(), "packing, MPS release below 0.2": other}
    backtest = Backtest("p", "n", PodTrace(pods, ()), nodes, mine.config, (0.0, 30_000.0), results, 0.0)
    [line] = mps_release_choice(backtest)
    assert line.startswith("packing with MPS release below 1 (the setting): 0 s mean wait, ")
    # (2 x 24,000 + 2 x 6,300) / 3,600 = 16.8 and (2 x 24,000 + 2 x 14,800) / 3,600 = 21.6: +28.1 %.
    assert line.endswith("; paid GPU-hours 17 with the setting, 22 (+28.1%)")
    assert "; MPS release below 0.2: 0 s (n/a), " in line
    without_autoscaler = dataclasses.replace(mine.config, scale_down_unneeded_s=None)
    [line] = mps_release_choice(dataclasses.replace(backtest, config=without_autoscaler))
    assert "paid GPU-hours" not in line
    assert mps_release_choice(dataclasses.replace(backtest, results={"packing": results["packing"]})) == []


class _Watched(Replay):
    """A replay that records what waits after every step's scale-down check, and looks ahead an hour from 300 s
    (as the oracle's plan would) without the look-ahead recording anything itself."""

    def __init__(self, *args: object, look: bool) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.look, self.recording = look, True
        self.seen: dict[float, dict[object, int]] = {}
        self.ahead: dict[float, dict[object, int]] = {}

    def _scale_down_underused(self, now: float) -> None:
        super()._scale_down_underused(now)
        if not self.recording:
            return
        self.seen[now] = dict(+self.queued_demand)
        if self.look and now == 300:
            self.recording = False  # the fork copies the flag: it records nothing
            samples = self._lookahead(now)
            self.recording = True
            self.ahead = {now + 300 * k: dict(s) for k, s in enumerate(samples, start=1)}


def test_the_look_ahead_runs_the_autoscalers_drains_and_leaves_the_replay_as_it_was() -> None:
    # As in the drain test above: c, alone on n2 (0.25, under 0.5), is unneeded from the step at 300 s; at 900
    # n2 is drained (c restarts on n1) and removed. d arrives at 1000 and fits no node in service: the autoscaler
    # adds n2 back, and d waits until 1200. The hour looked ahead from 300 s must see d waiting at 1200, as the
    # replay does; a look-ahead that skipped the drain would have d start on n2 at once.
    nodes = [TraceNode("n1", 2, "T4"), TraceNode("n2", 4, "T4")]
    pods = (pod("a", 0, 20_000), pod("b", 1, 100), pod("c", 2, 20_000), pod("d", 1000, 500))
    runs = {}
    for look in (True, False):
        watched = _Watched(POLICIES["static"], pods, nodes, CATALOG, AUTOSCALED, (0.0, 30_000.0), look=look)
        runs[look] = (watched, watched.run())
    watched, result = runs[True]
    assert result.pods_evicted == 1 and result.wait_mean_s == pytest.approx(200 / 4)
    assert watched.ahead[1200] and watched.ahead == {t: watched.seen[t] for t in watched.ahead}
    # Looking ahead changed nothing of the replay itself (the fork copies the nodes it changes).
    unwatched, plain = runs[False]
    assert unwatched.seen == watched.seen
    assert (plain.wait_mean_s, plain.service_gpu_hours) == (result.wait_mean_s, result.service_gpu_hours)


def _pinned_replay(scarce: str, pinned_share: float, scarce_kind_share: float) -> float:
    """The mean wait of a replay where a P100-pinned pod runs until 5000 s, a 2-GPU pod that may run anywhere
    arrives at 6000 s for 20,000 s, and a pod pinned to the ``scarce`` model (2 GPUs of the fleet's) at 7000 s for
    1000 s; every node is removed once empty. No pod opted in to evictions."""
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(
        fallback="baseline",
        eviction_cost_s=0.0,
        pinned_share=pinned_share,
        scarce_kind_share=scarce_kind_share,
    )
    config = dataclasses.replace(AUTOSCALED, planner=planner, evictable="best-effort")
    nodes = [TraceNode("n1", 2, "P100"), TraceNode("n2", 8, "T4"), TraceNode("n3", 8, "T4")]
    if scarce != "P100":
        nodes.insert(0, TraceNode("n0", 2, scarce))  # first by name among the smallest
    pods = (
        TracePod("p100-pinned", 0, 5000, 1, 1.0, "LS", ("P100",)),
        TracePod("anywhere", 6000, 20_000, 2, 1.0, "LS", ()),
        TracePod("scarce-pinned", 7000, 1000, 1, 1.0, "LS", (scarce,)),
    )
    return Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0)).run().wait_mean_s


@pytest.mark.parametrize(("pinned_share", "waits"), [(0.125, (0, 200, 200)), (0.0, (0, 200, 19_200))])
def test_the_autoscaler_adds_a_node_kept_for_pinned_pods_last_for_a_pod_that_may_run_anywhere(
    pinned_share: float, waits: tuple[float, float, float]
) -> None:
    # The fleet's one P100 node (2 of 18 GPUs) runs a pod pinned to P100 until 5000 s; the plan at 3600 s sees the
    # pin, and since those GPUs are at most an eighth of the fleet's it keeps the node for pinned pods. Every node
    # is removed once empty (the T4s at 600 s, the P100 at 5600 s). At 6000 s a 2-GPU pod that may run anywhere
    # fits no node in service: least-waste alone adds the P100 node (the smallest that fits, 200 s to come up);
    # ranked last, a T4 node comes up instead, so at 7000 s the next P100-pinned pod waits only for the P100
    # node's own scale-up, not for the 2-GPU pod's 20,000 s.
    assert _pinned_replay("P100", pinned_share, 0.0) == pytest.approx(sum(waits) / 3)


@pytest.mark.parametrize(("scarce_kind_share", "waits"), [(0.125, (0, 200, 200)), (0.0, (0, 200, 19_200))])
def test_the_autoscaler_adds_a_scarce_kind_no_pod_pinned_itself_to_yet_last_once_some_pod_pins_itself(
    scarce_kind_share: float, waits: tuple[float, float, float]
) -> None:
    # As above, with a V100 node too (2 of 20 GPUs) that no pod pins itself to until 7000 s. The plan at 3600 s
    # sees the P100 pin, so the GPU model is a label pods pin themselves to, and the V100s hold at most an eighth
    # of the fleet's GPUs: the autoscaler adds the V100 node last, as it does the P100 node kept for pinned pods.
    # At 6000 s least-waste alone would add the V100 node for the 2-GPU pod that may run anywhere (the smallest
    # that fits, first by name), and the V100-pinned pod at 7000 s would wait for that pod's 20,000 s.
    assert _pinned_replay("V100", 0.125, scarce_kind_share) == pytest.approx(sum(waits) / 3)


@pytest.mark.parametrize(("scarce_kind_share", "waits"), [(0.25, (0, 0, 0)), (0.0, (0, 0, 17_000))])
def test_on_a_fixed_fleet_a_pod_that_may_run_anywhere_opens_a_larger_node_before_a_scarce_kinds(
    scarce_kind_share: float, waits: tuple[float, float, float]
) -> None:
    # No autoscaler: the fleet is a 2-GPU V100 node, a 2-GPU P100 node and an 8-GPU T4 node. The plan at 3600 s
    # sees the P100 pin, so the GPU model is a label pods pin themselves to, and the V100s (2 of 12 GPUs) are a
    # scarce kind: the empty V100 node carries three standby taints, the empty T4 node two. At 4000 s the 2-GPU pod
    # that may run anywhere opens the T4 node, and the V100-pinned pod at 7000 s starts at once. Without the kind
    # kept the V100 node carries one taint, is opened first, and the V100-pinned pod waits until 24,000 s.
    from slicewise.planning.config import PlannerConfig

    planner = PlannerConfig(
        fallback="baseline", eviction_cost_s=0.0, pinned_share=0.25, scarce_kind_share=scarce_kind_share
    )
    config = BacktestConfig(eviction_cost_s=0.0, planner=planner, evictable="best-effort")
    nodes = [TraceNode("n0", 2, "V100"), TraceNode("n1", 2, "P100"), TraceNode("n2", 8, "T4")]
    pods = (
        TracePod("p100-pinned", 0, 5000, 1, 1.0, "LS", ("P100",)),
        TracePod("anywhere", 4000, 20_000, 2, 1.0, "LS", ()),
        TracePod("v100-pinned", 7000, 1000, 1, 1.0, "LS", ("V100",)),
    )
    result = Replay(POLICIES["packing"], pods, nodes, CATALOG, config, (0.0, 30_000.0)).run()
    assert result.wait_mean_s == pytest.approx(sum(waits) / 3)
