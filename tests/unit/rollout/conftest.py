"""A rollout harness: the simulated cluster on a fake clock, a real SQLite ledger, the shipped checks and a
scripted Prometheus, so every step of a rollout runs for real in milliseconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slicewise.catalog import load_catalog
from slicewise.cluster.base import ClusterBackend
from slicewise.planning.types import CHANGE, DesiredState, FleetPlan, NodePlan
from slicewise.rollout.checks import Check, load_checks
from slicewise.rollout.engine import Rollouts
from slicewise.rollout.ledger import Ledger
from slicewise.rollout.measure import MeasureError
from slicewise.rollout.procedure import Clock, Timing
from slicewise.settings import load_settings
from slicewise.simulator.cluster import SimulatedCluster
from slicewise.simulator.fleet import Fleet
from tests.support.clock import WORKDAY_INSTANT, FakeClock

#: The default fleet's nodes whose GPU pods may all be evicted, and a valid new configuration for each.
CHANGES = {
    "sim-a100-40-0": ("all-1g.5gb", "default", "all-balanced", "default"),
    "sim-a100-80-0": ("all-balanced", "default", "all-3g.40gb", "default"),
    "sim-h200-0": ("all-3g.71gb", "default", "all-balanced", "default"),
    "sim-h100-1": ("all-disabled", "mps-4", "all-disabled", "mps-2"),
}
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def fleet_plan(nodes: list[str] | None = None) -> FleetPlan:
    plans = []
    for name in nodes or list(CHANGES):
        mig, plugin, new_mig, new_plugin = CHANGES[name]
        plans.append(
            NodePlan(
                node=name,
                gpu_model="-",
                gpus=4,
                current=DesiredState(mig, plugin),
                desired=DesiredState(new_mig, new_plugin),
                action=CHANGE,
                policy="packing",
                rule="test",
                reasons=(),
                util_p50=0.5,
                util_upper=0.6,
                gain_gpu_hours=1.0,
            )
        )
    return FleetPlan("packing", "champion v1", True, 60, tuple(plans))


@dataclass
class ScriptedPrometheus:
    """Answers instant queries like Prometheus would, from rules a test sets: ``answer(query, at)`` gets the
    query and whether it asks about the time before the change (a baseline)."""

    now: Callable[[], datetime]
    answer: Callable[[str, bool], float | Exception | None] = field(default=lambda query, baseline: 0.5)
    queries: list[tuple[str, bool]] = field(default_factory=list)

    def instant(self, query: str, at: datetime | None = None) -> float | None:
        before = at is not None and at < self.now()
        self.queries.append((query, before))
        result = self.answer(query, before)
        if isinstance(result, Exception):
            raise MeasureError(str(result))
        return result


def healthy(query: str, baseline: bool) -> float | None:
    """Engine activity steady at 50 %, no XID, nothing pending."""
    if ENGINE in query:
        return 0.5
    return None


@dataclass
class Harness:
    clock: FakeClock
    cluster: SimulatedCluster
    ledger: Ledger
    prometheus: ScriptedPrometheus
    checks: list[Check]
    tmp: Path

    def rollouts(
        self,
        backend: ClusterBackend | None = None,
        run_id: str = "gpu_partition_rollout/run-1",
        **overrides: Any,
    ) -> Rollouts:
        ctx = Rollouts(
            backend=backend or self.cluster,
            ledger=self.ledger,
            catalog=load_catalog(),
            clock=self.wall(),
            timing=Timing(drain_deadline_s=120, mig_timeout_s=300, poll_s=5),
            cluster="simulated:test",
            run_id=run_id,
            shares=(0.5, 1.0),
            max_in_flight=2,
            lock_ttl_s=3600,
            takeover_prefix="gpu_partition_rollout/",
        )
        return replace(ctx, **overrides)

    def wall(self) -> Clock:
        def sleep(seconds: float) -> None:
            self.clock.now += seconds

        return Clock(now=lambda: datetime.fromtimestamp(self.clock.now, UTC), sleep=sleep)

    def labels(self, node: str) -> tuple[str, str]:
        got = self.cluster.get_node(node)
        return got.mig_config, got.device_plugin_config


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    clock = FakeClock(WORKDAY_INSTANT)
    cluster = SimulatedCluster.open(
        tmp_path / "state.json", fleet=Fleet.default(), clock=clock, reconfigure_s=20
    )
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    settings = load_settings({"analysis_count": 2, "analysis_interval_s": 30, "analysis_bake_s": 60})
    prometheus = ScriptedPrometheus(now=lambda: datetime.fromtimestamp(clock.now, UTC), answer=healthy)
    try:
        yield Harness(clock, cluster, ledger, prometheus, load_checks(settings), tmp_path)
    finally:
        ledger.close()
