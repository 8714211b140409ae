"""What ``make demo`` prints at the end of its cycle: what changed and why, the champion's scores, the cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slicewise import store
from slicewise.settings import Settings


def lines(settings: Settings, tracking_uri: str, rollout_run: str | None = None) -> list[str]:
    """Readable lines about the rollout DAG run ``rollout_run`` (default: the newest plan and rollout); each
    part says plainly when it has nothing to show (never raises)."""
    out: list[str] = []
    for part in (changes, _champion, _cost):
        try:
            out += part(settings, tracking_uri, rollout_run)
        except Exception as exc:  # a summary must not hide the URLs that follow it
            out.append(f"({part.__name__.strip('_')}: unavailable: {exc})")
    return out


def changes(settings: Settings, _: str, rollout_run: str | None) -> list[str]:
    """The plan of ``rollout_run`` (default: the newest), what that run changed outside the waves, and its
    rollout's nodes."""
    from slicewise.planning import storage
    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.url import ledger_url
    from slicewise.rollout.wiring import holder

    root = store.storage_path(settings.storage_root)
    latest = root / "plans" / storage.LATEST
    out = []
    run_id = rollout_run or (json.loads(latest.read_text())["run_id"] if latest.exists() else None)
    plan_file = storage.run_folder(root, run_id) / storage.PLAN_JSON if run_id else None
    if plan_file is not None and plan_file.exists():
        plan = storage.read_plan(plan_file)
        out.append(f"plan ({plan.policy}, forecaster {plan.predictor}): {plan.counts()}")
        for node in plan.nodes:
            if node.action in ("change", "blocked", "cordon-to-drain", "uncordon"):
                out.append(
                    f"  {node.node} ({node.gpus} x {node.gpu_model}): {node.action} "
                    f"{node.current.describe()} -> {node.desired.describe()}; {node.rule}"
                )
    with Ledger.open(ledger_url(settings)) as ledger:
        marks = ledger.recent_marks(limit=50, run_id=holder(run_id)) if run_id else []
        out += [f"  outside the waves, {m.kind}: {m.message}" for m in reversed(marks)]
        # The ledger names a rollout's run "<dag_id>/<run_id>".
        rollouts = [
            r
            for r in ledger.recent_rollouts(limit=20)
            if rollout_run is None or r.run_id.split("/", 1)[-1] == rollout_run
        ][:1]
        if not rollouts:
            return [*out, "rollout: none (nothing to change, or recommend mode)"]
        rollout = rollouts[0]
        out.append(f"rollout #{rollout.id}: {rollout.status} — {rollout.reason}")
        for record in ledger.nodes(rollout.id):
            before = (record.snapshot or {}).get("labels", {})
            out.append(
                f"  {record.node}: {before} -> {dict(record.desired)}: {record.status} {record.detail}"
            )
    return out


def _champion(settings: Settings, tracking_uri: str, _: str | None) -> list[str]:
    from mlflow import MlflowClient

    from slicewise.forecasting import registry

    status = registry.status(tracking_uri, settings.planner_model)
    client = MlflowClient(tracking_uri=tracking_uri)
    versions = client.search_model_versions(f"name = '{settings.planner_model}'", max_results=1000)
    if not versions:
        return ["forecaster: no registered version yet"]
    newest = max(versions, key=lambda v: int(v.version))
    metrics: dict[str, Any] = client.get_run(str(newest.run_id)).data.metrics
    key = "pinball_p90"
    model = metrics.get(f"model.h60.{key}")
    baselines = {
        name.split(".")[0]: value
        for name, value in metrics.items()
        if name.endswith(f".h60.{key}") and not name.startswith(("model.", "champion."))
    }
    best = min(baselines.items(), key=lambda kv: kv[1]) if baselines else ("-", float("nan"))
    head = f"champion: version {status.champion}" if status.champion else "champion: none yet"
    return [
        f"{head}; newest version {newest.version}: P90 pinball at 60 min {model:.4f} vs best baseline "
        f"{best[0]} {best[1]:.4f}; gate: {newest.tags.get('gate', '?')} ({newest.tags.get('gate_reason', '')})"
    ]


def _cost(settings: Settings, _: str, __: str | None) -> list[str]:
    root = store.storage_path(settings.storage_root) / "reports"
    summaries = sorted(root.glob("*/summary.json")) if root.exists() else []
    if not summaries:
        return ["cost report: none yet"]
    newest = summaries[-1]
    summary = json.loads(newest.read_text())
    totals = summary.get("totals", {})
    currency = summary.get("currency", "USD")
    return [
        f"cost report {summary.get('date')}: {totals.get('gpuHours', 0):.1f} GPU-h allocated, "
        f"{totals.get('usedGpuHours', 0):.1f} used, {totals.get('idleGpuHours', 0):.1f} idle; "
        f"{totals.get('gpuCost', 0):.2f} {currency}, idle {totals.get('gpuCostIdle', 0):.2f} {currency}",
        f"  report: {newest.parent / 'report.html'}",
    ]


def failures(logs_dir: Path, dag_id: str, run_id: str) -> list[str]:
    """``task: ExcType: message`` for every task of the run whose latest attempt failed, read from the task
    logs Airflow wrote (``<logs>/dag_id=*/run_id=*/task_id=*/attempt=N.log``, one JSON event per line)."""
    run_dir = logs_dir / f"dag_id={dag_id}" / f"run_id={run_id}"
    out = []
    for task_dir in sorted(run_dir.glob("task_id=*")):
        attempts = sorted(task_dir.glob("attempt=*.log"), key=lambda p: int(p.stem.split("=")[1]))
        if not attempts:
            continue
        for raw in attempts[-1].read_text(errors="replace").splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            for detail in event.get("error_detail") or []:
                if not detail.get("is_cause"):
                    task = task_dir.name.removeprefix("task_id=")
                    out.append(f"{task}: {detail.get('exc_type')}: {detail.get('exc_value')}")
    return out
