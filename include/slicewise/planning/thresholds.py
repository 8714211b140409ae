"""The ``thresholds`` policy: the published rule this project starts from.

Forecast utilisation (upper quantile, compute-weighted over the node's GPUs) below ``low_util`` -> one step
towards smaller slices; between the thresholds -> keep the layout and fit MPS tenants to the target; above
``high_util`` -> one step towards larger slices. MIG nodes step along their geometry's ladder
(``include/config/planner.yaml``); whole-GPU nodes step along MPS replicas (x2 to split, /2 to merge).

Expected gain: splitting makes ``gpus x (1 - utilisation)`` idle GPU-hours per hour shareable; merging relieves
``gpus x (utilisation - high_util)`` saturated GPU-hours per hour; re-fitting MPS tenants moves the load by
``gpus x |target - utilisation|``.
"""

from __future__ import annotations

import math
from collections import Counter

from slicewise.catalog import Catalog, Layout, layout
from slicewise.planning.config import PlannerConfig, ladders
from slicewise.planning.node import NodeContext, mps_replicas_at_most
from slicewise.planning.proposal import Proposal


def ladder_for(ctx: NodeContext) -> list[Layout]:
    """The node's ladder as layouts of its model's base profiles (largest slices first)."""
    steps = []
    for composition in ladders().get(ctx.model.compute_slices, ()):
        profiles = [ctx.model.base_profile(g) for g in composition]
        if all(p is not None for p in profiles):
            steps.append(layout(Counter(p.name for p in profiles if p is not None)))
    return steps


def _position(ladder: list[Layout], current: Layout, ctx: NodeContext) -> int:
    """Index of the current layout on the ladder, or of the step with the closest number of instances."""
    if current in ladder:
        return ladder.index(current)
    instances = sum(n for _, n in current)
    return min(range(len(ladder)), key=lambda i: abs(sum(n for _, n in ladder[i]) - instances))


def plan(ctx: NodeContext, catalog: Catalog, config: PlannerConfig) -> Proposal:
    p50, upper = ctx.utilisation()
    if math.isnan(upper):
        return Proposal(
            ctx.layout,
            ctx.replicas,
            "thresholds: no forecast",
            ("no forecast for this node",),
            0.0,
            split=ctx.split,
        )
    facts = (
        f"forecast utilisation P50 {p50:.0%}, P90 {upper:.0%} "
        f"(thresholds {config.low_util:.0%} / {config.high_util:.0%})"
    )
    if ctx.layout is not None:
        return _plan_mig(ctx, config, upper, facts)
    return _plan_mps(ctx, catalog, config, upper, facts)


def _plan_mig(ctx: NodeContext, config: PlannerConfig, upper: float, facts: str) -> Proposal:
    assert ctx.layout is not None
    ladder = ladder_for(ctx)
    at = _position(ladder, ctx.layout, ctx)
    if upper < config.low_util and at + 1 < len(ladder):
        rule = f"thresholds: utilisation below {config.low_util:.0%} -> smaller slices"
        return Proposal(ladder[at + 1], 1, rule, (facts,), ctx.gpus * (1 - upper))
    if upper > config.high_util and at > 0:
        rule = f"thresholds: utilisation above {config.high_util:.0%} -> larger slices"
        return Proposal(ladder[at - 1], 1, rule, (facts,), ctx.gpus * (upper - config.high_util))
    rule = "thresholds: utilisation within the band (or at the end of the ladder) -> keep the layout"
    return Proposal(ctx.layout, 1, rule, (facts,), 0.0, split=ctx.split)


def _plan_mps(
    ctx: NodeContext, catalog: Catalog, config: PlannerConfig, upper: float, facts: str
) -> Proposal:
    cap = ctx.model.mps_max_replicas
    if upper < config.low_util:
        rule = f"thresholds: utilisation below {config.low_util:.0%} -> more MPS tenants"
        want, gain = ctx.replicas * 2, ctx.gpus * (1 - upper)
    elif upper > config.high_util:
        rule = f"thresholds: utilisation above {config.high_util:.0%} -> fewer MPS tenants"
        want, gain = ctx.replicas // 2, ctx.gpus * (upper - config.high_util)
    else:
        rule = f"thresholds: utilisation within the band -> fit MPS tenants to {config.mps_target_util:.0%}"
        want = math.floor(ctx.replicas * config.mps_target_util / upper) if upper > 0 else ctx.replicas
        gain = ctx.gpus * abs(config.mps_target_util - upper)
    reasons = [facts]
    if ctx.multi_gpu_pods() and want > 1:
        want = 1
        reasons.append("a pod requests more than one GPU: MPS would refuse it")
    replicas = mps_replicas_at_most(catalog, max(1, min(want, cap)))
    return Proposal(None, replicas, rule, tuple(reasons), gain if replicas != ctx.replicas else 0.0)
