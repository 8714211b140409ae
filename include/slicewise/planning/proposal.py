"""What a policy proposes for one node, before the guard rails have their say."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slicewise.catalog import Layout
from slicewise.planning.demand import Request


@dataclass(frozen=True)
class Proposal:
    layout: Layout | None  # None = MIG disabled
    replicas: int  # MPS tenants per GPU (1 = none)
    rule: str
    reasons: tuple[str, ...]
    gain_gpu_hours: float  # expected GPU-hours per hour freed or demand served (0 when nothing changes)
    pending_served: Mapping[str, float] = field(default_factory=dict)  # as plans name the requests
    hosted: Mapping[Request, float] = field(default_factory=dict)  # the pool's requests it would host
    split: tuple[int, int] | None = None  # (k, n): ``layout`` on the first k of n GPUs, the rest whole
    # pending requests the node hosts as it is now (packing): a hold (planning.holds) would leave them waiting
    hosts_as_is: float = 0.0
