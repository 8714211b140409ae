"""Standby: empty nodes the scheduler should open last, so that a pod that starts a node starts a small one.

Node-GPU-hours are the GPUs of the nodes that host at least one pod: a 1-GPU pod that lands on an empty 8-GPU node
holds eight GPUs out of an autoscaler's reach until it ends, where an empty 2-GPU node would have held two. The
bound of the backtest (``ideal``) places a pod on the node in use where it fits tightest, else on the smallest free
node; the cluster's scheduler does neither (name order, or the spreading or bin-packing score: Kubernetes' default
profile scores an empty node highest). So after the plan ``packing`` lists the empty nodes without a MIG layout and
without MPS that no change of this plan touches, in two grades: every one of them gets the taint ``STANDBY_TAINT``
of :mod:`slicewise.cluster.base` (``slicewise.io/standby:PreferNoSchedule``), and those with more GPUs than the
fleet's smallest node get ``STANDBY_LARGE_TAINT`` as well. kube-scheduler's ``TaintToleration`` score counts the
``PreferNoSchedule`` taints a pod does not tolerate (weight 3 in the default profile, above ``NodeAffinity`` 2 and
``NodeResourcesFit`` 1), so a pod goes to a node in use when one fits, else to a small empty node, and opens a
large one only when nothing else fits. Two grades are what the default weights keep in order: one grade is worth
``3 * 100 / 2`` points against ``NodeResourcesFit``'s 100. Empty MPS nodes (the shared reserve's) are left open:
tainting them, fractional pods queue behind whole ones (docs/backtest.md, "Graded standby"). A preference, never
a refusal; a node that gets a pod leaves the list at the next plan. On by default (``planner_standby``; off:
nothing is listed, and apply mode clears both taints).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slicewise.planning.consolidation import Planned
from slicewise.planning.types import CHANGE, NodePlan


@dataclass(frozen=True)
class Standby:
    nodes: tuple[str, ...] = ()  # every listed node, in name order: the first taint
    large: tuple[str, ...] = ()  # those larger than the fleet's smallest node: the second taint too


def standby(planned: Sequence[Planned], plans: Mapping[str, NodePlan]) -> Standby:
    """The nodes to carry the standby taints (``plans``: every node's final plan)."""
    if not planned:
        return Standby()
    smallest = min(item.ctx.gpus for item in planned)
    listed = sorted(
        (item.ctx.name, item.ctx.gpus)
        for item in planned
        if not item.ctx.obs.pods
        and item.ctx.layout is None
        and item.ctx.replicas == 1
        and plans[item.ctx.name].action != CHANGE
    )
    return Standby(tuple(name for name, _ in listed), tuple(name for name, gpus in listed if gpus > smallest))
