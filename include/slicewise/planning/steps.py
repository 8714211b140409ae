"""The steps of the ``gpu_partition_rollout`` DAG up to the plan, as plain functions the tasks call.

Each step reads and writes under ``plans/<run>/`` of the storage root and returns paths, so tasks stay thin
and a re-run of a task replaces its own output.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slicewise.catalog import load_catalog
from slicewise.forecasting import forecasts as forecasts_mod
from slicewise.planning import report, storage
from slicewise.planning.config import PlannerConfig
from slicewise.planning.node_groups import parse_node_groups, ranking_note
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import NodeObservation, Pin

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from slicewise.cluster.base import ClusterBackend
    from slicewise.settings import Settings

log = logging.getLogger(__name__)


def resolve_trust(
    settings: Settings, tracking_uri: str, event_extra: dict[str, Any] | None, now: datetime
) -> forecasts_mod.Trust:
    """The fresh forecaster event's verdict for the planner's model, else the registry's."""
    if event_extra and settings.planner_model in event_extra:
        return forecasts_mod.trust_from_event(event_extra[settings.planner_model])
    from slicewise.forecasting import registry

    status = registry.status(tracking_uri, settings.planner_model)
    return forecasts_mod.trust_from_registry(
        status.champion, status.newest_at, status.newest_trust, now, settings.planner_max_forecast_age_hours
    )


def make_forecasts(
    settings: Settings,
    root: ObjectStoragePath,
    folder: ObjectStoragePath,
    trust: forecasts_mod.Trust,
    tracking_uri: str,
) -> ObjectStoragePath:
    """The forecasting front door's forecasts for this run, written to its folder."""
    return storage.write_forecasts(folder, forecasts_mod.fleet_forecasts(settings, root, trust, tracking_uri))


def observe(backend: ClusterBackend, folder: ObjectStoragePath) -> ObjectStoragePath:
    """Managed nodes and their GPU pods, read once (reads only)."""
    nodes = backend.list_nodes()
    observations = [NodeObservation(node, tuple(backend.list_gpu_pods(node.name))) for node in nodes]
    log.info(
        "observed %d managed nodes through the %s backend: %s",
        len(nodes),
        backend.name,
        ", ".join(f"{n.name}={n.mig_config}/{n.device_plugin_config or 'default'}" for n in nodes) or "none",
    )
    return storage.write_observations(folder, observations)


def make_plan(settings: Settings, folder: ObjectStoragePath, now: datetime) -> dict[str, Any]:
    """Plan from the run folder's forecasts and observations; write the plan; return the run's summary."""
    groups = parse_node_groups(settings.autoscaler_node_groups)  # malformed: fails before anything is read
    forecasts = storage.read_forecasts(folder / storage.FORECASTS)
    observations = storage.read_observations(folder / storage.OBSERVED)
    config = PlannerConfig.from_settings(settings)
    plan = plan_fleet(observations, forecasts, load_catalog(), config, now, remembered_pins(settings))
    if advice := review_advice(settings, now):
        plan = dataclasses.replace(plan, notes=(*plan.notes, *advice))
    if groups:
        plan = dataclasses.replace(
            plan,
            notes=(
                *plan.notes,
                ranking_note(
                    groups, plan, settings.autoscaler_namespace, settings.autoscaler_write_priorities
                ),
            ),
        )
    paths = storage.write_plan(folder, plan)
    log.info("plan:\n%s", report.text_table(plan))
    return {
        "policy": plan.policy,
        "predictor": plan.predictor,
        "trusted": plan.trusted,
        "counts": plan.counts(),
        "changes": [
            {"node": p.node, "desired": p.desired.describe(), "gain_gpu_hours": round(p.gain_gpu_hours, 3)}
            for p in plan.nodes
            if p.changes
        ],
        "paths": paths,
    }


def remembered_pins(settings: Settings) -> tuple[Pin, ...]:
    """The pins the newest published plan saw (planning.pinned). One that cannot be read costs the plan only its
    memory: logged, and the plan starts from the pins it sees now."""
    from slicewise import store

    try:
        return storage.latest_pins(store.storage_path(settings.storage_root))
    except Exception:
        log.warning("the newest plan's pins could not be read; this plan remembers none", exc_info=True)
        return ()


def review_advice(settings: Settings, now: datetime) -> list[str]:
    """The newest what-if review's word for the plan's notes: on ``planner_consolidation``, and on the other
    settings it compared where another value did better on both counts (none when it has none). A review that
    cannot be read costs the plan nothing: it is logged and left out."""
    from slicewise import store
    from slicewise.whatif import reviews

    try:
        review = reviews.newest(store.storage_path(settings.storage_root))
    except Exception:
        log.warning("the newest what-if review could not be read; the plan goes on without it", exc_info=True)
        return []
    if review is None:
        return []
    current = {
        "planner_standby": settings.planner_standby,
        "planner_whole_gpu_demand": settings.planner_whole_gpu_demand,
        "planner_mps_release_below": settings.planner_mps_release_below,
    }
    consolidation = reviews.consolidation_advice(review, settings.planner_consolidation, now)
    return [*([consolidation] if consolidation else []), *reviews.setting_advice(review, current, now)]
