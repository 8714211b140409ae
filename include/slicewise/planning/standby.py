"""Standby: empty nodes the scheduler should open last, so that a pod that starts a node starts a small one.

Node-GPU-hours are the GPUs of the nodes that host at least one pod: a 1-GPU pod that lands on an empty 8-GPU node
holds eight GPUs out of an autoscaler's reach until it ends, where an empty 2-GPU node would have held two. The
bound of the backtest (``ideal``) places a pod on the node in use where it fits tightest, else on the smallest free
node; the cluster's scheduler does neither (name order, or the spreading or bin-packing score: Kubernetes' default
profile scores an empty node highest). So after the plan ``packing`` lists the empty nodes without a MIG layout and
without MPS that no change of this plan touches, graded by size: a node of the fleet's n-th smallest GPU count
gets the first n of ``STANDBY_TAINTS`` of :mod:`slicewise.cluster.base` (``slicewise.io/standby``,
``-large``, ``-larger``, ``-largest``, all ``PreferNoSchedule``; the fourth smallest size and larger get all
four). kube-scheduler's ``TaintToleration`` score counts the ``PreferNoSchedule`` taints a pod does not tolerate
(weight 3 in the default profile, above ``NodeAffinity`` 2 and ``NodeResourcesFit`` 1), so a pod goes to a node in
use when one fits, else to the smallest empty node, and opens a larger one only when nothing smaller fits. The
score is normalised by the most taints any fitting node has, so with four grades one grade is worth
``3 * 100 / 4`` points, less than ``NodeResourcesFit``'s 100: a much tighter fit can jump one grade, as it would
in the cluster (docs/backtest.md, "Graded standby", has the figures). Empty MPS nodes (the shared reserve's) are
left open: tainting them, fractional pods queue behind whole ones. A preference, never a refusal; a node that
gets a pod leaves the lists at the next plan. A node this plan's consolidation empties for release (``nodes``) is
listed at once: the drain's cordon is lifted before the next plan. The nodes the plan keeps for pinned pods
(:mod:`slicewise.planning.pinned`) are listed in use or not, one taint above the largest size. On by default
(``planner_standby``; off: nothing is listed, and apply mode clears every standby taint).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from slicewise.cluster.base import STANDBY_TAINTS
from slicewise.planning.consolidation import RULE as CONSOLIDATED
from slicewise.planning.consolidation import Planned
from slicewise.planning.types import CHANGE, NodePlan


@dataclass(frozen=True)
class Standby:
    #: ``grades[i]``: the nodes to carry ``STANDBY_TAINTS[i]``, in name order; each list within the one before.
    grades: tuple[tuple[str, ...], ...] = ()


def standby(
    planned: Sequence[Planned], plans: Mapping[str, NodePlan], pinned: Collection[str] = ()
) -> Standby:
    """The nodes to carry the standby taints (``plans``: every node's final plan; ``pinned``: the nodes kept for
    pinned pods, :mod:`slicewise.planning.pinned`, in use or not: one taint more than the fleet's largest size
    gets, up to all four, so that a pod that may run anywhere goes to them only when no other node fits, or none
    but the fleet's largest where it has four sizes or more)."""
    sizes = sorted({item.ctx.gpus for item in planned})
    last = min(len(sizes) + 1, len(STANDBY_TAINTS))
    graded = sorted(
        (
            item.ctx.name,
            last if item.ctx.name in pinned else min(sizes.index(item.ctx.gpus) + 1, len(STANDBY_TAINTS)),
        )
        for item in planned
        if item.ctx.layout is None
        and item.ctx.replicas == 1
        and (
            ((not item.ctx.obs.pods or item.ctx.name in pinned) and plans[item.ctx.name].action != CHANGE)
            or _emptied_for_release(plans[item.ctx.name])
        )
    )
    top = max((grade for _, grade in graded), default=0)
    return Standby(tuple(tuple(name for name, grade in graded if grade > i) for i in range(top)))


def _emptied_for_release(plan: NodePlan) -> bool:
    """Whether this plan's consolidation empties the node with nothing to host there (``planner_consolidation=nodes``,
    the plan's "releasable"): tainted now, it comes back from its drain a standby node, where it would otherwise be
    the emptiest node of the fleet for the scheduler's spreading score until the next plan."""
    return plan.changes and plan.rule == CONSOLIDATED and not plan.pending_served
