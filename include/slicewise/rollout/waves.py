"""Which planned nodes change in which wave: one canary node, then growing cumulative shares (pure)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from slicewise.errors import PermanentError
from slicewise.planning.types import NodePlan

#: Task groups the DAG declares; waves beyond the plan's are skipped.
MAX_WAVES = 6


class WavePlanError(PermanentError, ValueError):
    """The wave shares are malformed or need more waves than the DAG has."""


def parse_shares(text: str) -> tuple[float, ...]:
    """``"0.1,0.25,0.5,1.0"`` -> cumulative shares after the canary; increasing, in (0, 1], ending at 1."""
    try:
        shares = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise WavePlanError(f"rollout_wave_shares {text!r}: not a comma-separated list of numbers") from exc
    if not shares or shares[-1] != 1.0 or any(not 0 < s <= 1 for s in shares):
        raise WavePlanError(f"rollout_wave_shares {text!r}: shares must be in (0, 1] and end at 1")
    if any(b <= a for a, b in itertools.pairwise(shares)):
        raise WavePlanError(f"rollout_wave_shares {text!r}: shares must increase")
    if len(shares) + 1 > MAX_WAVES:
        raise WavePlanError(f"rollout_wave_shares {text!r}: at most {MAX_WAVES - 1} shares after the canary")
    return shares


def order_changes(plans: Sequence[NodePlan]) -> list[NodePlan]:
    """Least disruptive first: fewest pods evicted, then fewest GPUs, then the highest gain, then the name.
    The canary is the node whose failure would hurt least."""
    return sorted(plans, key=lambda p: (len(p.disruption), p.gpus, -p.gain_gpu_hours, p.node))


def plan_waves(nodes: Sequence[str], shares: Sequence[float]) -> list[list[str]]:
    """Waves of node names: ``[canary], then up to ceil(share * n)`` nodes in all for each share; empty
    waves (a share that adds no node) are dropped, so every wave changes at least one node."""
    if not nodes:
        return []
    waves = [[nodes[0]]]
    done = 1
    for share in shares:
        target = max(done, math.ceil(share * len(nodes)))
        if target > done:
            waves.append(list(nodes[done:target]))
            done = target
    return waves


def batches(nodes: Sequence[str], max_in_flight: int) -> list[list[str]]:
    """A wave's nodes in groups of at most ``max_in_flight``: the disruption budget of nodes changed at once."""
    if max_in_flight < 1:
        raise WavePlanError("rollout_max_in_flight must be at least 1")
    return [list(nodes[i : i + max_in_flight]) for i in range(0, len(nodes), max_in_flight)]
