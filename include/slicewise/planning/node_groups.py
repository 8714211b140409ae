"""The ranking of cluster-autoscaler's node groups that a plan asks for, for the priority expander.

The autoscaler adds a node of the highest-ranked group that hosts a pending pod. The plan wants two things of that
ranking: a fractional pod should get a node shared by MPS rather than a whole GPU it would strand (docs/planner.md,
"A node group shared by MPS"), and a pod that could run anywhere should not get a node of a kind the plan keeps for
pinned pods (:mod:`slicewise.planning.pinned`). The operator lists the GPU node groups once (the setting
``autoscaler_node_groups``): for each, a regular expression over the group names as the expander reads them, and
the labels its nodes join with (those of its scale-from-zero template). From those and the plan, :func:`ranked`
gives four tiers, higher first:

* :data:`SHARED`: groups whose nodes join shared by MPS (``nvidia.com/device-plugin.config=mps-N`` or
  ``nvidia.com/gpu.sharing-strategy=mps``), of kinds not kept;
* :data:`WHOLE`: the other listed groups of kinds not kept;
* :data:`KEPT`: the groups of the kinds the plan keeps for pinned pods, shared or not (a pod pinned there has no
  other group, so it still gets one);
* :data:`OTHERS`: ``.*``, every other group (CPU ones): the expander never uses a group no entry names.

A group that several entries match gets the highest of their priorities (cluster-autoscaler >= 1.20), which is
why the catch-all ranks last and why every GPU group must be listed. It assumes GPU groups carry a taint that pods
without GPUs do not tolerate (``nvidia.com/gpu:NoSchedule``, as GKE sets and EKS recommends); otherwise such a pod
would get a GPU node, which ranks above the catch-all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from slicewise.catalog.configs import product_without_suffixes
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_PRODUCT_LABEL,
    PRIORITY_EXPANDER_CONFIG_MAP,
    SHARING_STRATEGY_LABEL,
    selector_allows,
)
from slicewise.planning.types import FleetPlan
from slicewise.settings import SettingsError

SHARED, WHOLE, KEPT, OTHERS = 30, 20, 10, 1
CATCH_ALL = ".*"
#: What Go's RE2, which the autoscaler compiles the patterns with, does not have: look-arounds and back-references.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]")


@dataclass(frozen=True)
class NodeGroup:
    """One GPU node group of cluster-autoscaler, as the operator lists it."""

    pattern: str  # a regular expression over node group names, searched anywhere in the name
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Its nodes join with their GPUs shared by MPS."""
        return (
            self.labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "").startswith("mps-")
            or self.labels.get(SHARING_STRATEGY_LABEL) == "mps"
        )


@dataclass(frozen=True)
class Tier:
    priority: int
    why: str
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class Ranking:
    """The tiers, highest first; empty tiers left out."""

    tiers: tuple[Tier, ...]

    def priorities(self) -> str:
        """The ConfigMap's ``priorities`` text: YAML of priority -> patterns, as the expander parses it."""
        return yaml.safe_dump(
            {tier.priority: list(tier.patterns) for tier in self.tiers},
            sort_keys=False,
            default_flow_style=False,
        )

    def describe(self) -> str:
        return "; ".join(f"{tier.priority} ({tier.why}): {', '.join(tier.patterns)}" for tier in self.tiers)


def parse_node_groups(text: str) -> tuple[NodeGroup, ...]:
    """The setting ``autoscaler_node_groups``: a JSON list of ``{"pattern": ..., "labels": {...}}``;
    SettingsError saying what is wrong otherwise."""
    try:
        raw = json.loads(text or "[]")
    except ValueError as exc:
        raise SettingsError(f"autoscaler_node_groups is not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise SettingsError('autoscaler_node_groups must be a JSON list of {"pattern": ..., "labels": {...}}')
    return tuple(_node_group(index, entry) for index, entry in enumerate(raw))


def _node_group(index: int, entry: Any) -> NodeGroup:
    where = f"autoscaler_node_groups[{index}]"
    if not isinstance(entry, dict) or set(entry) - {"pattern", "labels"}:
        raise SettingsError(f'{where} must be an object with the keys "pattern" and "labels", got {entry!r}')
    pattern, labels = entry.get("pattern"), entry.get("labels", {})
    if not isinstance(pattern, str) or not pattern:
        raise SettingsError(
            f'{where}: "pattern" must be a non-empty regular expression over node group names'
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SettingsError(f"{where}: pattern {pattern!r} is not a regular expression: {exc}") from None
    if _NOT_RE2.search(pattern) or pattern == CATCH_ALL:
        raise SettingsError(
            f"{where}: pattern {pattern!r} is not for one group's name (look-arounds and back-references are "
            f"not RE2, which the autoscaler reads; {CATCH_ALL!r} is Slicewise's catch-all for the other groups)"
        )
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in [*labels, *labels.values()]):
        raise SettingsError(f'{where}: "labels" must map label names to values (strings)')
    return NodeGroup(pattern, dict(labels))


def ranked(groups: Sequence[NodeGroup], plan: FleetPlan) -> Ranking:
    """The tiers for ``groups`` under ``plan`` (its scarce pins and kinds)."""
    kept = [group for group in groups if _kept(group, plan)]
    rest = [group for group in groups if group not in kept]
    tiers = (
        Tier(SHARED, "shared by MPS", tuple(g.pattern for g in rest if g.shared)),
        Tier(WHOLE, "whole GPUs", tuple(g.pattern for g in rest if not g.shared)),
        Tier(KEPT, "kept for pinned pods", tuple(g.pattern for g in kept)),
        Tier(OTHERS, "every other group", (CATCH_ALL,)),
    )
    return Ranking(tuple(tier for tier in tiers if tier.patterns))


def ranking_note(groups: Sequence[NodeGroup], plan: FleetPlan, namespace: str, written: bool = True) -> str:
    """The plan's note on the ranking: what apply mode writes (``written``), else what to write by hand."""
    who = "as apply mode writes it" if written else "to write by hand (autoscaler_write_priorities is off)"
    return (
        f"cluster-autoscaler's priority expander ({namespace}/{PRIORITY_EXPANDER_CONFIG_MAP}), ranked {who}: "
        f"{ranked(groups, plan).describe()}"
    )


def _kept(group: NodeGroup, plan: FleetPlan) -> bool:
    """Whether the group's nodes are of a kind the plan keeps: a scarce pin allows them, or they carry a scarce
    kind. The GPU product counts without the suffixes GPU feature discovery appends, so a kind's shared group goes
    with its whole one."""
    labels = dict(group.labels)
    if GPU_PRODUCT_LABEL in labels:
        labels[GPU_PRODUCT_LABEL] = product_without_suffixes(labels[GPU_PRODUCT_LABEL])
    return any(selector_allows(pin.selector, labels) for pin in plan.scarce_pins) or any(
        labels.get(label) == value for label, value in plan.scarce_kinds
    )
