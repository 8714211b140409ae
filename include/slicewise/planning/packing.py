"""The ``packing`` policy (default): the node configuration that hosts running and forecast pending requests with
the least stranded capacity and the fewest disruptions.

Every configuration the node's GPU model allows is a candidate: each named MIG layout (MIG on), with
``split_layouts`` each per-GPU split config for the node's size (a layout on the first half of the GPUs, the rest
whole), and MIG off with whole GPUs or MPS with each shipped replica count (a model without MIG has only the
latter). For each, the node's running pods are placed first, then the pool's pending requests
(:mod:`slicewise.planning.demand`), largest first, each on the smallest free slot that hosts it. The score is

    - requests hosted  +  unusable compute  +  stranded / 4  +  2 x running pods that lose their place
    (+ a change penalty)

in GPU-equivalents: a request counts its share of a GPU (its declared share, its MIG profile's g / compute slices,
whole GPUs — twice for a pending one, ``WHOLE_WEIGHT`` —, or for a plain ``nvidia.com/gpu`` tenant the forecast
load per tenant, else ``UNDECLARED_TENANT``); unusable compute is what no MIG instance of the layout covers (e.g.
the seventh slice of 3 x 2g); stranded capacity is what the slots hosting requests of a declared share leave unused
(a 0.46 request on a whole GPU strands 0.54). A change of MIG layout, or MIG switched on or off, must win by
``change_penalty_gpu_hours``; a change of MPS replicas only needs to pass the hysteresis. MPS candidates are
capped so the tenants' forecast load and memory per GPU stay under ``mps_target_util``. Ties go to the current
configuration, then to fewer tenants.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from slicewise.catalog import Catalog, Layout, resource_for_profile
from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import (
    GPU_PRODUCT_LABEL,
    REPLICAS_LABEL,
    SHARING_STRATEGY_LABEL,
    GpuNode,
    GpuPod,
    selector_allows,
    sharing_labels,
)
from slicewise.planning.config import PlannerConfig
from slicewise.planning.demand import EPS, Pool, Request, request_for
from slicewise.planning.node import NodeContext
from slicewise.planning.proposal import Proposal

RULE_MIG = (
    "packing: the layout that hosts running and forecast pending requests with the least stranded capacity"
)
RULE_MPS = (
    "packing: MPS tenants for the pending requests their share fits, while P90 load and memory fit the target"
)
RULE_WHOLE = "packing: GPUs stay whole for pending pods that need whole GPUs"
RULE_PLAIN = "packing: whole GPUs host the running and pending requests best"
LOST_WEIGHT = 2.0  # a running pod losing its place weighs twice a pending request gained
#: The work assumed of a GPU tenant whose share and load nobody knows (a quarter of a GPU): less than the whole
#: GPU a pod that needs one would use, so whole-GPU demand comes first.
UNDECLARED_TENANT = 0.25
#: A pending request for whole GPUs counts this many times its GPUs: no tenant or MIG instance can host it, so
#: whole GPUs go to it before they are cut for requests that have other forms.
WHOLE_WEIGHT = 2.0
#: Capacity a slot hosting a declared share leaves unused counts a quarter against the candidate: enough to prefer
#: a 1/2 tenant to a whole GPU for a 0.46 request, never enough to prefer leaving the request waiting.
STRANDED_WEIGHT = 0.25

Slot = tuple[str, float]  # (extended resource, share of a GPU)


@dataclass(frozen=True)
class Candidate:
    layout: Layout | None  # None = MIG disabled
    replicas: int  # MPS tenants per GPU (1 = whole GPUs)
    split: tuple[int, int] | None = None  # (k, n): ``layout`` on the first k of n GPUs, the rest whole


@dataclass
class Placement:
    served: float  # GPU-equivalents of running and pending requests hosted
    unusable: float
    stranded: float  # GPU-equivalents of the slots hosting declared shares that the shares leave unused
    lost: float  # GPU-equivalents of running pods without a place
    pending: dict[Request, float]  # pending requests hosted
    whole_served: float  # GPUs of whole-GPU pending requests hosted
    free: Counter[Slot]  # slots left once all of that is placed


def plan(ctx: NodeContext, catalog: Catalog, config: PlannerConfig, pool: Pool) -> Proposal:
    current = Candidate(ctx.layout, ctx.replicas, ctx.split)
    cap, reasons = _mps_cap(ctx, config)
    candidates = [current, *(c for c in _candidates(ctx, catalog, cap, config.split_layouts) if c != current)]
    value = tenant_value(ctx)
    placements = {c: place(ctx, c, pool, value) for c in candidates}

    def score(candidate: Candidate) -> tuple[float, int, int]:
        placed = placements[candidate]
        changes_mig = (candidate.layout, candidate.split) != (current.layout, current.split)
        penalty = config.change_penalty_gpu_hours if changes_mig else 0.0
        rank = (
            -placed.served + placed.unusable + STRANDED_WEIGHT * placed.stranded + LOST_WEIGHT * placed.lost
        )
        rank += penalty
        return (round(rank, 9), 0 if candidate == current else 1, candidate.replicas)

    best = min(candidates, key=score)
    placed, now = placements[best], placements[current]
    overload = _overload(ctx, config, best, cap)
    gain = max(0.0, placed.served - now.served) + overload
    reasons += [
        f"forecast pending requests: {pool.describe()}",
        f"running pods request {_fmt_counts(ctx.requests())}",
        f"{_describe(current)} hosts {now.served:.2f} GPU-eq; {_describe(best)} {placed.served:.2f}"
        + (f", unusable compute {placed.unusable:.2f}" if placed.unusable > EPS else ""),
    ]
    if placed.lost > EPS:
        reasons.append(
            f"running pods losing their place: {placed.lost:.2f} GPU-eq (they are evicted and requeue)"
        )
    if overload:
        reasons.append(f"tenants' P90 load exceeds the target by {overload:.2f} GPU-eq: fewer tenants")
    served = placed.pending if best != current else now.pending
    return Proposal(
        best.layout,
        best.replicas,
        _rule(best, placed),
        tuple(reasons),
        gain,
        served_by_label(served),
        served,
        best.split,
        sum(now.pending.values()),
    )


def _candidates(ctx: NodeContext, catalog: Catalog, cap: int, splits: bool) -> list[Candidate]:
    out = []
    for _, layout in sorted(catalog.configs_for(ctx.model.name).items()):
        if layout:  # MIG on with at least one instance
            out.append(Candidate(layout, 1))
    if splits:
        for layout, split in catalog.splits_for(ctx.model.name, ctx.gpus).values():
            out.append(Candidate(layout, 1, split))
    out.append(Candidate(None, 1))
    for name in catalog.device_plugin_configs:
        replicas = catalog.mps_replicas(name)
        if 1 < replicas <= min(cap, ctx.model.mps_max_replicas):
            out.append(Candidate(None, replicas))
    return list(dict.fromkeys(out))


def _undeclared_tenants(ctx: NodeContext) -> int:
    """Running ``nvidia.com/gpu`` pods without a declared share on a MIG-disabled node: their forecast load, not
    their share, says how many fit a GPU (a declared share is its own limit)."""
    if ctx.layout is not None:
        return 0
    return sum(pod.requests.get(GPU_RESOURCE, 0) for pod in ctx.obs.pods if pod.share is None)


def _mps_cap(ctx: NodeContext, config: PlannerConfig) -> tuple[int, list[str]]:
    """The most MPS tenants per GPU the tenants' forecast load and memory allow (the model's limit if unknown)."""
    tenants = _undeclared_tenants(ctx)
    load = sum(f.upper for f in ctx.forecasts)
    memory = sum(0.0 if math.isnan(f.memory) else f.memory for f in ctx.forecasts)
    cap = ctx.model.mps_max_replicas
    reasons = []
    if tenants and load > 0:
        cap = min(cap, max(1, math.floor(config.mps_target_util / (load / tenants))))
        reasons.append(
            f"{tenants} GPU tenants, P90 load {load:.2f} over {ctx.gpus} GPUs: at most {cap} tenants per GPU "
            f"under {config.mps_target_util:.0%}"
        )
    if tenants and memory > 0:
        cap = min(cap, max(1, math.floor(1.0 / (memory / tenants))))
    if ctx.multi_gpu_pods():
        reasons.append("a pod requests more than one GPU: MPS would refuse it")
    return cap, reasons


def _overload(ctx: NodeContext, config: PlannerConfig, best: Candidate, cap: int) -> float:
    """GPU-equivalents of load over the target relieved by going down to ``best``'s tenants (0 otherwise)."""
    if ctx.layout is not None or ctx.replicas <= cap or best.replicas >= ctx.replicas:
        return 0.0
    load = sum(f.upper for f in ctx.forecasts)
    return max(0.0, load - config.mps_target_util * ctx.gpus)


def tenant_value(ctx: NodeContext) -> float:
    """What a plain ``nvidia.com/gpu`` request (no declared share) is worth: the forecast load per tenant of the
    node's tenants, else ``UNDECLARED_TENANT``. Not the share a slot gives it: capacity is the same however it is
    cut, and what a change buys is requests that run instead of waiting."""
    tenants = _undeclared_tenants(ctx)
    load = sum(f.upper for f in ctx.forecasts)
    if tenants and load > 0:
        return load / tenants
    return UNDECLARED_TENANT


def slots_of(ctx: NodeContext, candidate: Candidate) -> tuple[Counter[Slot], float]:
    """Free slots of the whole node under ``candidate``, and its compute no MIG instance covers."""
    if candidate.layout is None:
        share = 1.0 / candidate.replicas
        return Counter({(GPU_RESOURCE, share): ctx.gpus * candidate.replicas}), 0.0
    mig_gpus = ctx.gpus if candidate.split is None else candidate.split[0]
    slots: Counter[Slot] = Counter()
    if mig_gpus < ctx.gpus:
        slots[(GPU_RESOURCE, 1.0)] = ctx.gpus - mig_gpus
    covered = 0.0
    for profile, count in candidate.layout:
        share = ctx.model.profile(profile).g / ctx.model.compute_slices
        slots[(resource_for_profile(profile), share)] += count * mig_gpus
        covered += share * count
    return slots, max(0.0, mig_gpus * (1.0 - covered))


def pod_requests(pod: GpuPod) -> list[Request]:
    """The requests a running pod holds, one per slot it needs."""
    out = []
    for resource, count in pod.requests.items():
        if resource == GPU_RESOURCE and count > 1:
            out.append(request_for(resource, pod.share, gpus=count))
        else:
            out += [request_for(resource, pod.share)] * count
    return out


def value_of(request: Request, share: float, tenant: float) -> float:
    if request.whole:
        return float(request.gpus)
    if request.size is not None:
        return request.size
    return tenant if request.resource == GPU_RESOURCE else share


#: The node labels a plan changes (GPU feature discovery rewrites them with the sharing configuration).
PLANNED_LABELS = (SHARING_STRATEGY_LABEL, REPLICAS_LABEL, GPU_PRODUCT_LABEL)


def labels_under(node: GpuNode, replicas: int) -> dict[str, str]:
    """A node's labels once it shares its GPUs among ``replicas`` MPS tenants (1: not at all), as GPU feature
    discovery writes them: the sharing strategy, the replica count, and the product with ``-SHARED`` while
    shared. What a pod's nodeSelector on them is matched with."""
    labels = {GPU_PRODUCT_LABEL: node.gpu_product, **node.labels} if node.gpu_product else dict(node.labels)
    return {**labels, **sharing_labels(labels.get(GPU_PRODUCT_LABEL, ""), replicas)}


def keeps_to(pod: GpuPod, labels: Mapping[str, str]) -> bool:
    """Whether the pod's nodeSelector on the labels a plan changes still matches ``labels`` (others do not
    change with a plan)."""
    return selector_allows(((k, v) for k, v in pod.node_selector.items() if k in PLANNED_LABELS), labels)


def place(ctx: NodeContext, candidate: Candidate, pool: Pool, tenant: float) -> Placement:
    """Running pods first, then ``pool``'s requests, largest first, each on the smallest free slot that hosts it.

    A pod or request whose nodeSelector names a label the candidate rewrites (sharing strategy, replica count,
    product: :func:`labels_under`) fits only a candidate that gives the node those labels (a running pod that
    would no longer fit is lost)."""
    free, unusable = slots_of(ctx, candidate)
    labels = labels_under(ctx.obs.node, candidate.replicas)
    served = lost = whole_served = stranded = 0.0
    for pod in ctx.obs.pods:
        pinned_out = not keeps_to(pod, labels)
        for request in pod_requests(pod):
            if pinned_out:
                lost += value_of(request, 0.0, tenant)
                continue
            share = take_slot(free, request)
            if share is None:
                lost += value_of(request, 0.0, tenant)
            else:
                served += value_of(request, share, tenant)
                stranded += _slack(request, share)
    hosted: dict[Request, float] = {}
    for request, count in pool:
        if not request.allows(ctx.model.name, labels):
            continue
        units = 0.0
        while units < count - EPS:
            share = take_slot(free, request)
            if share is None:
                break
            step = min(1.0, count - units)
            units += step
            served += step * value_of(request, share, tenant) * (WHOLE_WEIGHT if request.whole else 1.0)
            stranded += step * _slack(request, share)
            if request.whole:
                whole_served += step * request.gpus
        if units > EPS:
            hosted[request] = units
    return Placement(served, unusable, stranded, lost, hosted, whole_served, free)


def _slack(request: Request, share: float) -> float:
    """What a slot of ``share`` leaves unused under a request of known size (0 when the size is not known)."""
    if request.whole or request.size is None:
        return 0.0
    return max(0.0, share - request.size)


def take_slot(free: Counter[Slot], request: Request) -> float | None:
    """Take the smallest free slot(s) that host one of ``request``; the share of each, or None."""
    if request.whole:
        key = (GPU_RESOURCE, 1.0)
        if free.get(key, 0) >= request.gpus:
            free[key] -= request.gpus
            return 1.0
        return None
    fitting = [slot for slot, n in free.items() if n > 0 and request.fits(*slot)]
    if not fitting:
        return None
    slot = min(fitting, key=lambda s: (s[1], s[0]))
    free[slot] -= 1
    return slot[1]


def _rule(best: Candidate, placed: Placement) -> str:
    if best.layout is not None:
        return RULE_MIG
    if best.replicas > 1:
        return RULE_MPS
    return RULE_WHOLE if placed.whole_served > EPS else RULE_PLAIN


def _describe(candidate: Candidate) -> str:
    if candidate.layout is not None:
        mig = "MIG " + " + ".join(f"{n} x {p}" for p, n in candidate.layout)
        if candidate.split is not None:
            mig_gpus, gpus = candidate.split
            return f"{mig} on {mig_gpus} of {gpus} GPUs, {gpus - mig_gpus} whole"
        return mig
    return "whole GPUs" if candidate.replicas == 1 else f"MPS {candidate.replicas} tenants per GPU"


def served_by_label(served: dict[Request, float]) -> dict[str, float]:
    """Pending requests served, by how plans name them (whole-GPU requests in GPUs)."""
    out: dict[str, float] = {}
    for request, count in served.items():
        amount = count * request.gpus if request.whole else count
        out[request.label] = out.get(request.label, 0.0) + amount
    return out


def _fmt_counts(counts: Counter[str]) -> str:
    return ", ".join(f"{r} x{n}" for r, n in sorted(counts.items())) or "nothing"
