"""MIG nodes kept from cluster-autoscaler's scale-down of nodes in use.

cluster-autoscaler drains and removes a node whose utilisation is under its ``--scale-down-utilization-threshold``
(0.5 by default) whenever its simulation places the node's pods elsewhere. For a GPU node it counts only
``nvidia.com/gpu``. A node whose GPUs are all under MIG (the mixed strategy names its instances
``nvidia.com/mig-*``) reads 0, an "unready GPU", however full its slices, and a node split between MIG and whole
GPUs reads its whole GPUs only. So the autoscaler drains the MIG nodes the planner shaped first, wherever their
pods' instances exist elsewhere (docs/backtest.md, "Nodes in use under the utilisation threshold", has the
figures).

After the plan ``packing`` lists the nodes that keep a MIG layout and host pods, for the annotation
``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"``, which makes the autoscaler leave a node alone.
An empty node is never listed, so the autoscaler still removes the empty ones (an emptied node leaves the list at
the next plan), and a node this plan changes is not listed (its pods are evicted). On by default
(``planner_keep_shaped``; off: nothing is listed, and apply mode takes the annotation off the nodes it marked).

Nodes shared by MPS are listed only when their pods take more than ``planner_mps_release_below``
(``mps_release_below``, default 0.25) of their tenants, as the autoscaler reads them (``nvidia.com/gpu`` requested
over tenants): 0 lists every MPS node that hosts pods (the rule until 2026-12-05), 1 none. The autoscaler counts an
MPS tenant as one ``nvidia.com/gpu``, so it drains such a node only under its threshold (half the tenants by
default), and moving the pods of a nearly empty one to other tenants is the consolidation the node-hours ask for.
But the drained tenants may restart on whole GPUs, which pods that need several GPUs then miss. Replayed with the
autoscaler over six samples per variant (docs/planner.md, "Shaped nodes and the autoscaler"): leaving every MPS node
to it (1) raised the node-hour share of the bound's cut on 14 of 16 variant-fleets against marking them all (0),
and cost ``default`` with the bin-packing profile 10 points of its median wait cut; 0.25 keeps that wait cut and most
of the node-hours; 0.125 loses node-hours again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.planning.consolidation import Planned
from slicewise.planning.node import NodeContext
from slicewise.planning.types import CHANGE, SKIP, NodePlan


def kept_from_scale_down(
    planned: Sequence[Planned], plans: Mapping[str, NodePlan], mps_release_below: float
) -> tuple[str, ...]:
    """The nodes to mark ``scale-down-disabled``, in name order (``plans``: every node's final plan): those with a
    MIG layout that host pods, and those shared by MPS whose pods take more than ``mps_release_below`` of their
    tenants."""
    return tuple(
        sorted(
            item.ctx.name
            for item in planned
            if item.ctx.obs.pods
            and (item.ctx.layout is not None or tenants_taken(item.ctx) > mps_release_below)
            and plans[item.ctx.name].action not in (CHANGE, SKIP)
        )
    )


def tenants_taken(ctx: NodeContext) -> float:
    """The share of an MPS node's tenants its pods take, as cluster-autoscaler reads its utilisation
    (``nvidia.com/gpu`` requested over allocatable); 0 for a node not shared by MPS."""
    if ctx.replicas <= 1 or ctx.layout is not None:
        return 0.0
    return ctx.requests()[GPU_RESOURCE] / (ctx.gpus * ctx.replicas)
