"""Plan the fleet: every managed node gets a verdict (change, keep, blocked, cordon-to-drain, uncordon, skip) and
why.

Order of decisions per node: can it be planned at all (known model and layout, not mid-reconfiguration, not
cordoned but by Slicewise's hold) -> the policy's proposal -> guard rails: nothing to change, forecaster not
trusted, hysteresis (gain below the minimum), dwell time, non-evictable GPU pods -> across the fleet
(``packing``): consolidation, then the shared reserve -> the hourly change budget keeps the changes with the
highest gain -> a node Slicewise holds keeps or lifts its hold (:mod:`slicewise.planning.holds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from slicewise.catalog import Catalog
from slicewise.cluster.base import STANDBY_TAINTS, GpuNode
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning import packing, thresholds
from slicewise.planning.config import PlannerConfig
from slicewise.planning.consolidation import RULE as CONSOLIDATED
from slicewise.planning.consolidation import Planned, consolidate
from slicewise.planning.demand import EPS, Pool, Request, request_for
from slicewise.planning.holds import settle
from slicewise.planning.node import NodeContext, NotPlannable, describe_pod, node_context
from slicewise.planning.pinned import Pinned, pinned
from slicewise.planning.proposal import Proposal
from slicewise.planning.rehome import note as rehome_note
from slicewise.planning.rehome import rehome
from slicewise.planning.reserve import reserve
from slicewise.planning.shaped import kept_from_scale_down
from slicewise.planning.standby import Standby, standby
from slicewise.planning.types import (
    BLOCKED,
    CHANGE,
    DRAIN,
    KEEP,
    SKIP,
    DesiredState,
    FleetPlan,
    NodeObservation,
    NodePlan,
    Pin,
    shown_names,
)

WITHOUT_MIG = "GPUs without MIG, and planner_gpus_without_mig=false: left alone"


def plan_fleet(
    observations: Sequence[NodeObservation],
    forecasts: Forecasts,
    catalog: Catalog,
    config: PlannerConfig,
    now: datetime,
    remembered: Sequence[Pin] = (),
) -> FleetPlan:
    """The plan for every observed node; pure: same inputs, same plan (``remembered``: the previous plan's
    ``pins``)."""
    pool = demand_pool(forecasts, config.whole_gpu_demand)
    notes = []
    acting = forecasts.trusted or config.fallback == "baseline"
    if not forecasts.trusted:
        notes.append(
            f"forecaster not trusted ({forecasts.why_untrusted or 'no reason given'}); "
            + (
                "acting on " + forecasts.predictor
                if acting
                else "recommending no change (planner_fallback=none)"
            )
        )
    by_node: dict[str, list[SeriesForecast]] = {}
    for series in forecasts.series:
        by_node.setdefault(series.hostname, []).append(series)
    plans = []
    planned: list[Planned] = []
    idle_proposals: dict[tuple[object, ...], Proposal] = {}
    # Nodes in name order: the pending pool is handed out deterministically.
    for obs in sorted(observations, key=lambda o: o.node.name):
        try:
            ctx = node_context(obs, by_node.get(obs.node.name, []), catalog)
        except NotPlannable as why:
            plans.append(_skipped(obs, config, str(why)))
            continue
        if not ctx.model.mig and not config.plan_gpus_without_mig:
            plans.append(_skipped(obs, config, WITHOUT_MIG))
            continue
        key = _idle_key(ctx, pool)
        proposal = idle_proposals.get(key) if key else None
        if proposal is None:
            proposal = _propose(ctx, catalog, config, pool)
            if key:
                idle_proposals[key] = proposal
        plan = _guard(ctx, proposal, catalog, config, now, acting, forecasts)
        if plan.action == CHANGE or plan.desired == plan.current:  # demand this node will host
            pool.take(dict(proposal.hosted))
        plans.append(plan)
        if not obs.node.held:  # a cordoned node takes no pod: out of the fleet-wide rules (planning.holds)
            planned.append(Planned(ctx, plan, proposal))
    if config.policy == "packing" and acting:
        steady = steady_demand(forecasts, config.whole_gpu_demand)
        moved = consolidate(planned, pool, steady, catalog, config, now)
        plans = [moved.get(plan.node, plan) for plan in plans]
        shared = reserve(planned, {plan.node: plan for plan in plans}, pool, steady, catalog, config, now)
        plans = [shared.get(plan.node, plan) for plan in plans]
    nodes = {obs.node.name: obs.node for obs in observations}
    budgeted = [settle(plan, nodes[plan.node]) for plan in _apply_budget(plans, config, nodes)]
    final = {plan.node: plan for plan in budgeted}
    shaping = config.policy == "packing" and acting
    # Where every GPU pod may be evicted, a consolidation takes a pinned node back for a pinned pod that waits:
    # keeping it free as well would only cost node-hours (docs/planner.md, "Nodes kept for pinned pods").
    movable = config.consolidation != "off" and all(pod.evictable for obs in observations for pod in obs.pods)
    kept_for_pins = pinned(
        observations,
        forecasts,
        remembered,
        now,
        config.pinned_memory_hours,
        config.pinned_share if shaping and not movable else 0.0,
        config.scarce_kind_share,
    )
    listed = standby(planned, final, set(kept_for_pins.nodes)) if shaping and config.standby else Standby()
    kept = (
        kept_from_scale_down(planned, final, config.mps_release_below)
        if shaping and config.keep_shaped
        else ()
    )
    moves = rehome(planned, final, pool, config) if shaping else ()
    notes += _releasable(planned, plans)
    if moves:
        notes.append(rehome_note(moves))
    if listed.grades:
        notes.append(_standby_note(listed.grades, bool(set(listed.grades[0]) & set(kept_for_pins.nodes))))
    if kept_for_pins.scarce or kept_for_pins.scarce_kinds:
        notes.append(_pinned_note(kept_for_pins, config.scarce_kind_share))
    if kept:
        mps = (
            f", and nodes shared by MPS with more than {config.mps_release_below:.0%} of their tenants taken"
            if config.mps_release_below < 1
            else ""
        )
        notes.append(
            f"kept from the autoscaler (nodes with MIG that host pods{mps}, marked "
            f"cluster-autoscaler.kubernetes.io/scale-down-disabled): {shown_names(list(kept))}"
        )
    return FleetPlan(
        policy=config.policy,
        predictor=forecasts.predictor,
        trusted=forecasts.trusted,
        horizon_minutes=forecasts.horizon_minutes,
        nodes=tuple(budgeted),
        notes=tuple(notes),
        standby_grades=listed.grades,
        scale_down_disabled=kept,
        moves=moves,
        pins=kept_for_pins.pins,
        scarce_pins=kept_for_pins.scarce,
        scarce_kinds=kept_for_pins.scarce_kinds,
        pinned_nodes=kept_for_pins.nodes,
    )


def _pinned_note(kept: Pinned, kind_share: float) -> str:
    """What the plan keeps for pinned pods (:mod:`slicewise.planning.pinned`)."""
    kinds = ", ".join(f"{label}={value}" for label, value in kept.scarce_kinds)
    which = (
        [
            "only pods pinned to "
            + "; ".join(f"{pin.describe()} (last seen {pin.seen:%Y-%m-%d %H:%M})" for pin in kept.scarce)
            + " may use among few others"
        ]
        if kept.scarce
        else []
    )
    if kinds:
        which.append(
            f"are of a kind on a label pods pin themselves to that holds at most {kind_share * 100:g}% of the GPUs "
            f"({kinds})"
        )
    return (
        f"kept for pinned pods: {len(kept.nodes)} nodes that "
        + ", or that ".join(which)
        + "; those without MIG or MPS carry one standby taint more than the largest size, in use or not, and "
        "cluster-autoscaler's priority expander should rank their node groups below the others"
        + (f": {shown_names(list(kept.nodes))}" if kept.nodes else "")
    )


def _releasable(planned: Sequence[Planned], plans: Sequence[NodePlan]) -> list[str]:
    """A note naming the nodes without a GPU pod once the plan is done (idle now, or emptied by a consolidation
    that hosts nothing there): what a cluster autoscaler could remove."""
    final = {plan.node: plan for plan in plans}
    empty = [
        item.ctx.name
        for item in planned
        if (not item.ctx.obs.pods and final[item.ctx.name].action != CHANGE)
        or (final[item.ctx.name].rule == CONSOLIDATED and not final[item.ctx.name].pending_served)
    ]
    if not empty:
        return []
    return [
        f"releasable: {len(empty)} nodes hold no GPU pod after this plan (an autoscaler may remove them): "
        + shown_names(empty)
    ]


def _standby_note(grades: Sequence[Sequence[str]], pinned: bool = False) -> str:
    """What the standby lists (:mod:`slicewise.planning.standby`) tell the scheduler, grade by grade (``pinned``:
    they hold nodes kept for pinned pods, which may be in use)."""
    first, *larger = grades
    which = (
        "nodes without MIG or MPS (the empty ones and those kept for pinned pods)"
        if pinned
        else "empty nodes without MIG or MPS"
    )
    return (
        f"standby: {len(first)} {which} get the taint {STANDBY_TAINTS[0]} (opened only "
        f"when no node in use fits; apply mode writes the taints): {shown_names(first)}"
        + "".join(
            f"; the {len(names)} larger than the fleet's {('', 'second ', 'third ')[grade]}smallest also "
            f"{STANDBY_TAINTS[grade + 1]}: {shown_names(names)}"
            for grade, names in enumerate(larger)
        )
        + ("; the larger, the later opened" if larger else "")
    )


def demand_pool(forecasts: Forecasts, whole: str = "median") -> Pool:
    """The pending requests the plan hands out: each forecast kind at its upper quantile, except whole-GPU
    requests, counted as ``whole`` says (:func:`whole_pending`)."""
    return Pool(
        (request, count)
        for d in forecasts.demand
        if (request := request_for(d.resource, d.share, d.gpus, d.models, d.node_selector))
        and (count := whole_pending(d, whole) if request.whole else d.upper) > 0
    )


def whole_pending(d: DemandForecast, rule: str = "median") -> float:
    """Whole-GPU requests the plan keeps GPUs whole (and empties nodes) for (``planner_whole_gpu_demand``).

    Keeping GPUs whole turns every smaller request away, so a whole-GPU pod that waited a few minutes and started
    since must not empty a node: on the ``default`` trace under the bin-packing scheduler model the upper quantile
    made the mean wait +128 % against static. ``median``: the pods that waited most of the last hour (+3 % there).
    It leaves out a pod that arrived in the last half hour and still waits, which then waits for the plan after
    next. ``pending-now``: the pods still pending now, at most the hour's upper quantile (a pod pending at the
    last step only may well start on its own); the median where the forecast does not say what is pending now.
    With the bin-packing profile it serves the multi-GPU pods sooner, the small ones waiting within seconds of
    before; with spreading, the small pods pay (docs/backtest.md, "Whole GPUs for the pods pending now")."""
    if rule == "pending-now" and d.latest is not None:
        return min(d.upper, d.latest)
    return d.p50


def steady_demand(forecasts: Forecasts, whole: str = "median") -> dict[Request, float]:
    """The pending requests of each kind that a disruptive move may count on: whole-GPU ones as ``whole`` says
    (:func:`whole_pending`), others the median (those that waited most of the time, where the upper quantile may
    be a pod that waited a few minutes and started since)."""
    out = {}
    for d in forecasts.demand:
        request = request_for(d.resource, d.share, d.gpus, d.models, d.node_selector)
        count = whole_pending(d, whole) if request.whole else d.p50
        if count > 0:
            out[request] = count
    return out


def _idle_key(ctx: NodeContext, pool: Pool) -> tuple[object, ...] | None:
    """What an idle node's proposal depends on, or None for a busy one.

    A node with no GPU pods and a forecast of exactly zero load and memory proposes the same as any other such
    node of the same model, size, configuration and selected labels under the same pending pool; large fleets
    are mostly such nodes, so their proposal is computed once per key."""
    if ctx.obs.pods or any(
        f.p50 != 0 or f.upper != 0 or (f.memory != 0 and not math.isnan(f.memory)) for f in ctx.forecasts
    ):
        return None
    return (
        ctx.model.name,
        ctx.gpus,
        ctx.layout,
        ctx.split,
        ctx.replicas,
        tuple(sorted(f.mig_profile for f in ctx.forecasts)),  # the weights of its zero forecasts
        pool.key(),
        tuple((key, ctx.obs.node.labels.get(key)) for key in pool.selected_labels()),
    )


def _propose(ctx: NodeContext, catalog: Catalog, config: PlannerConfig, pool: Pool) -> Proposal:
    if config.policy == "thresholds":
        return thresholds.plan(ctx, catalog, config)
    return packing.plan(ctx, catalog, config, pool)


def _desired(ctx: NodeContext, proposal: Proposal, catalog: Catalog) -> DesiredState:
    if (proposal.layout, proposal.split) == (ctx.layout, ctx.split):
        mig_config = ctx.obs.node.mig_config
    else:
        name = catalog.config_named_for(ctx.model.name, proposal.layout, proposal.split)
        if name is None:  # policies only propose shipped layouts; a miss is a catalogue bug
            raise ValueError(
                f"no named mig-parted config for {proposal.layout} (split {proposal.split}) on {ctx.model.name}"
            )
        mig_config = name
    if proposal.replicas == ctx.replicas:
        plugin = ctx.obs.node.device_plugin_config or "default"
    else:
        plugin = catalog.device_plugin_config_for(proposal.replicas)
    return DesiredState(mig_config, plugin)


def _guard(
    ctx: NodeContext,
    proposal: Proposal,
    catalog: Catalog,
    config: PlannerConfig,
    now: datetime,
    acting: bool,
    forecasts: Forecasts,
) -> NodePlan:
    desired = _desired(ctx, proposal, catalog)
    p50, upper = ctx.utilisation()
    disruption = tuple(describe_pod(pod) for pod in ctx.obs.pods)
    base = NodePlan(
        node=ctx.name,
        gpu_model=ctx.model.name,
        gpus=ctx.gpus,
        current=ctx.current,
        desired=desired,
        action=CHANGE,
        policy=config.policy,
        rule=proposal.rule,
        reasons=proposal.reasons,
        util_p50=p50,
        util_upper=upper,
        gain_gpu_hours=proposal.gain_gpu_hours,
        disruption=disruption,
        pending_served=dict(proposal.pending_served),
    )

    def verdict(action: str, why: str) -> NodePlan:
        return _replace(base, action=action, reasons=(*proposal.reasons, why))

    if desired == ctx.current:
        return _replace(base, action=KEEP, desired=ctx.current, disruption=(), pending_served={})
    if not acting:
        return verdict(KEEP, f"would change to {desired.describe()}, but the forecaster is not trusted")
    if proposal.gain_gpu_hours < config.min_gain_gpu_hours:
        return verdict(
            KEEP,
            f"hysteresis: expected gain {proposal.gain_gpu_hours:.2f} GPU-h/h is below "
            f"{config.min_gain_gpu_hours:.2f}",
        )
    changed = ctx.last_change()
    if changed is not None and now - changed < timedelta(hours=config.dwell_hours):
        return verdict(
            KEEP,
            f"dwell time: changed at {changed:%Y-%m-%d %H:%M} UTC, less than {config.dwell_hours:g} h ago",
        )
    stuck = [describe_pod(pod) + ": " + "; ".join(pod.blockers) for pod in ctx.obs.pods if not pod.may_drain]
    if stuck:
        # A hold closes the node's free slots: not while pending requests fit them as they are (planning.holds).
        hold = config.cordon_to_drain and proposal.hosts_as_is < EPS
        if hold:
            hint = "cordon so it drains naturally"
        elif config.cordon_to_drain:
            hint = (
                f"no hold: as it is the node hosts {proposal.hosts_as_is:.2f} pending requests now, which a "
                "cordon would leave waiting"
            )
        else:
            hint = "set planner_cordon_to_drain to drain"
        return verdict(DRAIN if hold else BLOCKED, f"non-evictable GPU pods ({hint}): " + " | ".join(stuck))
    return base


def _apply_budget(
    plans: list[NodePlan], config: PlannerConfig, nodes: Mapping[str, GpuNode]
) -> list[NodePlan]:
    """Keep the highest-gain changes and holds within ``max_change_share`` of the managed nodes (at least one): a
    node held (planning.holds) takes no new pod, as a changing node does not, so holds count too, the nodes already
    held first (what they waited for is not thrown away for a newcomer). Over the budget a change becomes ``keep``,
    a new hold ``blocked``, and a held node is released."""
    managed = len(nodes)
    budget = max(1, math.floor(config.max_change_share * managed)) if config.max_change_share > 0 else 0
    candidates = sorted(
        (p for p in plans if p.action in (CHANGE, DRAIN)),
        key=lambda p: (not nodes[p.node].held, -p.gain_gpu_hours, p.node),
    )
    over = {p.node for p in candidates[budget:]}
    why = f"change budget: {budget} of {managed} nodes per run (changes and holds), used by higher gains"
    return [
        _replace(p, action=KEEP if p.action == CHANGE else BLOCKED, reasons=(*p.reasons, why))
        if p.node in over
        else p
        for p in plans
    ]


def _skipped(obs: NodeObservation, config: PlannerConfig, why: str) -> NodePlan:
    node = obs.node
    state = DesiredState(node.mig_config, node.device_plugin_config or "default")
    return NodePlan(
        node=node.name,
        gpu_model=node.gpu_product,
        gpus=node.gpu_count,
        current=state,
        desired=state,
        action=SKIP,
        policy=config.policy,
        rule="not plannable",
        reasons=(why,),
        util_p50=math.nan,
        util_upper=math.nan,
        gain_gpu_hours=0.0,
    )


def _replace(plan: NodePlan, **changes: object) -> NodePlan:
    import dataclasses

    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]
