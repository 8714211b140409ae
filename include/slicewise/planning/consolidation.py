"""Consolidation: move the pods of a node elsewhere so the node hosts what only it can, or holds nothing.

Placement scatters small pods over the nodes (Kubernetes' default profile spreads them), and a pod that needs
whole GPUs then waits although the fleet has the GPUs, in pieces. After every node has its plan, the planner
looks for **donors**: nodes their plans keep as they are (also when a change they proposed lost on the guard
rails), whose GPU pods may all be drained, and which, once
empty, would host pending requests the per-node plans left waiting — whole-GPU ones, or pinned ones (a GPU
model, a node label) — or, with
``planner_consolidation=nodes``, hold so little (at most ``planner_release_below`` of their GPUs, or
``planner_release_below_large`` on a node of ``LARGE_NODE_GPUS`` or more) that emptying them
lets a cluster autoscaler remove them (not nodes shared by MPS, nor nodes with a pod that started less than
``planner_release_min_pod_age_hours`` ago; and their pods move only to nodes that stay in use, not to one that
could be released in turn). A donor is consolidated only when every one of its pods fits
the room the other nodes have left under their own plans (the same placement the packing policy uses), and the
gain — whole-GPU requests hosted (twice their GPUs, as in packing), pinned smaller ones (their share, a GPU each: a pod
pinned to the one node of its model that other pods fill would otherwise wait there for days), or the node's
GPUs released (``RELEASE_WEIGHT`` each) — beats the pods' eviction cost (their share x
``planner_eviction_cost_s``) by the hysteresis. The plan is a ``change`` to the configuration the node already
has: the rollout cordons it, evicts its pods through the Eviction API (PodDisruptionBudgets respected, bare pods
never), and uncordons it, empty. A node that shares its GPUs by MPS is a donor too when, emptied **and with MPS
off**, it hosts such requests: the plan then also switches it to the device plugin's ``default`` config (the same
drain, then the label). Without that a node of a few fractional pods under MPS, the only one a pinned whole-GPU pod
may use, kept it waiting for weeks in the backtest (``gpuspec10`` with every GPU modelled as an A100: the shared
reserve had switched the fleet's one V100 node to MPS while it was empty; docs/backtest.md). A MIG node is not a
donor: its own plan weighs switching MIG off for whole-GPU requests, evicting its MIG pods.

Donors are tried without MPS first (an MPS donor takes tenants from the fractional pods, which the shared reserve
then makes again elsewhere: trying them in load order alone spent 5 % more node-GPU-hours on a `gpuspec10` sample
with the bin-packing profile), then least loaded first; the room they use is not offered twice, and a donor is no
receiver.

A pod moves only to a node its node selector allows (``GpuPod.node_selector``: a pin to a GPU product, say).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slicewise.catalog import Catalog
from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.planning import packing
from slicewise.planning.config import LARGE_NODE_GPUS, PlannerConfig
from slicewise.planning.demand import EPS, Pool, Request
from slicewise.planning.node import NodeContext, describe_pod
from slicewise.planning.packing import Candidate, Slot
from slicewise.planning.proposal import Proposal
from slicewise.planning.types import CHANGE, KEEP, DesiredState, NodePlan

OFF, WHOLE_GPUS_ONLY, NODES = "off", "whole-gpus", "nodes"
MODES = (OFF, WHOLE_GPUS_ONLY, NODES)
#: What a released GPU is worth per hour, against the hysteresis and the eviction cost.
RELEASE_WEIGHT = 1.0
RULE = "packing: consolidate: move this node's pods to room elsewhere"


def parse_modes(raw: str) -> tuple[str, ...]:
    """``all``, or comma-separated modes (duplicates dropped, order kept); ValueError naming an unknown one."""
    if raw.strip() == "all":
        return MODES
    modes = tuple(dict.fromkeys(m.strip() for m in raw.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(
            f"unknown consolidation {unknown or raw!r}; known: {', '.join(MODES)}, or 'all' alone"
        )
    return modes


@dataclass(frozen=True)
class Planned:
    """A node as the per-node pass left it: its context, its plan and the proposal behind it."""

    ctx: NodeContext
    plan: NodePlan
    proposal: Proposal


def consolidate(
    planned: Sequence[Planned],
    pool: Pool,
    steady: Mapping[Request, float],
    catalog: Catalog,
    config: PlannerConfig,
    now: datetime,
) -> dict[str, NodePlan]:
    """The plans that become consolidations, by node.

    Evicting pods is a cost paid at once, so a consolidation counts only on ``steady``: the requests that waited
    most of the last hour (the median), or whole-GPU ones still pending now under
    ``planner_whole_gpu_demand=pending-now`` (planner.whole_pending); never on more than the pool still holds."""
    pool = Pool((r, min(count, steady.get(r, 0.0))) for r, count in pool if r.whole or _pinned(r))
    if config.consolidation == OFF:
        return {}
    room = {item.ctx.name: _room(item, catalog) for item in planned if item.plan.action in (KEEP, CHANGE)}
    # A drain that only releases its node moves the pods to nodes that stay in use. Onto an empty node, or another
    # that could be released, it frees nothing: a spreading scheduler sends a pod to the emptiest node in use, and
    # the next plan drains that one in turn (on the public traces a few pods were evicted every hour for months).
    releasable = (
        {item.ctx.name for item in planned if _release_candidate(item, config, now)}
        if config.consolidation == NODES
        else set()
    )
    staying = {item.ctx.name for item in planned if item.ctx.obs.pods} - releasable
    out: dict[str, NodePlan] = {}
    received: set[str] = set()
    for item in sorted(planned, key=_donor_order):
        ctx = item.ctx
        if not _eligible(item, config, now) or ctx.name in received:
            continue  # a receiver of another donor's pods is no donor
        hosted = _requests_hosted(ctx, pool)
        value = sum(
            packing.value_of(r, 1.0, 1.0) * (packing.WHOLE_WEIGHT if r.whole else 1.0) * count
            for r, count in hosted.items()
        )
        held = _held(ctx)
        release = ctx.name in releasable
        if release:
            value += RELEASE_WEIGHT * ctx.gpus
        if value <= 0:
            continue
        receivers = {
            name: Counter(free)
            for name, free in room.items()
            if name != ctx.name and name not in out and (hosted or name in staying)
        }
        if not _fits_elsewhere(ctx, planned, receivers):
            continue
        cost = held * config.eviction_cost_s / 3600.0
        gain = value - cost
        if gain < config.min_gain_gpu_hours:
            continue
        received |= {name for name, free in receivers.items() if free != room[name]}
        room = receivers  # the room the moved pods take is gone; the donor receives nothing
        pool.take(hosted)
        out[ctx.name] = _plan(item, hosted, held, gain, release, config, catalog)
    return out


def _release_share(config: PlannerConfig, gpus: int) -> float:
    """The share of its ``gpus`` a node's pods may hold at most for ``planner_consolidation=nodes`` to empty it."""
    return config.release_below_large if gpus >= LARGE_NODE_GPUS else config.release_below


def _release_candidate(item: Planned, config: PlannerConfig, now: datetime) -> bool:
    """A node ``planner_consolidation=nodes`` may drain to release: kept by its plan, with pods that may all be
    drained and hold at most ``planner_release_below`` of its GPUs (``planner_release_below_large`` on a node of
    ``LARGE_NODE_GPUS`` or more), and not shared by MPS (its fractional pods would
    go to a free MPS tenant, which the shared reserve keeps on empty nodes: on the public traces some were evicted
    every hour from one such node to the next)."""
    ctx = item.ctx
    return (
        ctx.replicas == 1
        and item.plan.action != CHANGE
        and bool(ctx.obs.pods)
        and all(pod.may_drain for pod in ctx.obs.pods)
        and _held(ctx) <= _release_share(config, ctx.gpus) * ctx.gpus
        and all(
            pod.started_at is None
            or now - pod.started_at >= timedelta(hours=config.release_min_pod_age_hours)
            for pod in ctx.obs.pods
        )
    )


def _room(item: Planned, catalog: Catalog) -> Counter[Slot]:
    """The slots a node has left under its plan, once its running pods and the requests it plans to host sit.

    Under the configuration it proposed, also when its plan keeps it because that proposal lost on the guard
    rails: optimistic (the room may not appear, and moved pods then wait for the scheduler to find them room,
    which the backtest charges), but offering only the kept configuration's room was measured worse: the mean
    wait on `default` with the bin-packing profile went from +3 % to +110 % of static's (docs/backtest.md)."""
    desired = item.plan.desired
    config = desired.mig_config or "all-disabled"
    candidate = Candidate(
        catalog.layout_of(config, item.ctx.model.name),
        catalog.mps_replicas(desired.device_plugin_config or "default"),
        catalog.mig_config(config).split,
    )
    hosting = (
        Pool(item.proposal.hosted.items())
        if item.plan.action == CHANGE or desired == item.plan.current
        else Pool()
    )
    return packing.place(item.ctx, candidate, hosting, packing.tenant_value(item.ctx)).free


def _donor_order(item: Planned) -> tuple[bool, float, str]:
    """Nodes without MPS first (drained as they are, they leave the MPS tenants to the fractional pods), then the
    least loaded, then by name."""
    return (item.ctx.replicas != 1, _held(item.ctx), item.ctx.name)


def _held(ctx: NodeContext) -> float:
    """GPU-equivalents the node's running pods hold."""
    tenant = packing.tenant_value(ctx)
    return sum(packing.value_of(r, 1.0, tenant) for pod in ctx.obs.pods for r in packing.pod_requests(pod))


def _eligible(item: Planned, config: PlannerConfig, now: datetime) -> bool:
    """A donor: kept by its own plan (also when a change it proposed lost on the guard rails: a node of fractional
    pods on whole GPUs gains nothing by sharing them alone, so its proposal of MPS loses on the hysteresis, and it
    is drained as it is), with pods that may all be drained, and out of its dwell time."""
    ctx, plan = item.ctx, item.plan
    if plan.action != KEEP or not ctx.obs.pods:
        return False
    if not all(pod.may_drain for pod in ctx.obs.pods):
        return False
    changed = ctx.last_change()
    return changed is None or now - changed >= timedelta(hours=config.dwell_hours)


def _pinned(request: Request) -> bool:
    """A request only some nodes may host (GPU models or node labels): left waiting, it waits for those."""
    return bool(request.models or request.selector)


def _requests_hosted(ctx: NodeContext, pool: Pool) -> dict[Request, float]:
    """The pending requests the node would host once empty: those that need whole GPUs, then pinned smaller ones,
    one GPU each. A node under MPS counts only those it hosts once MPS is off: those that need whole GPUs, and
    pinned ones larger than its tenants, which wait for days otherwise (docs/planner.md, "Consolidation"); not a
    pinned one a tenant holds (it would take a whole GPU where the evicted tenants shared one). None on a MIG node
    (its own plan weighs switching MIG off, which its MIG pods never survive)."""
    if ctx.layout is not None:
        return {}
    free = ctx.gpus
    hosted: dict[Request, float] = {}
    for request, count in pool:
        if (
            (ctx.replicas != 1 and not request.whole and request.fits(GPU_RESOURCE, 1.0 / ctx.replicas))
            or not request.fits(GPU_RESOURCE, 1.0)  # a named MIG profile: no whole GPU hosts it
            or not request.allows(ctx.model.name, packing.labels_under(ctx.obs.node, 1))
            or request.gpus > free
        ):
            continue
        take = min(count, float(free // request.gpus))
        if take > EPS:
            hosted[request] = take
            free -= round(take * request.gpus)
    return hosted


def _fits_elsewhere(
    ctx: NodeContext, planned: Sequence[Planned], receivers: dict[str, Counter[Slot]]
) -> bool:
    """Place every request of the node's pods in ``receivers`` (changed in place); False if one finds no room."""
    nodes = {item.ctx.name: item.ctx for item in planned}
    for pod in ctx.obs.pods:
        for request in packing.pod_requests(pod):
            for name in sorted(receivers, key=lambda n: (-_used(receivers[n]), n)):
                node = nodes[name]
                if (
                    request.allows(node.model.name)
                    and pod.may_run_on(node.obs.node.labels)
                    and packing.take_slot(receivers[name], request) is not None
                ):
                    break
            else:
                return False
    return True


def _used(free: Counter[Slot]) -> float:
    """Fewer free GPU-equivalents first: pods move to the fullest nodes, as a bin-packing scheduler sends them."""
    return -sum(share * count for (_, share), count in free.items())


def _plan(
    item: Planned,
    hosted: dict[Request, float],
    held: float,
    gain: float,
    release: bool,
    config: PlannerConfig,
    catalog: Catalog,
) -> NodePlan:
    pods = tuple(describe_pod(pod) for pod in item.ctx.obs.pods)
    reasons = [f"{len(pods)} pods holding {held:.2f} GPU-eq fit the room other nodes keep under their plans"]
    desired = item.plan.current  # drained as it is, whatever its own proposal was
    if hosted:
        asked = ", ".join(f"{count:g} x {r.label}" for r, count in hosted.items())
        reasons.append(f"emptied, it hosts pending pods that need whole GPUs or may run only here: {asked}")
        desired = _whole_gpus(item.ctx, catalog)
        if desired != item.plan.current:
            reasons.append(f"MPS off for them: {desired.describe()}")
    if release:
        reasons.append(f"emptied, its {item.ctx.gpus} GPUs can be released (planner_consolidation=nodes)")
    reasons.append(
        f"eviction cost {held * config.eviction_cost_s / 3600:.2f} GPU-h; net gain {gain:.2f} GPU-h/h"
    )
    served = packing.served_by_label(hosted)
    return dataclasses.replace(
        item.plan,
        desired=desired,
        action=CHANGE,
        rule=RULE,
        reasons=(*item.plan.reasons, *reasons),
        gain_gpu_hours=gain,
        disruption=pods,
        pending_served=served,
    )


def _whole_gpus(ctx: NodeContext, catalog: Catalog) -> DesiredState:
    """The node's configuration without MPS tenants (MIG stays off: only nodes without MIG host whole GPUs here)."""
    if ctx.replicas == 1:
        return ctx.current
    return DesiredState(ctx.current.mig_config, catalog.device_plugin_config_for(1))
