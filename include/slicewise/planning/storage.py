"""Plans and their inputs under the storage root: ``plans/<run>/`` holds forecasts, observations and the plan.

Tasks hand each other these paths, never the data (ARCHITECTURE.md, "The DAGs").
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise.cluster.base import GpuNode, GpuPod, Taint
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning import report
from slicewise.planning.types import DesiredState, FleetPlan, NodeObservation, NodePlan, Pin, PodMove

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

FORECASTS, OBSERVED, PLAN_JSON = "forecasts.json", "observed.json", "plan.json"
PLAN_PARQUET, PLAN_MD, PLAN_HTML = "plan.parquet", "plan.md", "plan.html"


def run_folder(root: ObjectStoragePath, run_id: str) -> ObjectStoragePath:
    """``plans/<run id made path-safe>/``; a re-run of the same DAG run overwrites its own folder."""
    return root / "plans" / re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)


#: The run id's timestamp in a plan folder's name: Airflow run ids end in the run's ISO time, and
#: :func:`run_folder` turns ``:`` and ``+`` into ``_`` (``manual__2026-11-24T09_45_00_00_00``).
_RUN_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2})[_:](\d{2})[_:](\d{2})")


def run_time(name: str) -> datetime | None:
    """The time in a plan folder's name (UTC), or None."""
    match = _RUN_TIME.search(name)
    if not match:
        return None
    day, hh, mm, ss = match.groups()
    return datetime.fromisoformat(f"{day}T{hh}:{mm}:{ss}").replace(tzinfo=UTC)


def prune_runs(root: ObjectStoragePath, before: datetime, dry_run: bool = False) -> list[str]:
    """Remove the ``plans/<run>/`` folders whose name says they were made before ``before``; returns their names
    (``dry_run``: removing nothing).

    Never the newest plan's (:func:`mark_latest`), whose pins the next plan reads however old it is, nor a
    folder whose name holds no time (not made by :func:`run_folder`).
    """
    from slicewise import store

    latest = root / "plans" / LATEST
    keep = run_folder(root, _read(latest)["run_id"]).name if latest.exists() else None
    return store.prune_folders(
        root / "plans", lambda name: None if name == keep else run_time(name), before, dry_run
    )


def _write(path: ObjectStoragePath, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, allow_nan=True, default=_iso))


def _iso(value: Any) -> str:
    """Datetimes (a pin's last sighting) as ISO 8601; anything else JSON cannot hold is a bug."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _read(path: ObjectStoragePath) -> Any:
    return json.loads(path.read_text())


def write_forecasts(folder: ObjectStoragePath, forecasts: Forecasts) -> ObjectStoragePath:
    path = folder / FORECASTS
    _write(path, dataclasses.asdict(forecasts))
    return path


def read_forecasts(path: ObjectStoragePath) -> Forecasts:
    raw = _read(path)
    return Forecasts(
        series=tuple(SeriesForecast(**s) for s in raw["series"]),
        demand=tuple(
            DemandForecast(
                **{
                    **d,
                    "models": tuple(d.get("models", ())),
                    "node_selector": tuple((k, tuple(v)) for k, v in d.get("node_selector", ())),
                }
            )
            for d in raw["demand"]
        ),
        predictor=raw["predictor"],
        trusted=raw["trusted"],
        why_untrusted=raw["why_untrusted"],
        horizon_minutes=raw["horizon_minutes"],
    )


def write_observations(folder: ObjectStoragePath, observations: list[NodeObservation]) -> ObjectStoragePath:
    path = folder / OBSERVED
    raw = [dataclasses.asdict(o) for o in observations]
    for node in raw:
        for pod in node["pods"]:
            pod["started_at"] = pod["started_at"] and pod["started_at"].isoformat()
    _write(path, raw)
    return path


def read_observations(path: ObjectStoragePath) -> list[NodeObservation]:
    out = []
    for raw in _read(path):
        pods = tuple(
            GpuPod(
                **{
                    **p,
                    "blockers": tuple(p["blockers"]),
                    "node_selector": {k: tuple(v) for k, v in p.get("node_selector", {}).items()},
                    # None when not known, or written before it was kept
                    "started_at": p.get("started_at") and datetime.fromisoformat(p["started_at"]),
                }
            )
            for p in raw["pods"]
        )
        node = {**raw["node"], "taints": tuple(Taint(**t) for t in raw["node"].get("taints", ()))}
        out.append(NodeObservation(GpuNode(**node), pods))
    return out


def write_plan(folder: ObjectStoragePath, plan: FleetPlan) -> dict[str, str]:
    """Plan as JSON (machine), Parquet (analysis), Markdown and HTML (people); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / PLAN_JSON, dataclasses.asdict(plan))
    with (folder / PLAN_PARQUET).open("wb") as handle:
        report.frame(plan).to_parquet(handle, index=False)
    (folder / PLAN_MD).write_text(report.markdown(plan))
    (folder / PLAN_HTML).write_text(report.html_page(plan))
    return {name: str(folder / name) for name in (PLAN_JSON, PLAN_PARQUET, PLAN_MD, PLAN_HTML)}


LATEST = "latest.json"


def mark_latest(root: ObjectStoragePath, run_id: str, made_at: datetime) -> None:
    """Record the newest published plan (the hourly fallback run reads it to stay quiet)."""
    _write(root / "plans" / LATEST, {"run_id": run_id, "made_at": made_at.isoformat()})


def recent_plan(root: ObjectStoragePath, now: datetime, minutes: int) -> bool:
    """Whether a plan was published in the ``minutes`` before ``now``."""
    path = root / "plans" / LATEST
    if not path.exists():
        return False
    made_at = datetime.fromisoformat(_read(path)["made_at"])
    return timedelta(0) <= now - made_at < timedelta(minutes=minutes)


def read_plan(path: ObjectStoragePath) -> FleetPlan:
    """The plan written by :func:`write_plan` (``plan.json``)."""
    raw = _read(path)
    nodes = []
    for p in raw["nodes"]:
        nodes.append(
            NodePlan(
                **{
                    **p,
                    "current": DesiredState(**p["current"]),
                    "desired": DesiredState(**p["desired"]),
                    "reasons": tuple(p["reasons"]),
                    "disruption": tuple(p["disruption"]),
                }
            )
        )
    return FleetPlan(
        policy=raw["policy"],
        predictor=raw["predictor"],
        trusted=raw["trusted"],
        horizon_minutes=raw["horizon_minutes"],
        nodes=tuple(nodes),
        notes=tuple(raw["notes"]),
        standby_grades=_standby_grades(raw),
        scale_down_disabled=tuple(
            raw.get("scale_down_disabled", ())
        ),  # none in plans before planner_keep_shaped
        moves=tuple(  # none in plans before planner_rehome
            PodMove(**{**move, "to": tuple(move["to"])}) for move in raw.get("moves", ())
        ),
        # none in plans before planner_pinned_share
        pins=_pins(raw.get("pins", ())),
        scarce_pins=_pins(raw.get("scarce_pins", ())),
        pinned_nodes=tuple(raw.get("pinned_nodes", ())),
        scarce_kinds=tuple((str(label), str(value)) for label, value in raw.get("scarce_kinds", ())),
    )


def _pins(raw: Sequence[Mapping[str, Any]]) -> tuple[Pin, ...]:
    return tuple(
        Pin(
            tuple((str(label), tuple(str(v) for v in values)) for label, values in pin["selector"]),
            datetime.fromisoformat(pin["seen"]),
        )
        for pin in raw
    )


def latest_pins(root: ObjectStoragePath) -> tuple[Pin, ...]:
    """The pins of the newest published plan (:func:`mark_latest`), which the next plan remembers; none before
    the first plan."""
    latest = root / "plans" / LATEST
    if not latest.exists():
        return ()
    path = run_folder(root, _read(latest)["run_id"]) / PLAN_JSON
    return read_plan(path).pins if path.exists() else ()


def _standby_grades(raw: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """The plan's standby lists; plans written before the size grades carry two lists under other keys (and
    those before ``planner_standby`` none)."""
    if "standby_grades" in raw:
        return tuple(tuple(listed) for listed in raw["standby_grades"])
    older = (tuple(raw.get("standby", ())), tuple(raw.get("standby_large", ())))
    return tuple(listed for listed in older if listed)
