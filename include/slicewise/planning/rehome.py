"""Re-homing: a fractional pod that runs on a whole GPU moves to a free MPS tenant, so the GPU it held serves
another pod.

A fractional pod lands on a whole GPU when no MPS tenant is free as it arrives, and stays there for its whole run:
on the public traces the long fractional pods (0.44-0.47 of a GPU, running for days) held whole GPUs through
bursts in which one-GPU pods queued for hours, while a tenant of the shared reserve was free (docs/backtest.md,
"Re-homing fractional pods"). Nothing else moves them: the scheduler places a pod once, a consolidation empties
a whole node, and the per-node pass switches a node to MPS only where every pod it runs fits a tenant.

After the plan, ``packing`` lists **moves**: each fractional pod on one whole GPU of a node without MIG or MPS
that declares its share (``slicewise.io/gpu-share``) and may be evicted now, for which a node that keeps MPS
under its plan (schedulable) has a tenant free at least that big and allowed by the pod's node selector; one pod
per free tenant. The pod's controller re-creates it and the scheduler places it; fractional pods that prefer MPS
nodes (the preferred node affinity of docs/planner.md) take the tenant. A move is worth the GPU it frees against
the pod's share of ``planner_eviction_cost_s``; it goes ahead when one GPU-hour beats that cost by the hysteresis.

``planner_rehome``: ``always`` (the default) moves whenever a tenant fits, so the freed GPU also serves the pods
still to come and nodes empty sooner; ``waiting`` only while whole-GPU requests of one GPU wait that the plan
leaves unhosted, at most one move per such request the donor's node may host; ``off`` none. A node whose plan
changes it is neither donor nor receiver (its pods are evicted anyway).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import GpuPod
from slicewise.planning import packing
from slicewise.planning.config import REHOME, PlannerConfig
from slicewise.planning.consolidation import Planned
from slicewise.planning.demand import EPS, Pool
from slicewise.planning.types import CHANGE, SKIP, NodePlan, PodMove

HOUR_S = 3600.0
ALWAYS, WAITING, OFF = REHOME


def rehome(
    planned: Sequence[Planned],
    plans: Mapping[str, NodePlan],
    pool: Pool,
    config: PlannerConfig,
) -> tuple[PodMove, ...]:
    """The moves, donors in name order (``plans``: every node's final plan; ``pool``: the requests left waiting)."""
    if config.rehome == OFF:
        return ()
    waiting = [
        (request, count) for request, count in pool if request.whole and request.gpus == 1 and count > EPS
    ]
    if config.rehome == WAITING and not waiting:
        return ()
    tenants = _free_tenants(planned, plans)
    moves: list[PodMove] = []
    for item in sorted(planned, key=lambda p: p.ctx.name):
        ctx = item.ctx
        if ctx.layout is not None or ctx.replicas > 1 or plans[ctx.name].action in (CHANGE, SKIP):
            continue
        labels = packing.labels_under(ctx.obs.node, 1)
        for pod in sorted(ctx.obs.pods, key=lambda p: (p.namespace, p.name)):
            if not _movable(pod, config):
                continue
            assert pod.share is not None
            served = next(
                (
                    i
                    for i, (request, count) in enumerate(waiting)
                    if count > EPS and request.allows(ctx.model.name, labels)
                ),
                None,
            )
            if served is None and config.rehome == WAITING:
                break
            to = tuple(
                name
                for name, (share, free, node_labels) in sorted(tenants.items())
                if free > 0 and share >= pod.share - EPS and pod.may_run_on(node_labels)
            )
            if not to:
                continue
            # Take the tenant from the first receiver (the scheduler may pick another: they are all counted free).
            share, free, node_labels = tenants[to[0]]
            tenants[to[0]] = (share, free - 1, node_labels)
            if served is not None:
                request, count = waiting[served]
                waiting[served] = (request, count - 1)
            moves.append(PodMove(pod.namespace, pod.name, ctx.name, pod.share, to))
    return tuple(moves)


def _movable(pod: GpuPod, config: PlannerConfig) -> bool:
    """A declared fractional share on one whole GPU, evictable now, and a GPU-hour beats its eviction cost."""
    if (
        pod.share is None
        or pod.share >= 1 - EPS
        or dict(pod.requests) != {GPU_RESOURCE: 1}
        or not pod.evictable
    ):
        return False
    return 1.0 - pod.share * config.eviction_cost_s / HOUR_S >= config.min_gain_gpu_hours


Tenants = dict[str, tuple[float, int, Mapping[str, str]]]  # node -> (tenant share, free tenants, its labels)


def _free_tenants(planned: Sequence[Planned], plans: Mapping[str, NodePlan]) -> Tenants:
    """MPS nodes their plans keep as they are, schedulable: their tenants, by name."""
    out: Tenants = {}
    for item in planned:
        ctx = item.ctx
        if ctx.replicas <= 1 or ctx.layout is not None or plans[ctx.name].action in (CHANGE, SKIP):
            continue
        if ctx.obs.node.unschedulable:
            continue
        used = sum(pod.requests.get(GPU_RESOURCE, 0) for pod in ctx.obs.pods)
        free = ctx.gpus * ctx.replicas - used
        if free > 0:
            out[ctx.name] = (1.0 / ctx.replicas, free, packing.labels_under(ctx.obs.node, ctx.replicas))
    return out


def note(moves: Sequence[PodMove]) -> str:
    """The plan's note naming the moves."""
    shown = "; ".join(move.describe() for move in moves[:5])
    more = f"; and {len(moves) - 5} more" if len(moves) > 5 else ""
    return f"re-homed: {len(moves)} fractional pods on whole GPUs move to free MPS tenants: {shown}{more}"
