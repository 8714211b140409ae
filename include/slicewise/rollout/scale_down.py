"""Carry the plan's list of shaped nodes to the cluster: ``cluster-autoscaler.kubernetes.io/scale-down-disabled``
on exactly the listed nodes (planning.shaped).

The annotation moves no pod and changes no slot: the autoscaler only stops counting the node as a candidate to
drain or remove. So it needs no waves, no analysis and no rollback: each write is one guarded patch of one node,
setting (or removing) the autoscaler's annotation and Slicewise's own mark (``slicewise.io/scale-down-disabled``)
together, and a crash between two nodes leaves some marked and others not, which the next run's plan sets right.
Slicewise takes off only the annotations it set (those beside its mark): a node someone else keeps from the
autoscaler stays kept, and is not taken over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slicewise.cluster.base import SCALE_DOWN_DISABLED_ANNOTATION, SCALE_DOWN_MARK_ANNOTATION, ClusterBackend
from slicewise.planning.types import FleetPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kept:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    theirs: tuple[str, ...]  # listed, but already kept from the autoscaler by someone else: left as they are

    def describe(self) -> str:
        return (
            f"{SCALE_DOWN_DISABLED_ANNOTATION} set on {len(self.added)} nodes ({', '.join(self.added) or '-'}), "
            f"removed from {len(self.removed)} ({', '.join(self.removed) or '-'})"
            + (f"; already set by others on {', '.join(self.theirs)}" if self.theirs else "")
        )


def mark_scale_down_disabled(backend: ClusterBackend, plan: FleetPlan) -> Kept:
    """Annotate the plan's ``scale_down_disabled`` nodes and take Slicewise's annotation off every other node."""
    wanted = set(plan.scale_down_disabled)
    added: list[str] = []
    removed: list[str] = []
    theirs: list[str] = []
    for node in backend.list_nodes():
        ours = node.annotations.get(SCALE_DOWN_MARK_ANNOTATION) == "true"
        if node.name in wanted and not ours:
            if SCALE_DOWN_DISABLED_ANNOTATION in node.annotations:
                theirs.append(node.name)
                continue
            backend.set_annotations(
                node.name, {SCALE_DOWN_DISABLED_ANNOTATION: "true", SCALE_DOWN_MARK_ANNOTATION: "true"}
            )
            added.append(node.name)
        elif node.name not in wanted and ours:
            backend.set_annotations(
                node.name, {SCALE_DOWN_DISABLED_ANNOTATION: None, SCALE_DOWN_MARK_ANNOTATION: None}
            )
            removed.append(node.name)
    kept = Kept(tuple(added), tuple(removed), tuple(theirs))
    log.info("%s", kept.describe())
    return kept
