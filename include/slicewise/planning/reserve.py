"""The shared reserve: empty nodes switched to MPS ahead of fractional demand, so that a fractional pod finds a tenant
when it arrives instead of a whole GPU it strands for its whole run.

The per-node pass makes MPS nodes for fractional requests that already wait, and only where every running pod fits
the new mode; on a busy fleet of nodes that each hold some whole-GPU pods, fractional pods then run on whole GPUs.
On the public traces a node was in MPS mode in about 1 % of the hours while 3-4 fractional pods ran on whole GPUs,
stranding about 2 GPUs; with this reserve the backtest's wait goal holds on 74 of 80 samples and fleets instead of
61, at a price in node-GPU-hours on some (docs/backtest.md, "One sample is weak evidence"). The reserve is sized to
the fractional pods of at most ``1 / RESERVE_REPLICAS`` of a GPU that run or wait now and may run on the node:
``planner_shared_reserve`` times as many tenants (0 turns it off), but one per pod where a fractional pod that may
not be evicted runs and whole-GPU pods run or wait: a reserve node such a pod takes as a tenant goes back to whole
GPUs only once it ends, and a reserve twice the pods left whole-GPU pods waiting on the public traces when only
their best-effort pods could move (docs/backtest.md, "Pods that may not be evicted"). Where the fleet's MPS nodes
have fewer tenants, nodes with no GPU pod and whole GPUs (MIG disabled, no MPS) are switched to
``RESERVE_REPLICAS`` tenants per GPU, smallest first, none with more GPUs than the missing tenants need unless it
has at most ``SMALL_NODE_GPUS`` (large nodes stay whole for pods that need several GPUs), and at most half the GPUs
of any one kind of node — its GPU model and its values of the node labels that pods' selectors name (a whole-GPU
pod pinned to a model or a label has only those nodes) —: nothing is evicted. Never while a whole-GPU request has
waited most of the last hour (whole GPUs come first; the per-node pass switches an empty reserve node back for it)
or in a run that consolidates a node, never inside a node's dwell time, and within the hourly change budget like
every change.

An empty MPS node stays one: the per-node pass keeps a node's configuration when no other hosts more. Fractional
pods use the reserve when they prefer MPS nodes — a preferred node affinity on
``nvidia.com/gpu.sharing-strategy=mps`` (docs/planner.md) — else the scheduler may still put them on whole GPUs.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from slicewise.catalog import Catalog
from slicewise.catalog.resources import GPU_RESOURCE
from slicewise.cluster.base import GpuPod
from slicewise.planning import packing
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE as CONSOLIDATED
from slicewise.planning.consolidation import Planned
from slicewise.planning.demand import EPS, Pool, Request
from slicewise.planning.types import CHANGE, KEEP, DesiredState, NodePlan

#: MPS tenants per GPU of a reserve node: half a GPU each, which most fractional pods of the public traces fit
#: (0.44-0.47 of a GPU), two to a GPU.
RESERVE_REPLICAS = 2
#: A node of at most this many GPUs may join the reserve even when fewer tenants are missing than it brings.
SMALL_NODE_GPUS = 2
RULE = "packing: shared reserve: MPS tenants ready for the fractional pods to come"
#: The well-known label of a node's own name (a pod pinned to one node).
HOSTNAME_LABEL = "kubernetes.io/hostname"
STUCK_NOTE = (
    " (one per pod, not planner_shared_reserve's: fractional pods that may not be evicted run, and so do whole-GPU"
    " pods, which a reserve node those pods hold cannot be given back to)"
)


def reserve(
    planned: Sequence[Planned],
    plans: Mapping[str, NodePlan],
    pool: Pool,
    steady: Mapping[Request, float],
    catalog: Catalog,
    config: PlannerConfig,
    now: datetime,
) -> dict[str, NodePlan]:
    """The plans that switch an empty node to the reserve, by node (``plans``: every node's plan so far)."""
    if config.shared_reserve <= 0:
        return {}
    if any(request.whole and count > EPS for request, count in steady.items()):
        return {}  # whole GPUs come first
    if any(plan.rule == CONSOLIDATED for plan in plans.values()):
        return {}  # the pods it moves are placed on the room other nodes keep, empty nodes among them
    tenant = 1.0 / RESERVE_REPLICAS
    running = [
        pod
        for item in planned
        for pod in item.ctx.obs.pods
        if any(_fits_tenant(request, tenant) for request in packing.pod_requests(pod))
    ]
    pending = [(request, count) for request, count in pool if _fits_tenant(request, tenant)]
    factor = _factor(planned, running, pool, config)
    # MPS tenants in the fleet, and per kind of node its GPUs and those under MPS. A pod pinned to a model (a
    # gpu_spec, a product nodeSelector) or to another node label that needs a whole GPU has only that kind's
    # nodes: the reserve leaves at least half of them whole.
    keys = _pinned_label_keys(planned, pool)
    kind_of = {item.ctx.name: _kind(item, keys) for item in planned}
    have = 0
    gpus_of: Counter[tuple[str, ...]] = Counter()
    shared_of: Counter[tuple[str, ...]] = Counter()
    for item in planned:
        per_gpu = _tenants_per_gpu(plans[item.ctx.name], catalog)
        have += item.ctx.gpus * per_gpu
        gpus_of[kind_of[item.ctx.name]] += item.ctx.gpus
        if per_gpu:
            shared_of[kind_of[item.ctx.name]] += item.ctx.gpus
    out: dict[str, NodePlan] = {}
    for item in sorted(planned, key=lambda item: (item.ctx.gpus, item.ctx.name)):
        if not _switchable(item, plans[item.ctx.name], config, now):
            continue
        # The pods that could use this node's tenants: what their node selectors and GPU models allow there
        # once it is shared (GPU feature discovery renames the product, sets the sharing labels).
        labels = packing.labels_under(item.ctx.obs.node, RESERVE_REPLICAS)
        small = sum(1 for pod in running if pod.may_run_on(labels)) + sum(
            count for request, count in pending if request.allows(item.ctx.model.name, labels)
        )
        wanted = math.ceil(factor * small - EPS)
        if have >= wanted:
            continue
        if item.ctx.gpus > max(SMALL_NODE_GPUS, math.ceil((wanted - have) / RESERVE_REPLICAS)):
            continue  # more GPUs than the missing tenants need: a large node stays whole for whole-GPU pods
        kind = kind_of[item.ctx.name]
        if (shared_of[kind] + item.ctx.gpus) * 2 > gpus_of[kind]:
            continue  # half of this kind's GPUs are shared already (or would be): the rest stay whole
        tenants = item.ctx.gpus * RESERVE_REPLICAS
        filled = max(0, min(tenants, math.floor(small) - have))
        desired = DesiredState(
            item.ctx.current.mig_config, catalog.device_plugin_config_for(RESERVE_REPLICAS)
        )
        out[item.ctx.name] = dataclasses.replace(
            plans[item.ctx.name],
            desired=desired,
            action=CHANGE,
            rule=RULE,
            reasons=(
                *plans[item.ctx.name].reasons,
                f"{small:g} fractional pods of at most {tenant:g} GPU that may run here run or wait; the reserve "
                f"is {factor:g} x as many tenants ({wanted}), the MPS nodes have {have}"
                + ("" if factor == config.shared_reserve else STUCK_NOTE),
                f"no GPU pod here: switched to {RESERVE_REPLICAS} MPS tenants per GPU, nothing evicted",
            ),
            # A fractional pod on a tenant rather than a whole GPU leaves the rest of that GPU to others.
            gain_gpu_hours=filled * (1.0 - tenant),
            disruption=(),
            pending_served={},
        )
        have += tenants
        shared_of[kind] += item.ctx.gpus
    return out


def _factor(
    planned: Sequence[Planned], running: Sequence[GpuPod], pool: Pool, config: PlannerConfig
) -> float:
    """``planner_shared_reserve``, at most 1 where a fractional pod that may not be evicted runs and whole-GPU pods
    run or wait: a reserve node such pods take as tenants goes back to whole GPUs only once they all end. A pod
    that holds ``nvidia.com/gpu`` on a node without MPS and declares no share counts as a whole-GPU pod."""
    if config.shared_reserve <= 1 or all(pod.evictable for pod in running):
        return config.shared_reserve
    whole_running = any(
        request.whole
        or (item.ctx.replicas == 1 and request.resource == GPU_RESOURCE and request.size is None)
        for item in planned
        for pod in item.ctx.obs.pods
        for request in packing.pod_requests(pod)
    )
    whole_pending = any(request.whole and count > EPS for request, count in pool)
    return 1.0 if whole_running or whole_pending else config.shared_reserve


def _pinned_label_keys(planned: Sequence[Planned], pool: Pool) -> tuple[str, ...]:
    """The node labels that running pods' node selectors and pending requests' selectors name, other than those a
    plan rewrites (the product, the sharing labels: the GPU model stands for them) and the node's own name (a kind
    of one node each would keep every node out of the reserve)."""
    keys = {key for item in planned for pod in item.ctx.obs.pods for key in pod.node_selector}
    keys |= {key for request, _ in pool for key, _ in request.selector}
    return tuple(sorted(keys - {*packing.PLANNED_LABELS, HOSTNAME_LABEL}))


def _kind(item: Planned, keys: Sequence[str]) -> tuple[str, ...]:
    """What a pinned pod tells the node by: its GPU model and its values of the labels pods pin on."""
    labels = item.ctx.obs.node.labels
    return (item.ctx.model.name, *(labels.get(key, "") for key in keys))


def _tenants_per_gpu(plan: NodePlan, catalog: Catalog) -> int:
    """MPS tenants per GPU once the node's plan is carried out (a kept plan's ``desired`` may be a proposal that
    lost on the guard rails); 0 without MPS."""
    state = plan.desired if plan.action == CHANGE else plan.current
    replicas = catalog.mps_replicas(state.device_plugin_config or "default")
    return replicas if replicas > 1 else 0


def _fits_tenant(request: Request, tenant: float) -> bool:
    return not request.whole and request.size is not None and request.size <= tenant + EPS


def _switchable(item: Planned, plan: NodePlan, config: PlannerConfig, now: datetime) -> bool:
    """An empty node of whole GPUs that its plan keeps as it is, for no pending request, out of its dwell time,
    whose model allows the reserve's tenants."""
    ctx = item.ctx
    if plan.action != KEEP or plan.desired != ctx.current or ctx.obs.pods or item.proposal.hosted:
        return False  # busy, changing, or kept to host pending requests as it is
    if ctx.layout is not None or ctx.replicas != 1 or ctx.model.mps_max_replicas < RESERVE_REPLICAS:
        return False
    changed = ctx.last_change()
    return changed is None or now - changed >= timedelta(hours=config.dwell_hours)
