"""Carry the plan's standby lists to the cluster: each ``PreferNoSchedule`` standby taint on exactly its listed nodes.

A taint of effect ``PreferNoSchedule`` moves no running pod and never keeps a pod from starting (the scheduler
still uses a tainted node when no other fits), so it needs no waves, no analysis and no rollback: each write is
one guarded patch of one node and one taint, and a crash between two writes leaves some nodes marked and others
not (or a large node with some of its grades), which the next run's plan sets right. Nodes off a list lose its
taint, so turning ``planner_standby`` off clears them all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slicewise.cluster.base import STANDBY_TAINTS, ClusterBackend, Taint
from slicewise.planning.types import FleetPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Marked:
    taint: Taint
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"standby taint {self.taint} added on {len(self.added)} nodes "
            f"({', '.join(self.added) or '-'}), removed from {len(self.removed)} ({', '.join(self.removed) or '-'})"
        )


def mark_standby(backend: ClusterBackend, plan: FleetPlan) -> tuple[Marked, ...]:
    """For each standby taint (``STANDBY_TAINTS``, grade order): taint the nodes of the plan's list and untaint
    every other managed node that carries it. The first grade goes first, so a crash in between leaves no node
    with a larger grade's taint without the smaller ones' (a node leaving a list may keep a larger grade's taint
    alone until the next run; the scheduler counts taints, not their keys: fewer grades than planned, never a
    refusal)."""
    grades = plan.standby_grades
    return tuple(
        _mark(backend, taint, set(grades[grade] if grade < len(grades) else ()))
        for grade, taint in enumerate(STANDBY_TAINTS)
    )


def _mark(backend: ClusterBackend, taint: Taint, wanted: set[str]) -> Marked:
    added: list[str] = []
    removed: list[str] = []
    for node in backend.list_nodes():
        want = node.name in wanted
        if node.has_taint(taint) != want:
            backend.set_taint(node.name, taint, want)
            (added if want else removed).append(node.name)
    marked = Marked(taint, tuple(added), tuple(removed))
    log.info("%s", marked.describe())
    return marked
