"""Carry the plan's holds to the cluster (``planner_cordon_to_drain``; :mod:`slicewise.planning.holds`).

A ``cordon-to-drain`` node is cordoned with ``slicewise.io/held-for`` naming the change it waits for; an
``uncordon`` node is uncordoned, which drops the annotation. Each is one guarded patch of one node (the cordon and
the annotation together, or the uncordon and the annotation's removal together), so a task killed between two
writes leaves every node held or not, never cordoned without saying whose; run again, it writes only what is
missing. Under the rollout's lock, before any wave, like the standby taints: a hold evicts no pod. A node someone
else cordoned is never held; a held node that does not advertise what its labels promise is not uncordoned; an
annotation left on a node someone uncordoned is removed, so that a later cordon by someone else is not read as
Slicewise's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from slicewise.catalog import Catalog
from slicewise.cluster.base import HOLD_ANNOTATION, ClusterBackend, CordonedByOthers, Hold
from slicewise.planning.types import DRAIN, UNCORDON, FleetPlan
from slicewise.rollout.procedure import NodeFailed, promise_broken

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holds:
    held: tuple[str, ...] = ()  # cordoned now, or the hold now names a newer wanted state
    released: tuple[str, ...] = ()  # uncordoned: the change is no longer wanted
    cleared: tuple[str, ...] = ()  # an annotation left on a node someone else uncordoned, removed
    refused: tuple[str, ...] = ()  # "node: why", left as they are

    def describe(self) -> str:
        parts = [
            f"{what} {len(names)} nodes ({', '.join(names)})"
            for what, names in (
                ("held (cordoned so that their pods finish)", self.held),
                ("released (uncordoned)", self.released),
                ("cleared a stale hold annotation on", self.cleared),
            )
            if names
        ]
        if self.refused:
            parts.append("left as they are: " + " | ".join(self.refused))
        return "holds: " + ("; ".join(parts) or "nothing to do")

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "held": list(self.held),
            "released": list(self.released),
            "cleared": list(self.cleared),
            "refused": list(self.refused),
        }


def settle_holds(backend: ClusterBackend, plan: FleetPlan, catalog: Catalog, now: datetime) -> Holds:
    """Hold the plan's ``cordon-to-drain`` nodes, release its ``uncordon`` ones, clear stale annotations."""
    held, released, cleared, refused = [], [], [], []
    verdicts = {p.node: p for p in plan.nodes}
    for node in backend.list_nodes():
        verdict = verdicts.get(node.name)
        if verdict is not None and verdict.action == DRAIN:
            current = node.hold()
            wanted = Hold(
                verdict.desired.mig_config,
                verdict.desired.device_plugin_config,
                current.since if current else now,
            )
            if current == wanted:
                continue
            try:
                backend.cordon(node.name, hold=wanted)
                held.append(node.name)
            except CordonedByOthers as exc:
                refused.append(f"{node.name}: {exc}")
        elif verdict is not None and verdict.action == UNCORDON and node.held:
            try:
                broken = promise_broken(backend.get_node(node.name), catalog)
            except NodeFailed as exc:
                broken = str(exc)
            if broken:
                refused.append(f"{node.name}: left held, {broken}")
                continue
            backend.uncordon(node.name)
            released.append(node.name)
        elif HOLD_ANNOTATION in node.annotations and not node.unschedulable:
            # The annotation alone: an uncordon would lift a cordon someone set since the list was read.
            backend.set_annotations(node.name, {HOLD_ANNOTATION: None})
            cleared.append(node.name)
    holds = Holds(tuple(held), tuple(released), tuple(cleared), tuple(refused))
    log.info("%s", holds.describe())
    return holds
