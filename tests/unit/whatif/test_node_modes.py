"""One sharing mode per node: ``sharing-modes`` (``sharing-forms`` so) hand-computed beside ``sharing-forms``, and
``ideal-modes`` (``ideal`` so) beside ``ideal`` and ``sharing-modes``."""

from __future__ import annotations

import pytest

from slicewise.catalog import load_catalog
from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.ideal import IdealReplay
from slicewise.whatif.metrics import PolicyResult
from slicewise.whatif.node_modes import IdealModesReplay, ModeNode, ModesReplay
from slicewise.whatif.policies import IDEAL_MODES, SHARING_MODES, parse_policies
from slicewise.whatif.run import replay
from slicewise.whatif.sharing import FormsReplay
from slicewise.whatif.trace import PodTrace, TraceNode, TracePod

CATALOG = load_catalog()
CONFIG = BacktestConfig(eviction_cost_s=0.0)


def pod(name: str, arrival: float, duration: float, share: float, gpus: int = 1) -> TracePod:
    return TracePod(name, arrival, duration, gpus, share, "LS")


class Recorded(ModesReplay):
    """``sharing-modes`` that records where each pod started: (node, GPUs, share held, the node's tenant)."""

    def _start(self, pod_id: int, when: float) -> None:
        super()._start(pod_id, when)
        node = self.packing.open[self.packing.where[pod_id]]
        assert isinstance(node, ModeNode)
        self.__dict__.setdefault("placed", {})[pod_id] = (node.spec.name, *node.pods[pod_id], node.tenant)


def run(
    kind: type[IdealReplay], pods: list[TracePod], nodes: list[TraceNode]
) -> tuple[IdealReplay, PolicyResult]:
    replay_ = kind(tuple(pods), nodes, CATALOG, CONFIG, (0.0, 5000.0))
    return replay_, replay_.run()


def placed(pods: list[TracePod], nodes: list[TraceNode]) -> list[tuple[str, tuple[int, ...], float, float]]:
    """Where each pod started under ``sharing-modes``, in pod order."""
    replay_, _ = run(Recorded, pods, nodes)
    return [replay_.__dict__["placed"][i] for i in range(len(pods))]


def test_a_node_without_mig_holds_whole_gpu_pods_or_mps_tenants_never_both() -> None:
    # T4s have no MIG. A whole-GPU pod opens node a in whole-GPU mode. The first 0.3-GPU pod finds no MPS node in
    # use and takes a's free GPU whole; the second finds neither and opens b in MPS with a tenant of 1/3. Node a
    # holds 2 GPUs for 0-1010 s, b 2 GPUs for 20-1020 s. sharing-forms puts both small pods on a's second GPU.
    nodes = [TraceNode("a", 2, "T4"), TraceNode("b", 2, "T4")]
    pods = [pod("whole", 0, 1000, 1.0), pod("small1", 10, 1000, 0.3), pod("small2", 20, 1000, 0.3)]
    assert placed(pods, nodes) == [("a", (0,), 1.0, 1.0), ("a", (1,), 1.0, 1.0), ("b", (0,), 1 / 3, 1 / 3)]
    _, result = run(ModesReplay, pods, nodes)
    assert result.policy == SHARING_MODES
    assert result.node_gpu_hours == pytest.approx((2 * 1010 + 2 * 1000) / 3600)
    _, forms = run(FormsReplay, pods, nodes)
    assert forms.node_gpu_hours == pytest.approx(2 * 1020 / 3600)


def test_the_pod_that_opens_an_mps_node_sets_its_tenant_for_every_later_pod() -> None:
    # x (0.3) opens n1 with tenants of 1/3. y (0.45) needs a tenant of 1/2, which n1 no longer offers: it opens n2.
    # z (0.2) fits either; best fit puts it on n2's GPU, whose 1/2 left is closest to a tenant of 1/2.
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]
    pods = [pod("x", 0, 1000, 0.3), pod("y", 1, 1000, 0.45), pod("z", 2, 1000, 0.2)]
    assert placed(pods, nodes) == [
        ("n1", (0,), 1 / 3, 1 / 3),
        ("n2", (0,), 1 / 2, 1 / 2),
        ("n2", (0,), 1 / 2, 1 / 2),
    ]
    _, result = run(ModesReplay, pods, nodes)
    assert result.node_gpu_hours == pytest.approx((1000 + 1001) / 3600)
    # sharing-forms pairs x's third and y's half on n1's GPU, and z's quarter, which does not fit beside them,
    # opens n2: the same node-GPU-hours here, with other pods paired.
    forms, result = run(FormsReplay, pods, nodes)
    assert [forms.asks[i].share for i in range(3)] == pytest.approx([1 / 3, 1 / 2, 1 / 4])
    assert result.node_gpu_hours == pytest.approx((1001 + 1000) / 3600)


def test_an_a100_mixes_whole_gpus_and_mig_slices_but_mps_takes_the_whole_node() -> None:
    nodes = [TraceNode("a", 2, "A100-80GB"), TraceNode("b", 2, "A100-80GB")]
    # A whole-GPU pod opens a; a 0.4-GPU pod takes a 3g slice (3/7) of a's other GPU, a 0.5-GPU pod the 4g slice
    # (4/7) beside it: MIG's mixed strategy gives whole GPUs and slices on one node. A second whole-GPU pod finds
    # no whole GPU left on a and opens b.
    pods = [pod("w1", 0, 1000, 1.0), pod("s", 1, 1000, 0.4), pod("h", 2, 1000, 0.5), pod("w2", 3, 1000, 1.0)]
    assert placed(pods, nodes) == [
        ("a", (0,), 1.0, 1.0),
        ("a", (1,), 3 / 7, 1.0),
        ("a", (1,), 4 / 7, 1.0),
        ("b", (0,), 1.0, 1.0),
    ]
    # A 0.5-GPU pod on an empty fleet: an MPS tenant of 1/2 is smaller than a 4g slice, so it opens a in MPS,
    # and the whole-GPU pod after it cannot join a node in MPS: it opens b.
    assert placed([pod("h", 0, 1000, 0.5), pod("w", 1, 1000, 1.0)], nodes) == [
        ("a", (0,), 1 / 2, 1 / 2),
        ("b", (0,), 1.0, 1.0),
    ]


def test_an_empty_node_forgets_its_mode() -> None:
    # x (0.3) opens n1 in MPS (tenant 1/3) and leaves at 100 s; the whole-GPU pod at 200 s finds n1 empty and
    # takes it whole. One node, used 0-100 s and 200-1200 s.
    nodes = [TraceNode("n1", 1, "T4"), TraceNode("n2", 1, "T4")]
    pods = [pod("x", 0, 100, 0.3), pod("w", 200, 1000, 1.0)]
    assert placed(pods, nodes) == [("n1", (0,), 1 / 3, 1 / 3), ("n1", (0,), 1.0, 1.0)]
    _, result = run(ModesReplay, pods, nodes)
    assert result.node_gpu_hours == pytest.approx(1100 / 3600)


def test_the_backtest_knows_sharing_in_node_modes_by_name() -> None:
    # On one T4: the whole-GPU pod holds the node in whole-GPU mode, so the 0.3-GPU pod waits for it (100 s).
    pods = (pod("a", 0, 100, 1.0), pod("b", 0, 100, 0.3))
    (policy,) = parse_policies("sharing-modes")
    result = replay(policy, PodTrace(pods, ()), [TraceNode("n1", 1, "T4")], CONFIG, (0.0, 1000.0))
    assert (result.policy, result.wait_mean_s) == (SHARING_MODES, 50.0)
    assert result.node_gpu_hours == pytest.approx(200 / 3600)


def test_ideal_in_node_modes_pays_for_a_second_node_where_ideal_mixes_one() -> None:
    # A whole-GPU pod and three 0.3-GPU pods, all 0-1000 s, on two 2-GPU T4 nodes. ideal puts the three on a's
    # second GPU (0.9) beside the whole-GPU pod: 2 GPUs. With one mode per node, a node holds the whole-GPU pod
    # and a whole GPU of small pods, or MPS tenants: repacking cannot do better than both nodes, 4 GPUs.
    nodes = [TraceNode("a", 2, "T4"), TraceNode("b", 2, "T4")]
    pods = [pod("w", 0, 1000, 1.0), *(pod(f"s{i}", 0, 1000, 0.3) for i in range(3))]
    _, bound = run(IdealReplay, pods, nodes)
    assert bound.node_gpu_hours == pytest.approx(2000 / 3600)
    _, result = run(IdealModesReplay, pods, nodes)
    assert result.policy == IDEAL_MODES
    assert result.node_gpu_hours == pytest.approx(4000 / 3600)


def test_ideal_in_node_modes_repacks_small_pods_into_one_mps_node() -> None:
    # w (0-100 s) opens a whole; s1 (0.3, from 10 s) takes a's other GPU whole. At 200 s s2 takes a's free GPU,
    # and s3 finds no room: sharing-modes opens b in MPS (a: 0-1200 s, b: 200-1200 s, 2 GPUs each). ideal-modes
    # repacks the three onto one MPS GPU of a the moment b opens: a alone, 0-1200 s.
    nodes = [TraceNode("a", 2, "T4"), TraceNode("b", 2, "T4")]
    pods = [
        pod("w", 0, 100, 1.0),
        pod("s1", 10, 990, 0.3),
        pod("s2", 200, 1000, 0.3),
        pod("s3", 200, 1000, 0.3),
    ]
    _, placed_once = run(ModesReplay, pods, nodes)
    assert placed_once.node_gpu_hours == pytest.approx((2 * 1200 + 2 * 1000) / 3600)
    _, repacked = run(IdealModesReplay, pods, nodes)
    assert repacked.node_gpu_hours == pytest.approx(2 * 1200 / 3600)
    assert repacked.wait_mean_s == 0.0
