"""Nodes Slicewise holds: cordoned across runs so that the GPU pods it may not evict finish on their own.

With ``planner_cordon_to_drain`` a node whose wanted change is blocked by such pods gets the verdict
``cordon-to-drain``, and in apply mode the rollout cordons it with ``slicewise.io/held-for`` naming the change
(:mod:`slicewise.rollout.holds`). No new pod lands there; once the blocking pods have finished, the node's verdict is
``change``, and the rollout drains the evictable rest, relabels and uncordons it as any change. A hold closes the
node's free slots too, so no node is held while pending requests fit it as it is (``blocked`` instead, or a held
node released): in the backtest such a hold idled an 8-GPU node for 18 days while its pods ended one by one. The
planner plans a held node as any other (its own cordon does not make it unplannable), but leaves it out of the
fleet-wide rules (consolidation, the shared reserve, standby, moves, the autoscaler marks): no pod can be sent to a
cordoned node. Every run decides again:

* ``change``: the rollout takes the cordon over.
* ``cordon-to-drain``: still waiting; the hold names the newest wanted state and keeps its start.
* ``keep`` or ``blocked`` (the change no longer wanted, its gain too small, the forecaster not trusted,
  ``planner_cordon_to_drain`` switched off, the budget below): ``uncordon``, which lifts the hold.
* ``skip`` (the node cannot be planned, e.g. a MIG reconfiguration failed): the hold stays, for a person to look.

Holds count against the change budget with the changes (a held node takes no new pod, as a changing one does
not), the nodes already held first: without it, on a fleet of five nodes the backtest held four at once for days
(docs/backtest.md, "Pods that may not be evicted"). A new hold over the budget stays ``blocked``; a held node over
it (the budget lowered) is released.
"""

from __future__ import annotations

import dataclasses

from slicewise.cluster.base import GpuNode
from slicewise.planning.types import BLOCKED, KEEP, UNCORDON, NodePlan


def settle(plan: NodePlan, node: GpuNode) -> NodePlan:
    """The verdict for a node as its hold changes it (``plan`` unchanged when the node is not held)."""
    if not node.held:
        return plan
    held = node.held_words()
    if plan.action in (KEEP, BLOCKED):
        return dataclasses.replace(
            plan,
            action=UNCORDON,
            reasons=(*plan.reasons, f"{held}: lift the hold, the change is not wanted now"),
        )
    return dataclasses.replace(plan, reasons=(*plan.reasons, held))
