"""Carry the plan's ranking of cluster-autoscaler's node groups (planning.node_groups) to the priority expander's
ConfigMap; only where the setting ``autoscaler_node_groups`` lists the groups.

The ConfigMap is one object, so each write is whole: one merge patch of its ``priorities`` and Slicewise's two
annotations, guarded by the resourceVersion of the read it was decided on (a conflict is decided again on a fresh
read). A crash before the write leaves the last ranking, which the next run writes anew; after it, the ranking
stands. It moves no pod and changes no node, so it needs no waves, no analysis and no rollback.

Slicewise takes the ConfigMap over at its first write, keeping what it held in :data:`BEFORE_ANNOTATION`, and
marks each write with a digest of its text (:data:`WRITTEN_ANNOTATION`). When the text no longer matches the
digest, someone changed it since: Slicewise leaves it as it is and says so, run after run, until someone removes
the mark (then Slicewise takes it over again). It never creates the ConfigMap: without one, the autoscaler is not
using the priority expander there, and writing one would change nothing or, worse, start ranking a cluster whose
operator has not chosen to.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slicewise.cluster.base import (
    PRIORITY_EXPANDER_CONFIG_MAP,
    PRIORITY_EXPANDER_KEY,
    ClusterBackend,
    ClusterError,
    ConfigMapChanged,
)
from slicewise.planning.node_groups import NodeGroup, ranked
from slicewise.planning.types import FleetPlan

log = logging.getLogger(__name__)

WRITTEN_ANNOTATION = "slicewise.io/priorities-written"  # sha256 of the priorities Slicewise last wrote
BEFORE_ANNOTATION = "slicewise.io/priorities-before"  # what they were when Slicewise took the ConfigMap over
WRITTEN, UNCHANGED, LEFT = "written", "unchanged", "left as it is"


@dataclass(frozen=True)
class Ranked:
    config_map: str  # namespace/name
    outcome: str  # WRITTEN | UNCHANGED | LEFT
    priorities: str  # what Slicewise wants there
    took_over: bool = False  # this write was Slicewise's first (or first since someone removed its mark)

    def describe(self) -> str:
        if self.outcome == LEFT:
            return (
                f"{self.config_map} left as it is: someone changed its priorities since Slicewise wrote them; "
                f"remove its annotation {WRITTEN_ANNOTATION} to hand it back to Slicewise"
            )
        verb = "taken over and written" if self.took_over else self.outcome
        return f"{self.config_map} {verb}: " + " ".join(self.priorities.split())

    def to_dict(self) -> dict[str, Any]:
        return {"config_map": self.config_map, "outcome": self.outcome, "took_over": self.took_over}


def rank_node_groups(
    backend: ClusterBackend, plan: FleetPlan, groups: Sequence[NodeGroup], namespace: str, attempts: int = 3
) -> Ranked:
    """Write the plan's ranking of ``groups`` into the priority expander's ConfigMap in ``namespace``, unless
    someone else changed it since Slicewise's last write. Raises ConfigMapNotFound (a permanent error: apply
    include/k8s/autoscaler-priority-expander.yaml first) and, after ``attempts`` conflicts, ClusterError."""
    text = ranked(groups, plan).priorities()
    where = f"{namespace}/{PRIORITY_EXPANDER_CONFIG_MAP}"
    for _ in range(attempts):
        read = backend.get_config_map(namespace, PRIORITY_EXPANDER_CONFIG_MAP)
        current = read.data.get(PRIORITY_EXPANDER_KEY, "")
        mark = read.annotations.get(WRITTEN_ANNOTATION)
        if mark is not None and mark != _digest(current):
            result = Ranked(where, LEFT, text)
            log.warning("%s", result.describe())
            return result
        if mark is not None and current == text:
            return Ranked(where, UNCHANGED, text)
        annotations = {WRITTEN_ANNOTATION: _digest(text)}
        if mark is None:
            annotations[BEFORE_ANNOTATION] = current
        try:
            backend.update_config_map(read, {PRIORITY_EXPANDER_KEY: text}, annotations)
        except ConfigMapChanged:
            log.info("%s changed while Slicewise wrote it; deciding again on a fresh read", where)
            continue
        result = Ranked(where, WRITTEN, text, took_over=mark is None)
        log.info("%s", result.describe())
        return result
    raise ClusterError(f"{where}: still changing under Slicewise's writes after {attempts} attempts")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
