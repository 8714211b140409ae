"""What each step outside the waves is to do, told from the plan before the step writes anything: the ledger keeps
it while the step runs (``Ledger.begin_step``), so a process killed inside a step leaves a line saying which
changes it may have made. Each function returns the words after "it was to"."""

from __future__ import annotations

from collections.abc import Sequence

from slicewise.cluster.base import (
    PRIORITY_EXPANDER_CONFIG_MAP,
    SCALE_DOWN_DISABLED_ANNOTATION,
    STANDBY_TAINTS,
)
from slicewise.planning.node_groups import NodeGroup
from slicewise.planning.types import DRAIN, UNCORDON, FleetPlan, shown_names


def node_groups(groups: Sequence[NodeGroup], namespace: str) -> str:
    return (
        f"write the ranking of {len(groups)} autoscaler node groups into "
        f"{namespace}/{PRIORITY_EXPANDER_CONFIG_MAP}, unless someone changed it since Slicewise's last write"
    )


def standby(plan: FleetPlan) -> str:
    grades = plan.standby_grades
    lists = "; ".join(
        f"{taint} on {_shown(grades[grade] if grade < len(grades) else ())}"
        for grade, taint in enumerate(STANDBY_TAINTS)
    )
    return f"put each standby taint on exactly its nodes and take it off every other node ({lists})"


def scale_down(plan: FleetPlan) -> str:
    return (
        f"set {SCALE_DOWN_DISABLED_ANNOTATION} on {_shown(plan.scale_down_disabled)} and take Slicewise's off "
        "every other node"
    )


def moves(plan: FleetPlan) -> str:
    if not plan.moves:
        return "evict no pod (the plan moves none)"
    return f"evict {len(plan.moves)} fractional pods from whole GPUs: " + _shown(
        [move.describe() for move in plan.moves]
    )


def holds(plan: FleetPlan) -> str:
    held = [p.node for p in plan.nodes if p.action == DRAIN]
    released = [p.node for p in plan.nodes if p.action == UNCORDON]
    return (
        f"hold (cordon until their pods end) {_shown(held)}, release {_shown(released)} if held, and clear "
        "hold annotations left on nodes someone else uncordoned"
    )


def _shown(names: Sequence[str]) -> str:
    return shown_names(names) or "no node"
