"""Forecasting's front door for the planner: :func:`fleet_forecasts` returns the :class:`Forecasts` a plan acts
on — every series' load and the pending GPU demand over the horizon, by the trusted predictor (the champion, or
a baseline with the reason) — and :class:`Trust` says which predictor that is (the forecaster Asset's verdict or
the MLflow registry's). Planning only consumes what this returns."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from slicewise import schema
from slicewise.catalog import Catalog, ksm_resource, load_catalog, resource_for_profile
from slicewise.catalog.resources import GPU_RESOURCE, WHOLE_GPUS
from slicewise.errors import NotYet

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath

    from slicewise.forecasting.spec import ForecasterSpec
    from slicewise.settings import Settings

log = logging.getLogger(__name__)

TRUSTED = ("model", "champion")
FALLBACK_BASELINE = "p90_last_hour"


class NoMetrics(NotYet, RuntimeError):
    """No validated metrics partition to forecast from."""


@dataclass(frozen=True)
class SeriesForecast:
    """Forecast mean load (engine activity 0-1) of one GPU or MIG instance over the planning horizon."""

    hostname: str
    gpu: int
    gpu_instance_id: str  # "" for a whole GPU
    mig_profile: str  # "" for a whole GPU
    p50: float
    upper: float  # the upper quantile the planner acts on (P90 by default)
    memory: float = float("nan")  # framebuffer used / capacity, latest hour's P90; NaN = unknown


@dataclass(frozen=True)
class DemandForecast:
    """Forecast pending requests of one kind (:mod:`slicewise.planning.demand`): pods that cannot be scheduled.

    ``p50`` / ``upper`` count requests: units of ``resource`` (nvidia.com/gpu, nvidia.com/mig-1g.10gb), or pods
    when they declare a ``share`` or ask for ``gpus`` > 1; for ``slicewise.io/whole-gpus`` without ``gpus``,
    GPUs."""

    resource: str
    p50: float
    upper: float
    share: float | None = None  # the share of a GPU each pod declares: any form at least that big hosts it
    gpus: int = 1  # GPUs per pod, on one node
    models: tuple[str, ...] = ()  # catalogue GPU models the pods allow; () = any
    # The node labels the pods' nodeSelector names, (label, allowed values) pairs (planning.demand.Selector).
    node_selector: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Requests pending at the last step (now); None where unknown (forecasts written before it was kept).
    latest: float | None = None


@dataclass(frozen=True)
class Forecasts:
    """What the forecaster says, and whether the planner may act on it."""

    series: tuple[SeriesForecast, ...]
    demand: tuple[DemandForecast, ...]
    predictor: str  # "champion vN" or a baseline name
    trusted: bool  # champion fresh and better than the baselines (the forecaster Asset's verdict)
    why_untrusted: str = ""
    horizon_minutes: int = 60

    def for_node(self, node: str) -> list[SeriesForecast]:
        return [s for s in self.series if s.hostname == node]


@dataclass(frozen=True)
class Trust:
    """Which predictor the planner uses and whether it may act on it."""

    predictor: str  # "champion" or a baseline name
    trusted: bool
    why: str
    version: str | None = None  # the champion's registry version, when the predictor is the champion


def trust_from_event(extra: dict[str, Any]) -> Trust:
    """The verdict the forecaster DAG published with the ``slicewise_forecaster`` Asset event."""
    trust = str(extra.get("trust", ""))
    version = extra.get("champion_version")
    if trust in TRUSTED and version:
        return Trust("champion", True, str(extra.get("reason", "")), str(version))
    from slicewise.forecasting.baselines import BASELINES

    reason = str(extra.get("reason") or "no champion")
    baseline = str(extra.get("baseline") or "")
    if baseline not in BASELINES:  # "none": too little held-out data to score any baseline yet
        return Trust(FALLBACK_BASELINE, False, f"no baseline could be scored ({reason})", None)
    return Trust(baseline, False, f"baseline {baseline} wins: {reason}", None)


def trust_from_registry(
    champion: str | None, trained_at: datetime | None, tag_trust: str, now: datetime, max_age_hours: float
) -> Trust:
    """The verdict for a run without a fresh event: the champion, if it is fresh and beat the baselines."""
    if champion is None:
        return Trust(FALLBACK_BASELINE, False, "no champion in the registry yet")
    if trained_at is None or now - trained_at > timedelta(hours=max_age_hours):
        when = f"{trained_at:%Y-%m-%d %H:%M}" if trained_at else "never"
        return Trust(
            FALLBACK_BASELINE, False, f"forecaster is stale: last update {when}, over {max_age_hours:g} h ago"
        )
    if tag_trust not in TRUSTED:
        return Trust(
            FALLBACK_BASELINE, False, f"the newest evaluation trusted {tag_trust or 'nothing'}, not the model"
        )
    return Trust("champion", True, "fresh champion that beat the baselines", champion)


def load_recent(root: ObjectStoragePath, end: datetime, hours: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """GPU and demand frames of the published hours in ``[end - hours, end)`` (quarantined hours are skipped)."""
    import pandas as pd

    from slicewise import store

    gpu, demand = [], []
    for back in range(hours, 0, -1):
        folder = store.PartitionPaths(root, end - timedelta(hours=back)).published
        if store.read_manifest(folder) is None:
            continue
        gpu.append(store.read_frame(folder / store.GPU_FILE)[0])
        demand.append(store.read_frame(folder / store.DEMAND_FILE)[0])
    if not gpu:
        return pd.DataFrame(columns=list(schema.GPU_COLUMNS)), pd.DataFrame(
            columns=list(schema.DEMAND_COLUMNS)
        )
    return pd.concat(gpu, ignore_index=True), pd.concat(demand, ignore_index=True)


def series_forecasts(
    gpu: pd.DataFrame, spec: ForecasterSpec, trust: Trust, horizon_minutes: int, model: Any | None
) -> list[SeriesForecast]:
    """Per GPU / MIG instance forecasts at the end of ``gpu`` by the trusted predictor."""
    from slicewise.forecasting.inference import predict_latest
    from slicewise.forecasting.model import predict
    from slicewise.forecasting.windows import panel_from_frame

    if gpu.empty:
        return []
    panel = panel_from_frame(gpu, spec.signal, spec.step_s)
    if model is not None:
        predicted = predict_latest(panel, spec, horizon_minutes, model=lambda x: predict(model, x))
    else:
        predicted = predict_latest(panel, spec, horizon_minutes, baseline=trust.predictor)
    profiles = (
        gpu.drop_duplicates(["hostname", "gpu", "gpu_instance_id"])
        .set_index(["hostname", "gpu", "gpu_instance_id"])["mig_profile"]
        .astype(str)
        .to_dict()
    )
    return [
        SeriesForecast(
            host, int(index), str(instance), profiles.get((host, index, instance), ""), p50, upper, memory
        )
        for (host, index, instance), (p50, upper, memory) in sorted(predicted.items())
    ]


def ksm_resource_names(catalog: Catalog) -> dict[str, str]:
    """kube-state-metrics' sanitised resource names (``[^a-zA-Z0-9_]`` -> ``_``) back to the real ones."""
    real = {"nvidia.com/gpu", "nvidia.com/gpu.shared"}
    for model in catalog.models.values():
        real.update(resource_for_profile(name) for name in model.profiles)
    return {ksm_resource(name): name for name in real}


def pending_demand(
    demand: pd.DataFrame, step_s: int, catalog: Catalog, quantile: float = 0.9
) -> list[DemandForecast]:
    """Pending GPU requests per kind over the frame's last hour: P50 and upper quantile of the per-step totals
    (steps with nothing pending count as 0), and the last step's total (``latest``: pending now). A baseline
    forecast, stated as such in docs/planner.md.

    Each pod is counted once (:mod:`slicewise.planning.demand`): units of its MIG resource, one ``nvidia.com/gpu``
    request, or — asking for k > 1 GPUs — one pod of ``WHOLE_GPUS`` with ``gpus=k``; a pod that declares a share
    (``declared_share``) is one request of that share, and one whose nodeSelector names a GPU product
    (``gpu_product``) allows that catalogue model only (a product the catalogue does not know: no model); every
    GPU label its nodeSelector names (product, sharing strategy, replicas: ``gpu_product``, ``gpu_sharing``,
    ``gpu_replicas``) is also its node selector, matched with the labels a plan gives the node."""

    if demand.empty:
        return []
    seconds = _seconds(demand["timestamp"])
    end = int(seconds.max())
    steps = np.arange(end - 3600 + step_s, end + 1, step_s)
    recent = demand[(seconds > end - 3600) & demand["unschedulable"].astype(bool).to_numpy()]
    if recent.empty:
        return []
    names = ksm_resource_names(catalog)
    recent = recent.assign(
        second=_seconds(recent["timestamp"]),
        resource=recent["resource"].astype(str).map(lambda r: names.get(r, r)),
        **_forms(recent, catalog),
    )
    keys = ["resource", "share", "models", "node_selector"]
    Key = tuple[str, float | None, int, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]
    pools: dict[Key, pd.Series] = {}
    if "pod" in recent.columns:
        per_pod = recent.groupby(["second", "namespace", "pod", *keys], observed=True, dropna=False)
        pods = per_pod["requested"].sum().reset_index()
        pods["gpus"] = np.where(
            pods["resource"] == GPU_RESOURCE, pods["requested"].round().clip(lower=1), 1
        ).astype(int)
        # A pod's units of its resource count as requests, except a pod of one kind counted once: k GPUs, or a
        # declared share.
        pods["count"] = np.where((pods["gpus"] > 1) | pods["share"].notna(), 1.0, pods["requested"])
    else:
        pods = recent.assign(gpus=1, count=recent["requested"])
    for key, group in pods.groupby([*keys, "gpus"], dropna=False):
        resource, share, models, selector, gpus = cast("tuple[str, float, Any, Any, int]", key)
        size = None if math.isnan(share) else float(share)
        pools[(str(resource), size, int(gpus), models, selector)] = group.groupby("second")["count"].sum()
    out = []
    for (resource, size, gpus, models, selector), per_second in pools.items():
        per_step = per_second.reindex(steps, fill_value=0.0).to_numpy(float)
        upper = float(np.quantile(per_step, quantile))
        median = float(np.median(per_step))
        if upper > 0 or median > 0:
            kind = WHOLE_GPUS if gpus > 1 else resource
            out.append(
                DemandForecast(kind, median, upper, size, gpus, models, selector, latest=float(per_step[-1]))
            )
    return sorted(out, key=lambda d: (d.resource, d.gpus, d.share or 0.0, d.models, d.node_selector))


def _forms(recent: pd.DataFrame, catalog: Catalog) -> dict[str, Any]:
    """The ``share``, ``models`` and ``node_selector`` columns: each row's declared share (NaN: none), allowed
    catalogue models (()) and the GPU labels its nodeSelector names, matched as labels too (()): GFD writes the
    product with ``-SHARED`` on a node shared by MPS, where a pod selecting the plain product no longer fits."""
    shares = recent["declared_share"] if "declared_share" in recent.columns else np.nan
    named = [
        (schema.SELECTOR_NODE_LABELS[form], recent[form].fillna("").astype(str).to_numpy())
        for form in schema.DEMAND_SELECTORS
        if form in recent.columns  # partitions written before these columns name none
    ]
    selectors = [
        tuple(sorted((label, (str(values[i]),)) for label, values in named if values[i]))
        for i in range(len(recent))
    ]
    products = recent["gpu_product"].fillna("").astype(str) if "gpu_product" in recent.columns else None
    if products is None:
        return {"share": shares, "models": [()] * len(recent), "node_selector": selectors}

    def allowed(product: str) -> tuple[str, ...]:
        if not product:
            return ()
        model = catalog.model_for_product(product)
        return (model.name,) if model is not None else (f"unknown product {product}",)

    return {"share": shares, "models": products.map(allowed), "node_selector": selectors}


def assemble(
    series: list[SeriesForecast], demand: list[DemandForecast], trust: Trust, horizon_minutes: int
) -> Forecasts:
    predictor = f"champion v{trust.version}" if trust.predictor == "champion" else trust.predictor
    return Forecasts(
        series=tuple(series),
        demand=tuple(demand),
        predictor=predictor,
        trusted=trust.trusted,
        why_untrusted="" if trust.trusted else trust.why,
        horizon_minutes=horizon_minutes,
    )


def _seconds(column: pd.Series) -> np.ndarray:
    """Unix seconds of a datetime column, whatever its resolution (pandas 3 infers microseconds)."""
    import pandas as pd

    return np.asarray(pd.to_datetime(column, utc=True).dt.as_unit("s").astype("int64").to_numpy())


def history_hours(spec: ForecasterSpec) -> int:
    """Hours of validated metrics the forecasts read: the model's window in whole hours, and one more."""
    return math.ceil(spec.window_steps * spec.step_s / 3600) + 1


def forecasts_from(
    gpu: pd.DataFrame,
    demand: pd.DataFrame,
    spec: ForecasterSpec,
    trust: Trust,
    horizon_minutes: int,
    model: Any | None = None,
) -> Forecasts:
    """The forecasts at the end of recent GPU samples and pod demand, by the predictor ``trust`` names
    (``model`` when that is the champion)."""
    series = series_forecasts(gpu, spec, trust, horizon_minutes, model)
    return assemble(series, pending_demand(demand, spec.step_s, load_catalog()), trust, horizon_minutes)


def fleet_forecasts(
    settings: Settings, root: ObjectStoragePath, trust: Trust, tracking_uri: str
) -> Forecasts:
    """The front door: every GPU / MIG instance's load and the pending demand over the planning horizon, from
    the newest validated hours, by the predictor ``trust`` names (the champion from MLflow, else a baseline; a
    champion that vanished or reads other features falls back to the baseline, saying why)."""
    from slicewise import store
    from slicewise.forecasting import registry
    from slicewise.forecasting.spec import load_specs

    spec = next((s for s in load_specs() if s.name == settings.planner_model), None)
    if spec is None:
        raise ValueError(f"planner_model {settings.planner_model!r} is not a spec in models/")
    end = store.latest_published_end(root)
    if end is None:
        raise NoMetrics("no validated metrics partition yet: run gpu_metrics_ingest first")
    gpu, demand = load_recent(root, end, history_hours(spec))
    model = None
    if trust.predictor == "champion":
        from slicewise.forecasting.model import reads_current_features

        champion = registry.load_champion(tracking_uri, spec.name)
        if champion is None:  # the alias vanished between the verdict and now: act on nothing
            trust = Trust(FALLBACK_BASELINE, False, "champion alias disappeared")
        elif not reads_current_features(champion.model):
            trust = Trust(
                FALLBACK_BASELINE,
                False,
                f"champion v{champion.version} reads other input features; the first version trained on "
                "today's that beats the baselines replaces it",
            )
        else:
            model, trust = (
                champion.model,
                Trust("champion", trust.trusted, trust.why, champion.version),
            )
    forecasts = forecasts_from(gpu, demand, spec, trust, settings.planner_horizon_minutes, model)
    log.info(
        "forecasts by %s (%s) at %s: %d series, pending demand %s",
        forecasts.predictor,
        "trusted" if forecasts.trusted else f"not trusted: {forecasts.why_untrusted}",
        end.isoformat(),
        len(forecasts.series),
        {d.resource: round(d.upper, 2) for d in forecasts.demand} or "none",
    )
    return forecasts
