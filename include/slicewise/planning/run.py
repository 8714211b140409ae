"""The steps of the ``gpu_partition_rollout`` DAG up to the plan, as plain functions the tasks call.

Each step reads and writes under ``plans/<run>/`` of the storage root and returns paths, so tasks stay thin
and a re-run of a task replaces its own output.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slicewise.catalog import load_catalog
from slicewise.errors import NotYet
from slicewise.planning import inputs, report, storage
from slicewise.planning.config import PlannerConfig
from slicewise.planning.planner import plan_fleet
from slicewise.planning.types import NodeObservation

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from slicewise.cluster.base import ClusterBackend
    from slicewise.settings import Settings

log = logging.getLogger(__name__)


class NoMetrics(NotYet, RuntimeError):
    """No validated metrics partition to forecast from."""


def resolve_trust(
    settings: Settings, tracking_uri: str, event_extra: dict[str, Any] | None, now: datetime
) -> inputs.Trust:
    """The fresh forecaster event's verdict for the planner's model, else the registry's."""
    if event_extra and settings.planner_model in event_extra:
        return inputs.trust_from_event(event_extra[settings.planner_model])
    from slicewise.forecasting import registry

    status = registry.status(tracking_uri, settings.planner_model)
    return inputs.trust_from_registry(
        status.champion, status.newest_at, status.newest_trust, now, settings.planner_max_forecast_age_hours
    )


def make_forecasts(
    settings: Settings,
    root: ObjectStoragePath,
    folder: ObjectStoragePath,
    trust: inputs.Trust,
    tracking_uri: str,
) -> ObjectStoragePath:
    """Forecast every series and the pending demand at the end of the newest validated hour; write them."""
    from slicewise import store
    from slicewise.forecasting import registry
    from slicewise.forecasting.spec import load_specs

    spec = next((s for s in load_specs() if s.name == settings.planner_model), None)
    if spec is None:
        raise ValueError(f"planner_model {settings.planner_model!r} is not a spec in models/")
    end = store.latest_published_end(root)
    if end is None:
        raise NoMetrics("no validated metrics partition yet: run gpu_metrics_ingest first")
    hours = math.ceil(spec.window_steps * spec.step_s / 3600) + 1
    gpu, demand = inputs.load_recent(root, end, hours)
    model = None
    if trust.predictor == "champion":
        from slicewise.forecasting.model import reads_current_features

        champion = registry.load_champion(tracking_uri, spec.name)
        if champion is None:  # the alias vanished between the verdict and now: act on nothing
            trust = inputs.Trust(inputs.FALLBACK_BASELINE, False, "champion alias disappeared")
        elif not reads_current_features(champion.model):
            trust = inputs.Trust(
                inputs.FALLBACK_BASELINE,
                False,
                f"champion v{champion.version} reads other input features; the first version trained on "
                "today's that beats the baselines replaces it",
            )
        else:
            model, trust = (
                champion.model,
                inputs.Trust("champion", trust.trusted, trust.why, champion.version),
            )
    series = inputs.series_forecasts(gpu, spec, trust, settings.planner_horizon_minutes, model)
    demand_forecasts = inputs.pending_demand(demand, spec.step_s, load_catalog())
    forecasts = inputs.assemble(series, demand_forecasts, trust, settings.planner_horizon_minutes)
    log.info(
        "forecasts by %s (%s) at %s: %d series, pending demand %s",
        forecasts.predictor,
        "trusted" if forecasts.trusted else f"not trusted: {forecasts.why_untrusted}",
        end.isoformat(),
        len(series),
        {d.resource: round(d.upper, 2) for d in demand_forecasts} or "none",
    )
    return storage.write_forecasts(folder, forecasts)


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
    forecasts = storage.read_forecasts(folder / storage.FORECASTS)
    observations = storage.read_observations(folder / storage.OBSERVED)
    plan = plan_fleet(observations, forecasts, load_catalog(), PlannerConfig.from_settings(settings), now)
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
