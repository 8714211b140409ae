"""Standby: empty nodes the scheduler should open last, so that a pod that starts a node starts a small one.

Node-GPU-hours are the GPUs of the nodes that host at least one pod: a 1-GPU pod that lands on an empty 8-GPU node
holds eight GPUs out of an autoscaler's reach until it ends, where an empty 2-GPU node would have held two. The
bound of the backtest (``ideal``) places a pod on the node in use where it fits tightest, else on the smallest free
node; the cluster's scheduler does neither (name order, or the spreading or bin-packing score). So after the plan
``packing`` lists the empty nodes without a MIG layout that have more GPUs than the fleet's smallest node and that
no change of this plan touches: those get the taint ``STANDBY_TAINT`` of :mod:`slicewise.cluster.base`
(``slicewise.io/standby:PreferNoSchedule``), which kube-scheduler's ``TaintToleration`` score (weight 3 in the
default profile, above ``NodeAffinity`` 2 and ``NodeResourcesFit`` 1) turns into "only when no other node fits".
Empty MPS nodes are listed too: a fractional pod then takes a free GPU on a node in use before it opens a large
node of tenants (leaving them out, over six samples per variant: less of the node-GPU-hour cut on ``default``, more
small pods waiting longer than under ``static``, one more sample at the wait goal; docs/backtest.md). Pods that
need a large node still get one (the taint is a preference, and nothing else fits them); a node that gets a pod
leaves the list at the next plan. On by default (``planner_standby``; off: nothing is listed, and apply mode clears
the taint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slicewise.planning.consolidation import Planned
from slicewise.planning.types import CHANGE, NodePlan


def standby(planned: Sequence[Planned], plans: Mapping[str, NodePlan]) -> tuple[str, ...]:
    """The nodes to carry the standby taint, in name order (``plans``: every node's final plan)."""
    if not planned:
        return ()
    smallest = min(item.ctx.gpus for item in planned)
    return tuple(
        sorted(
            item.ctx.name
            for item in planned
            if not item.ctx.obs.pods
            and item.ctx.gpus > smallest
            and item.ctx.layout is None
            and plans[item.ctx.name].action != CHANGE
        )
    )
