"""The ``packing`` policy (default): the layout that hosts the forecast demand with the least stranded capacity.

MIG nodes choose among the named layouts of their GPU model (MIG stays on: switching a node between MIG and
whole GPUs changes the resource names its pods request, a decision left to people). For every candidate the
node's running pods' requests and the pool's forecast pending demand (upper quantile) are placed on the
layout's slices; its score is

    - served GPU-equivalents  +  unusable compute  +  2 x running pods' slices lost  (+ a change penalty)

where a slice counts as its share of a GPU's compute (g / 7, or 1 / replicas for an MPS tenant) and unusable
compute is what no instance of the layout covers (e.g. the seventh slice of 3 x 2g): fragmentation that no
request can ever use. Ties go to the current layout (fewest changes). Whole-GPU nodes
get the MPS replicas that host their pending ``nvidia.com/gpu`` demand while the tenants' forecast load and
memory per GPU stay under the target — unless pods that need whole GPUs are pending (``WHOLE_GPUS``): their
demand is served first, by keeping (or making) GPUs whole, since no MPS tenant can host them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import MutableMapping

from slicewise.catalog import Catalog, Layout, resource_for_profile
from slicewise.planning.config import PlannerConfig
from slicewise.planning.node import GPU, WHOLE_GPUS, NodeContext, mps_replicas_at_most
from slicewise.planning.proposal import Proposal

RULE_MIG = (
    "packing: the layout that hosts running and forecast pending requests with the least stranded capacity"
)
RULE_MPS = "packing: MPS tenants for pending whole-GPU requests while P90 load and memory fit the target"
RULE_WHOLE = "packing: GPUs stay whole for pending pods that need more than one GPU"
LOST_WEIGHT = 2.0  # a running pod losing its slice weighs twice a pending request gained


def _placement(
    ctx: NodeContext, layout: Layout | None, replicas: int, pending: Counter[str] | MutableMapping[str, float]
) -> tuple[float, float, float, dict[str, float]]:
    """(served, unusable, lost) in GPU-equivalents and the pending requests served, for one candidate."""
    capacity = ctx.capacity(layout, replicas)
    requests = ctx.requests()
    served = lost = 0.0
    usable = sum(count * ctx.share(resource, replicas) for resource, count in capacity.items())
    extra: dict[str, float] = {}
    for resource in set(capacity) | set(requests):
        share = ctx.share(resource, replicas)
        cap = capacity.get(resource, 0)
        keep = min(cap, requests.get(resource, 0))
        take = min(cap - keep, max(0.0, float(pending.get(resource, 0.0))))
        served += (keep + take) * share
        lost += (requests.get(resource, 0) - keep) * share
        if take > 0:
            extra[resource] = take
    return served, max(0.0, ctx.gpus - usable), lost, extra


def plan_mig(
    ctx: NodeContext, catalog: Catalog, config: PlannerConfig, pending: MutableMapping[str, float]
) -> Proposal:
    candidates: dict[Layout, str] = {}
    for name, layout in sorted(catalog.configs_for(ctx.model.name).items()):
        if layout:  # MIG on with at least one instance
            candidates.setdefault(layout, name)
    assert ctx.layout is not None
    current = ctx.layout
    placements = {lay: _placement(ctx, lay, 1, pending) for lay in [current, *candidates]}
    base_served, base_unusable, _, base_extra = placements[current]

    def score(layout: Layout) -> tuple[float, int, str]:
        served, unusable, lost, _ = placements[layout]
        penalty = 0.0 if layout == current else config.change_penalty_gpu_hours
        rank = round(-served + unusable + LOST_WEIGHT * lost + penalty, 9)
        return (rank, 0 if layout == current else 1, candidates.get(layout, ""))

    best = min(placements, key=score)
    served, unusable, lost, extra = placements[best]
    gain = served - base_served
    reasons = [
        f"forecast pending requests: {_fmt(pending, ctx)}",
        f"running pods request {_fmt_counts(ctx.requests())}",
        f"requests hosted {base_served:.2f} -> {served:.2f} GPU-eq, unusable compute {base_unusable:.2f} -> "
        f"{unusable:.2f} GPU-eq",
    ]
    if lost > 0:
        reasons.append(f"running pods' slices removed: {lost:.2f} GPU-eq (they are evicted and requeue)")
    return Proposal(best, 1, RULE_MIG, tuple(reasons), gain, extra if best != current else base_extra)


def plan_mps(
    ctx: NodeContext, catalog: Catalog, config: PlannerConfig, pending: MutableMapping[str, float]
) -> Proposal:
    requests = ctx.requests()
    tenants = requests.get(GPU, 0)
    whole = _whole_gpus(ctx, tenants, max(0.0, pending.get(WHOLE_GPUS, 0.0)))
    if whole is not None:
        return whole
    load = sum(f.upper for f in ctx.forecasts)  # summed over the node's GPUs
    memory = sum(0.0 if math.isnan(f.memory) else f.memory for f in ctx.forecasts)
    per_tenant_load = load / max(1, tenants)
    per_tenant_memory = memory / max(1, tenants)
    cap = ctx.model.mps_max_replicas
    reasons = [f"{tenants} GPU tenants, P90 load {load:.2f} over {ctx.gpus} GPUs, memory {memory:.2f} GPU-eq"]
    if per_tenant_load > 0:
        cap = min(cap, max(1, math.floor(config.mps_target_util / per_tenant_load)))
        reasons.append(f"load fits at most {cap} tenants per GPU under {config.mps_target_util:.0%}")
    if per_tenant_memory > 0:
        cap = min(cap, max(1, math.floor(1.0 / per_tenant_memory)))
    if ctx.multi_gpu_pods():
        cap = 1
        reasons.append("a pod requests more than one GPU: MPS would refuse it")
    want = math.ceil((tenants + max(0.0, pending.get(GPU, 0.0))) / ctx.gpus)
    replicas = mps_replicas_at_most(catalog, max(1, min(want, cap)))
    if replicas < ctx.replicas and ctx.replicas <= cap:
        replicas = ctx.replicas  # shrinking without overload gains nothing
    waiting = max(0.0, pending.get(GPU, 0.0))
    hosted_now = min(max(0, ctx.gpus * ctx.replicas - tenants), waiting)
    hosted = min(max(0, ctx.gpus * replicas - tenants), waiting)
    # An MPS tenant is worth the GPU work it brings (its forecast load), not its nominal 1 / replicas share.
    work = per_tenant_load if per_tenant_load > 0 else 1.0 / max(replicas, 1)
    overload = max(0.0, load - config.mps_target_util * ctx.gpus) if replicas < ctx.replicas else 0.0
    gain = max(0.0, hosted - hosted_now) * work + overload
    extra = {GPU: hosted} if hosted > 0 else {}
    if hosted > hosted_now:
        reasons.append(f"{hosted - hosted_now:.1f} more pending GPU requests hosted, ~{work:.2f} GPU each")
    if overload:
        reasons.append(f"tenants' P90 load exceeds the target by {overload:.2f} GPU-eq: fewer tenants")
    lost = max(0, tenants - ctx.gpus * replicas)
    if lost > 0:
        reasons.append(f"{lost} running tenants lose their slot")
    return Proposal(None, replicas, RULE_MPS, tuple(reasons), gain, extra)


def _whole_gpus(ctx: NodeContext, tenants: int, wanted: float) -> Proposal | None:
    """Whole GPUs for pending multi-GPU pods, when this node can give some without evicting a tenant."""
    free = ctx.gpus - tenants  # GPUs left once every tenant has a whole one
    if wanted <= 0 or free <= 0:
        return None
    hosted = min(float(free), wanted)
    reasons = (
        f"{wanted:.0f} GPUs wanted by pending pods that need whole GPUs; {free} GPUs here can be whole "
        f"with the {tenants} running tenants on one GPU each",
    )
    gain = hosted if ctx.replicas > 1 else 0.0  # a node already whole gains nothing by staying so
    return Proposal(None, 1, RULE_WHOLE, reasons, gain, {WHOLE_GPUS: hosted})


def _fmt(pending: MutableMapping[str, float], ctx: NodeContext) -> str:
    hostable = {resource_for_profile(p) for p in ctx.model.profiles}
    relevant = {r: v for r, v in pending.items() if v > 0 and r in hostable}
    return ", ".join(f"{r} {v:.1f}" for r, v in sorted(relevant.items())) or "none"


def _fmt_counts(counts: Counter[str]) -> str:
    return ", ".join(f"{r} x{n}" for r, n in sorted(counts.items())) or "nothing"
