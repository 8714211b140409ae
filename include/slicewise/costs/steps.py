"""The steps of the ``gpu_cost_report`` DAG as plain functions: collect → allocate → analyse → publish.

Each step reads and writes JSON or Parquet files under a work folder ``_staging/cost_report/<date>-<run>/`` of
the storage root and returns their paths, so the tasks hand each other paths, never frames, and a retried
task simply rewrites its own files. ``publish`` writes the report into ``out/`` and moves it to
``reports/<date>/`` with :func:`slicewise.store.publish` (manifest last), so readers never see a half-written
report and a re-run of a day replaces it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slicewise.costs import accuracy, allocation, idle, page, report, savings, sources
from slicewise.costs.pricing import load_prices
from slicewise.costs.samples import MIG_SHARE_MODES
from slicewise.costs.savings import AppliedChange, RolloutCounts
from slicewise.costs.window import ReportWindow
from slicewise.errors import NotYet, PermanentError
from slicewise.settings import SettingsError

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from slicewise.settings import Settings

log = logging.getLogger(__name__)

INPUTS, ALLOCATION, EVIDENCE, ALLOCATION_META = (
    "inputs.json",
    "allocation.parquet",
    "evidence.parquet",
    "meta.json",
)
IDLE, SAVINGS, ACCURACY, ACCURACY_POINTS = (
    "idle.json",
    "savings.json",
    "accuracy.json",
    "accuracy_points.parquet",
)


class NoValidatedHours(PermanentError, RuntimeError):
    """The report window holds no validated metrics partition although earlier hours have one: data lost after
    Slicewise began collecting does not appear by retrying, so a daily report fails at once."""


class NothingToReportYet(NotYet, RuntimeError):
    """Nothing validated to report yet: the window ends before the first validated hour (a new install), or a
    partial report early in the day. The report skips with the reason."""


def report_folder(root: ObjectStoragePath, day: str) -> ObjectStoragePath:
    return root / "reports" / day


def work_folder(root: ObjectStoragePath, window: ReportWindow, run_id: str) -> ObjectStoragePath:
    token = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)
    return root / "_staging" / "cost_report" / f"{window.day.isoformat()}-{token}"


def prune_work_folders(root: ObjectStoragePath, before: datetime, dry_run: bool = False) -> list[str]:
    """Remove the work folders of reports of days that ended before ``before`` (``publish`` removes its own; a
    run that failed for good leaves it); returns their names (``dry_run``: removing nothing)."""
    from slicewise import store

    return store.prune_folders(root / "_staging" / "cost_report", _day_end, before, dry_run)


def _day_end(name: str) -> datetime | None:
    """The end of the day a work folder's name starts with (:func:`work_folder`), or None."""
    from datetime import UTC, timedelta

    try:
        return datetime.strptime(name[:10], "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)
    except ValueError:
        return None


def _write_json(path: ObjectStoragePath, payload: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, default=str, allow_nan=False))
    return str(path)


def _read_json(path: str) -> Any:
    from slicewise import store

    return json.loads(store.storage_path(path).read_text())


def _write_parquet(frame: Any, path: ObjectStoragePath) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        frame.to_parquet(handle, index=False)
    return str(path)


def _read_parquet(path: str) -> Any:
    import pandas as pd

    from slicewise import store

    with store.storage_path(path).open("rb") as handle:
        return pd.read_parquet(handle)


def _window(raw: dict[str, Any]) -> ReportWindow:
    from datetime import date

    return ReportWindow(
        date.fromisoformat(raw["date"]),
        datetime.fromisoformat(raw["start"]),
        datetime.fromisoformat(raw["end"]),
        bool(raw["partial"]),
    )


# -- collect ------------------------------------------------------------------------------------------------
def collect(settings: Settings, window: ReportWindow, run_id: str, ledger_url: str | None) -> str:
    """Find the window's validated hours (and the hours before it the savings need), the planner's runs and
    the ledger's changes; write them to ``inputs.json``. The price file and the team map are checked first,
    before any work. NothingToReportYet / NoValidatedHours when the window has no validated hour."""
    from slicewise import store
    from slicewise.rollout.ledger import Ledger

    if settings.cost_mig_share not in MIG_SHARE_MODES:
        raise SettingsError(
            f"cost_mig_share must be one of {MIG_SHARE_MODES}, got {settings.cost_mig_share!r}"
        )
    allocation.team_map(settings.cost_team_map)  # a malformed map fails here, before any work
    _prices(settings)  # so does a missing or malformed price file
    root = store.storage_path(settings.storage_root)
    hours = sources.published_hours(root, window.hours)
    if not hours:
        span = f"{window.start:%Y-%m-%d %H:%M} - {window.end:%H:%M} UTC"
        collected = store.published_hour_starts(root)
        if not collected or collected[0] >= window.end:
            earliest = (
                f"the first validated hour starts {collected[0]:%Y-%m-%d %H:%M} UTC, after this window"
                if collected
                else "no hour has been validated yet"
            )
            raise NothingToReportYet(f"report skipped: nothing to report for {span}: {earliest}")
        missing = f"no validated metrics partition in {span} although earlier hours have one"
        if window.partial:  # early in the day there may be nothing yet: not a failure
            raise NothingToReportYet(f"partial report skipped: {missing}")
        raise NoValidatedHours(f"{missing} (run gpu_metrics_ingest for those hours first)")
    first = sources.lookback_start(window.start, settings.cost_savings_window_hours)
    lookback = sources.published_hours(root, _hours_between(first, window.start))
    runs = sources.plan_runs(root, since=window.start - sources.PLAN_LOOKBACK)
    changes: list[AppliedChange] = []
    counts = RolloutCounts(0, 0)
    if ledger_url:
        with Ledger.open(ledger_url) as ledger:
            changes, counts = sources.ledger_activity(ledger, window.start, window.end)
    folder = work_folder(root, window, run_id)
    _remove_stale_work(folder)
    path = _write_json(
        folder / INPUTS,
        {
            "window": window.as_dict(),
            "hours": [[h.isoformat(), f] for h, f in hours],
            "lookback": [[h.isoformat(), f] for h, f in lookback],
            "plan_runs": [asdict(r) | {"made_at": r.made_at.isoformat()} for r in runs],
            "changes": [asdict(c) | {"changed_at": c.changed_at.isoformat()} for c in changes],
            "counts": asdict(counts),
            "work": str(folder),
        },
    )
    log.info(
        "cost report %s%s: %d of %d hours validated, %d hours before it for savings, %d planner runs, "
        "%d applied changes in the ledger (%d in the window), %d rollbacks",
        window.day,
        " (partial)" if window.partial else "",
        len(hours),
        len(window.hours),
        len(lookback),
        len(runs),
        len(changes),
        counts.changes,
        counts.rollbacks,
    )
    return path


def _remove_stale_work(folder: ObjectStoragePath) -> None:
    """Work folders of the same day left by crashed earlier runs (one run at a time: none is in use)."""
    parent = folder.parent
    if not parent.exists():
        return
    day = folder.name.split("-", 3)[:3]
    for other in parent.iterdir():
        if other.name != folder.name and other.name.split("-", 3)[:3] == day:
            other.fs.rm(other.path, recursive=True)


def _hours_between(start: datetime, end: datetime) -> list[datetime]:
    from datetime import timedelta

    out, hour = [], start
    while hour < end:
        out.append(hour)
        hour += timedelta(hours=1)
    return out


def _inputs(path: str) -> dict[str, Any]:
    raw: dict[str, Any] = _read_json(path)
    raw["window_obj"] = _window(raw["window"])
    raw["runs_obj"] = [
        sources.PlanRun(r["folder"], datetime.fromisoformat(r["made_at"]), r["observed"], r["forecasts"])
        for r in raw["plan_runs"]
    ]
    raw["changes_obj"] = [
        AppliedChange(
            c["rollout_id"],
            c["node"],
            datetime.fromisoformat(c["changed_at"]),
            c["before"],
            c["after"],
            c["run_id"],
        )
        for c in raw["changes"]
    ]
    counts = raw["counts"]
    raw["counts_obj"] = RolloutCounts(
        counts["changes"], counts["rollbacks"], counts["failed"], tuple(counts["rolled_back_ids"])
    )
    return raw


# -- allocate -----------------------------------------------------------------------------------------------
def allocate(settings: Settings, inputs_path: str) -> dict[str, str]:
    """Allocation rows of every collected hour and the idle evidence of the window's hours, hour by hour (so
    memory stays one hour's frames); returns the paths of ``allocation.parquet``, ``evidence.parquet`` and
    ``meta.json`` (capacity of the physical GPUs in the window, step)."""
    import pandas as pd

    from slicewise import store
    from slicewise.catalog import load_catalog
    from slicewise.costs.samples import hour_samples

    inputs = _inputs(inputs_path)
    window: ReportWindow = inputs["window_obj"]
    history = sources.layout_history(inputs["runs_obj"], window.end, inputs["changes_obj"])
    prices = _prices(settings)
    teams = allocation.team_map(settings.cost_team_map)
    thresholds = idle.IdleThresholds.from_settings(settings)
    catalog = load_catalog()
    rows, evidence = [], []
    capacity = 0.0
    steps = set()
    in_window = {h for h, _ in inputs["hours"]}
    for hour, folder in [*inputs["lookback"], *inputs["hours"]]:
        gpu, demand, step_s = sources.read_hour(folder)
        steps.add(step_s)
        samples = hour_samples(
            gpu,
            demand,
            catalog=catalog,
            history=history,
            mig_share_mode=settings.cost_mig_share,
            step_s=step_s,
        )
        rows.append(
            allocation.allocation_rows(samples, prices=prices, history=history, teams=teams, step_s=step_s)
        )
        if hour in in_window:
            evidence.append(idle.hour_evidence(samples, thresholds))
            capacity += allocation.physical_gpu_hours(gpu, step_s)
    work = store.storage_path(inputs["work"])
    all_rows = pd.concat(rows, ignore_index=True)
    all_evidence = pd.concat(evidence, ignore_index=True)
    paths = {
        "allocation": _write_parquet(all_rows, work / ALLOCATION),
        "evidence": _write_parquet(all_evidence, work / EVIDENCE),
        "meta": _write_json(
            work / ALLOCATION_META, {"capacity_gpu_hours": capacity, "step_s": sorted(steps)}
        ),
    }
    window_rows = all_rows[all_rows["start"].isin({_z(h) for h in in_window})]
    totals = allocation.totals(window_rows)
    log.info(
        "allocated %.2f GPU-h (physical GPUs: %.2f GPU-h): used %.2f, idle %.2f, unallocated %.2f; %d rows",
        totals["gpuHours"],
        capacity,
        totals["usedGpuHours"],
        totals["idleGpuHours"],
        totals["unallocatedGpuHours"],
        len(window_rows),
    )
    return paths


def _z(iso: str) -> str:
    """An ISO hour as the allocation rows spell ``start``."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%dT%H:%M:%SZ")


def _prices(settings: Settings) -> Any:
    from pathlib import Path

    return load_prices(Path(settings.cost_prices_file) if settings.cost_prices_file else None)


# -- analyse ------------------------------------------------------------------------------------------------
def analyse(settings: Settings, inputs_path: str, allocated: dict[str, str]) -> dict[str, str]:
    """Idle attribution, savings and forecast accuracy; returns the paths of their JSON files."""
    import pandas as pd

    from slicewise import store

    inputs = _inputs(inputs_path)
    window: ReportWindow = inputs["window_obj"]
    rows = _read_parquet(allocated["allocation"])
    in_window = {_z(h) for h, _ in inputs["hours"]}
    window_rows = rows[rows["start"].isin(in_window)]
    evidence = _read_parquet(allocated["evidence"])
    thresholds = idle.IdleThresholds.from_settings(settings)
    findings = [f.as_dict() for f in idle.attribute_idle(evidence, window_rows, thresholds)]
    saved = savings.estimate(
        [c for c in inputs["changes_obj"] if window.start <= c.changed_at < window.end],
        rows,
        window.start,
        window.end,
        settings.cost_savings_window_hours,
    )
    sets = sources.forecast_sets(inputs["runs_obj"], window.start, window.end)
    loads = []
    step_s = 60
    for _, folder in [*inputs["lookback"], *inputs["hours"]]:
        gpu, _, step_s = sources.read_hour(folder)
        loads.append(gpu[["timestamp", "hostname", "gpu", "gpu_instance_id", "engine_active"]])
    points = accuracy.scored(sets, pd.concat(loads, ignore_index=True), step_s)
    work = store.storage_path(inputs["work"])
    paths = {
        "idle": _write_json(work / IDLE, report.json_safe(findings)),
        "savings": _write_json(work / SAVINGS, report.json_safe(saved)),
        "accuracy": _write_json(work / ACCURACY, report.json_safe(accuracy.summarise(points))),
        "accuracy_points": _write_parquet(points, work / ACCURACY_POINTS),
    }
    log.info(
        "idle attribution: %d findings; savings (estimate): %.2f GPU-h over %d changes; forecast sets scored: %d",
        len(findings),
        saved["gpuHours"],
        len(saved["changes"]),
        len(sets),
    )
    return paths


# -- publish ------------------------------------------------------------------------------------------------
def publish(
    settings: Settings,
    inputs_path: str,
    allocated: dict[str, str],
    analysed: dict[str, str],
    generated_at: str,
) -> dict[str, Any]:
    """Render ``summary.json``, ``allocation.csv`` and ``report.html`` and move them to ``reports/<date>/``;
    returns the asset event's extra (headline totals and the paths). Removes the work folder."""
    from slicewise import store
    from slicewise.costs import plots

    inputs = _inputs(inputs_path)
    window: ReportWindow = inputs["window_obj"]
    rows = _read_parquet(allocated["allocation"])
    in_window = {_z(h) for h, _ in inputs["hours"]}
    rows = rows[rows["start"].isin(in_window)].reset_index(drop=True)
    meta = _read_json(allocated["meta"])
    prices = _prices(settings)
    saved = _read_json(analysed["savings"])
    summary = report.build_summary(
        window=window,
        rows=rows,
        capacity_gpu_hours=float(meta["capacity_gpu_hours"]),
        published=[h for h, _ in inputs["hours"]],
        prices=prices,
        mig_share=settings.cost_mig_share,
        idle=_read_json(analysed["idle"]),
        savings=saved,
        accuracy=_read_json(analysed["accuracy"]),
        counts=inputs["counts_obj"],
        generated_at=generated_at,
    )
    namespaces = allocation.by_namespace(rows)
    figures = {
        "cost_over_time": plots.cost_by_namespace_over_time(rows, prices.currency),
        "allocated_used_idle": plots.allocated_used_idle(namespaces),
        "savings": plots.savings(saved["changes"]),
        "forecast_vs_actual": plots.forecast_vs_actual(
            accuracy.fleet_series(_read_parquet(analysed["accuracy_points"]))
        ),
    }
    root = store.storage_path(settings.storage_root)
    work = store.storage_path(inputs["work"])
    out = work / "out"
    if out.exists():
        out.fs.rm(out.path, recursive=True)  # a retried publish starts from a clean folder
    out.mkdir(parents=True, exist_ok=True)
    (out / report.SUMMARY).write_text(json.dumps(summary, indent=1, allow_nan=False))
    (out / report.ALLOCATION_CSV).write_text(report.allocation_csv(rows))
    (out / report.REPORT_HTML).write_text(page.render_html(summary, rows, figures))
    target = report_folder(root, window.day.isoformat())
    store.publish(
        out,
        target,
        {
            "date": summary["date"],
            "partial": window.partial,
            "generated_at": generated_at,
            "files": summary["files"],
        },
    )
    work.fs.rm(work.path, recursive=True)
    totals = summary["totals"]
    log.info(
        "published %s: cost %.2f %s (idle %.2f, unallocated %.2f), %d changes, %d rollbacks",
        target,
        totals["gpuCost"],
        prices.currency,
        totals["gpuCostIdle"],
        totals["unallocatedCost"],
        summary["changes"],
        summary["rollbacks"],
    )
    return {
        "date": summary["date"],
        "partial": window.partial,
        "window": summary["window"],
        "currency": summary["currency"],
        "totals": {
            k: totals[k]
            for k in (
                "gpuHours",
                "usedGpuHours",
                "idleGpuHours",
                "unallocatedGpuHours",
                "gpuCost",
                "gpuCostIdle",
                "unallocatedCost",
            )
        },
        "savings": {"gpuHours": saved["gpuHours"], "cost": saved["cost"], "estimate": True},
        "changes": summary["changes"],
        "rollbacks": summary["rollbacks"],
        "path": str(target),
        "report": str(target / report.REPORT_HTML),
        "summary": str(target / report.SUMMARY),
    }
