"""The planner's knobs: thresholds and guard rails from the settings, ladders from ``include/config/planner.yaml``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from slicewise.errors import PermanentError
from slicewise.settings import CONFIG_DIR, Settings

POLICIES = ("packing", "thresholds")
FALLBACKS = ("none", "baseline")
CONSOLIDATION = ("off", "whole-gpus", "nodes")  # planning.consolidation
#: Nodes of this many GPUs or more are emptied for release under ``release_below_large``, not ``release_below``.
LARGE_NODE_GPUS = 8
#: How many pending whole-GPU requests GPUs are kept whole for (planning.planner.whole_pending).
WHOLE_GPU_DEMAND = ("median", "pending-now")
REHOME = ("always", "waiting", "off")  # planning.rehome


class PlannerConfigError(PermanentError, ValueError):
    """A planner setting is out of range or names an unknown policy."""


@dataclass(frozen=True)
class PlannerConfig:
    policy: str = "packing"
    low_util: float = 0.4  # thresholds: below -> split into smaller slices
    high_util: float = 0.8  # thresholds: above -> merge into larger slices
    mps_target_util: float = 0.7  # MPS: tenants' P90 load per GPU should stay under this
    min_gain_gpu_hours: float = 0.25  # hysteresis: smaller expected gains change nothing
    change_penalty_gpu_hours: float = 0.5  # packing: a change must win at least this much over keeping
    dwell_hours: float = 1.0  # a node changed less than this long ago is left alone
    max_change_share: float = 0.25  # at most this share of managed nodes changes or is held per run
    # a blocked change reads cordon-to-drain instead; apply mode holds the node until its pods end (planning.holds)
    cordon_to_drain: bool = False
    fallback: str = "none"  # "baseline": act on the trusted baseline when the model is not trusted
    consolidation: str = "whole-gpus"  # packing: move pods to make room for whole-GPU pods (and free nodes)
    eviction_cost_s: float = 300.0  # run time an evicted pod loses (restart, image, warm-up)
    # consolidation nodes: a node of fewer than LARGE_NODE_GPUS GPUs whose pods hold at most this share of them may
    # be emptied for the autoscaler; a larger node, at most release_below_large (draining half of an 8-GPU node
    # moved pods back and forth on the public traces; half of a smaller one did not: docs/backtest.md)
    release_below: float = 0.5
    release_below_large: float = 0.25
    # consolidation nodes: a node is emptied for release only when all its pods have run at least this long (an
    # evicted pod restarts, so this caps how often one pod is moved for a release)
    release_min_pod_age_hours: float = 6.0
    # packing: MPS tenants kept ready on empty nodes, this many times the fractional pods (<= 1/2 GPU); 0: none
    shared_reserve: float = 2.0
    # packing: empty nodes without MIG or MPS get PreferNoSchedule taints, one per size rank up to four
    # (planning.standby)
    standby: bool = True
    # packing: nodes with a MIG layout that host pods are marked scale-down-disabled for cluster-autoscaler
    # (planning.shaped)
    keep_shaped: bool = True
    # packing, with keep_shaped: nodes shared by MPS whose pods take more than this share of their tenants are
    # marked too (1: none; 0: every one that hosts pods) (planning.shaped)
    mps_release_below: float = 0.25
    # packing: a node selector pods pinned themselves to whose nodes hold at most this share of the fleet's GPUs
    # gets its nodes kept for them (planning.pinned); 0: off
    pinned_share: float = 0.125
    # packing, with pinned_share: the nodes of a kind (a value of a label pods pin themselves to) that holds at
    # most this share of the GPUs are kept for pinned pods too, pinned yet or not (planning.pinned); 0: only the
    # pinned kinds
    scarce_kind_share: float = 0.0625
    # a pin seen on a pod is remembered this long after a plan last saw it (planning.pinned)
    pinned_memory_hours: float = 168.0
    # packing: fractional pods on whole GPUs move to free MPS tenants (planning.rehome): "always", "waiting"
    # (only while whole-GPU pods wait) or "off"
    rehome: str = "always"
    # GPUs without MIG (T4, V100, ...) share only by MPS; the rollout verifies such a change by what the device
    # plugin advertises (no MIG manager runs there). False leaves their nodes alone.
    plan_gpus_without_mig: bool = True
    # packing: also the per-GPU split configs (sw-<k>of<n>-*: MIG on the first GPUs, the others whole).
    split_layouts: bool = True
    # packing: GPUs are kept whole (and nodes emptied) for the whole-GPU pods that waited most of the last hour
    # ("median") or for those still pending now, at most the hour's upper quantile ("pending-now").
    whole_gpu_demand: str = "median"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise PlannerConfigError(f"planner_policy must be one of {POLICIES}, got {self.policy!r}")
        if self.fallback not in FALLBACKS:
            raise PlannerConfigError(f"planner_fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        if not 0 <= self.low_util < self.high_util <= 1:
            raise PlannerConfigError("need 0 <= planner_low_util < planner_high_util <= 1")
        if not 0 < self.mps_target_util <= 1:
            raise PlannerConfigError("planner_mps_target_util must be in (0, 1]")
        if not 0 <= self.max_change_share <= 1:
            raise PlannerConfigError("planner_max_change_share must be in [0, 1]")
        if self.min_gain_gpu_hours < 0 or self.dwell_hours < 0 or self.change_penalty_gpu_hours < 0:
            raise PlannerConfigError("gains, penalties and dwell time cannot be negative")
        if self.consolidation not in CONSOLIDATION:
            raise PlannerConfigError(
                f"planner_consolidation must be one of {CONSOLIDATION}, got {self.consolidation!r}"
            )
        if self.whole_gpu_demand not in WHOLE_GPU_DEMAND:
            raise PlannerConfigError(
                f"planner_whole_gpu_demand must be one of {WHOLE_GPU_DEMAND}, got {self.whole_gpu_demand!r}"
            )
        if self.rehome not in REHOME:
            raise PlannerConfigError(f"planner_rehome must be one of {REHOME}, got {self.rehome!r}")
        if self.eviction_cost_s < 0:
            raise PlannerConfigError("planner_eviction_cost_s cannot be negative")
        if not 0 <= self.release_below <= 1:
            raise PlannerConfigError(f"planner_release_below must be in [0, 1], got {self.release_below}")
        if not 0 <= self.release_below_large <= 1:
            raise PlannerConfigError(
                f"planner_release_below_large must be in [0, 1], got {self.release_below_large}"
            )
        if not self.release_min_pod_age_hours >= 0:  # NaN too
            raise PlannerConfigError(
                f"planner_release_min_pod_age_hours cannot be negative, got {self.release_min_pod_age_hours}"
            )
        if not 0 <= self.mps_release_below <= 1:
            raise PlannerConfigError(
                f"planner_mps_release_below must be in [0, 1], got {self.mps_release_below}"
            )
        if not 0 <= self.pinned_share <= 1:
            raise PlannerConfigError(f"planner_pinned_share must be in [0, 1], got {self.pinned_share}")
        if not 0 <= self.scarce_kind_share <= 1:
            raise PlannerConfigError(
                f"planner_scarce_kind_share must be in [0, 1], got {self.scarce_kind_share}"
            )
        if not self.pinned_memory_hours >= 0:  # NaN too
            raise PlannerConfigError(
                f"planner_pinned_memory_hours cannot be negative, got {self.pinned_memory_hours}"
            )
        if not 0 <= self.shared_reserve <= 100 or math.isnan(self.shared_reserve):
            raise PlannerConfigError(f"planner_shared_reserve must be in [0, 100], got {self.shared_reserve}")

    @classmethod
    def from_settings(cls, settings: Settings) -> PlannerConfig:
        return cls(
            policy=settings.planner_policy,
            low_util=settings.planner_low_util,
            high_util=settings.planner_high_util,
            mps_target_util=settings.planner_mps_target_util,
            min_gain_gpu_hours=settings.planner_min_gain_gpu_hours,
            change_penalty_gpu_hours=settings.planner_change_penalty_gpu_hours,
            dwell_hours=settings.planner_dwell_hours,
            max_change_share=settings.planner_max_change_share,
            cordon_to_drain=settings.planner_cordon_to_drain,
            fallback=settings.planner_fallback,
            consolidation=settings.planner_consolidation,
            eviction_cost_s=settings.planner_eviction_cost_s,
            release_below=settings.planner_release_below,
            release_below_large=settings.planner_release_below_large,
            release_min_pod_age_hours=settings.planner_release_min_pod_age_hours,
            shared_reserve=settings.planner_shared_reserve,
            standby=settings.planner_standby,
            keep_shaped=settings.planner_keep_shaped,
            mps_release_below=settings.planner_mps_release_below,
            pinned_share=settings.planner_pinned_share,
            scarce_kind_share=settings.planner_scarce_kind_share,
            pinned_memory_hours=settings.planner_pinned_memory_hours,
            rehome=settings.planner_rehome,
            plan_gpus_without_mig=settings.planner_gpus_without_mig,
            split_layouts=settings.planner_split_layouts,
            whole_gpu_demand=settings.planner_whole_gpu_demand,
        )


@cache
def ladders(path: Path | None = None) -> Mapping[int, tuple[tuple[int, ...], ...]]:
    """Compute-slice compositions from largest to smallest slices, per GPU geometry (7 or 4 compute slices)."""
    raw = yaml.safe_load((path or CONFIG_DIR / "planner.yaml").read_text())["thresholds_ladders"]
    return {
        int(slices): tuple(tuple(int(g) for g in step) for step in steps) for slices, steps in raw.items()
    }
