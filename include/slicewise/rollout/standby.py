"""Carry the plan's standby list to the cluster: the ``PreferNoSchedule`` taint on exactly the listed nodes.

A taint of effect ``PreferNoSchedule`` moves no running pod and never keeps a pod from starting (the scheduler
still uses a tainted node when no other fits), so it needs no waves, no analysis and no rollback: each write is
one guarded patch of one node, and a crash between two writes leaves some nodes marked and others not, which
the next run's plan sets right. Nodes off the list lose the taint, so turning ``planner_standby`` off clears it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slicewise.cluster.base import STANDBY_TAINT as STANDBY
from slicewise.cluster.base import ClusterBackend
from slicewise.planning.types import FleetPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Marked:
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"standby taint {STANDBY.key}:{STANDBY.effect} added on {len(self.added)} nodes "
            f"({', '.join(self.added) or '-'}), removed from {len(self.removed)} ({', '.join(self.removed) or '-'})"
        )


def mark_standby(backend: ClusterBackend, plan: FleetPlan) -> Marked:
    """Taint the plan's standby nodes and untaint every other managed node that carries the taint."""
    wanted = set(plan.standby)
    added: list[str] = []
    removed: list[str] = []
    for node in backend.list_nodes():
        want = node.name in wanted
        if node.has_taint(STANDBY) != want:
            backend.set_taint(node.name, STANDBY, want)
            (added if want else removed).append(node.name)
    marked = Marked(tuple(added), tuple(removed))
    log.info("%s", marked.describe())
    return marked
