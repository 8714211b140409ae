"""Builds a rollout's collaborators from settings and Airflow Connections (only called inside tasks)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from slicewise.catalog import load_catalog
from slicewise.planning.node_groups import NodeGroup, parse_node_groups
from slicewise.rollout.engine import Rollouts
from slicewise.rollout.procedure import Clock, Timing
from slicewise.rollout.waves import parse_shares
from slicewise.settings import SettingsError

if TYPE_CHECKING:
    from slicewise.settings import Settings

DAG_ID = "gpu_partition_rollout"


def wall_clock() -> Clock:
    """Real time: a rollout waits on real nodes, so it lives on the wall clock (planning never does)."""
    return Clock(now=lambda: datetime.now(UTC), sleep=time.sleep)


def cluster_identity(settings: Settings) -> str:
    """Which cluster the lock and the ledger rows belong to."""
    if settings.cluster_backend == "kubernetes":
        return f"kubernetes:{settings.kubernetes_conn_id}"
    from slicewise.cluster.factory import simulated_state_path

    return f"simulated:{simulated_state_path(settings)}"


def holder(run_id: str) -> str:
    """The lock holder and the ledger's run id: DAG and run, so a later run of the same DAG (which
    ``max_active_runs=1`` starts only after this one ended) may take over a lock this run left behind."""
    return f"{DAG_ID}/{run_id}"


def groups_to_rank(settings: Settings) -> tuple[NodeGroup, ...]:
    """The autoscaler's node groups apply mode ranks in the priority expander's ConfigMap: none unless it writes
    it (``autoscaler_write_priorities``; the plan's note says the ranking either way)."""
    return parse_node_groups(settings.autoscaler_node_groups) if settings.autoscaler_write_priorities else ()


def ledger_history_s(settings: Settings) -> float:
    """How long the ledger keeps ended rollouts and marks, in seconds (0: for ever), from
    ``ledger_retention_days``; never shorter than ``planner_dwell_hours``, which the planner reads each node's last
    change back over. SettingsError on a negative or non-finite value."""
    days = settings.ledger_retention_days
    if not (math.isfinite(days) and days >= 0):
        raise SettingsError(
            f"setting ledger_retention_days={days!r}: expected 0 (keep for ever) or more days"
        )
    return 0.0 if days == 0 else max(days * 86400, settings.planner_dwell_hours * 3600)


def rollouts(
    settings: Settings, run_id: str, clock: Clock | None = None, *, holder_id: str | None = None
) -> Rollouts:
    """The DAG run ``run_id``'s rollout context; ``holder_id`` instead names the lock holder and ledger run id
    outright (``slicewise rollout``: its own runs, or acting as the run that started a rollout)."""
    from slicewise.cluster.factory import open_backend
    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.url import ledger_url

    return Rollouts(
        backend=open_backend(settings),
        ledger=Ledger.open(ledger_url(settings)),
        catalog=load_catalog(),
        clock=clock or wall_clock(),
        timing=Timing(
            drain_deadline_s=settings.rollout_drain_deadline_s,
            mig_timeout_s=settings.rollout_mig_timeout_s,
            poll_s=settings.rollout_poll_s,
        ),
        cluster=cluster_identity(settings),
        run_id=holder_id or holder(run_id),
        shares=parse_shares(settings.rollout_wave_shares),
        max_in_flight=settings.rollout_max_in_flight,
        lock_ttl_s=settings.rollout_lock_ttl_s,
        # Only the DAG's runs take over a lock its runs left: they run one at a time, so its holder has ended. A
        # person's command never does: a DAG run holding the lock may be alive.
        takeover_prefix=f"{DAG_ID}/" if holder_id is None else "",
        node_groups=groups_to_rank(settings),
        autoscaler_namespace=settings.autoscaler_namespace,
        keep_history_s=ledger_history_s(settings),
    )
