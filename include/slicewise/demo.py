"""The embedded default, end to end: ``python -m slicewise.demo up|down|status`` (``make demo`` / ``make stop``).

``up`` starts, on 127.0.0.1 only, the simulated fleet's exporter, a real Prometheus holding a backfilled week of
the fleet's history and scraping the exporter live, an MLflow tracking server, and Airflow (API server + UI,
scheduler, DAG processor, triggerer). It then runs one hourly cycle through the real scheduler: it triggers
``gpu_metrics_ingest`` for the newest hours, and the Assets chain the rest (``forecaster_training`` →
``gpu_partition_rollout`` in apply mode on the simulated fleet → ``gpu_cost_report``); it follows each run and
prints what changed, the champion's scores and the cost headline. Everything it starts is recorded under
``var/`` (pid and start time), so ``down`` stops exactly that, and a second ``up`` reuses what is running.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from slicewise.cluster.factory import simulated_state_path
from slicewise.rollout.checks import dry_run_of
from slicewise.settings import load_settings, slicewise_home
from slicewise.stack import airflow as airflow_stack
from slicewise.stack import mlflow as mlflow_stack
from slicewise.stack import processes
from slicewise.stack import prometheus as prometheus_stack
from slicewise.stack.airflow_api import TERMINAL_RUN_STATES, AirflowApi

REPO = Path(__file__).resolve().parents[2]
INGEST_DAG = "gpu_metrics_ingest"
TRAINING_DAG = "forecaster_training"
ROLLOUT_DAG = "gpu_partition_rollout"
COST_DAG = "gpu_cost_report"
HISTORY_DAYS = 7
STEP_S = 60


def say(message: str) -> None:
    print(f"[slicewise] {message}", flush=True)


def start_exporter(home: Path) -> processes.Service:
    run_dir = home / "run"
    existing = processes.recorded("simulator", run_dir)
    if existing is not None:
        say(f"simulated fleet exporter already running at {existing.url}")
        return existing
    port = processes.free_port()
    argv = [
        sys.executable,
        "-m",
        "slicewise.cli",
        "simulate",
        "serve",
        "--host",
        processes.LOOPBACK,
        "--port",
        str(port),
        # Serve the layouts the simulated cluster's MIG manager has applied (state kept across restarts).
        "--cluster-state",
        str(simulated_state_path(load_settings())),
    ]
    service = processes.start(
        "simulator", argv, port=port, url=f"http://{processes.LOOPBACK}:{port}", run_dir=run_dir
    )
    processes.wait_http(f"{service.url}/metrics", service, timeout_s=60)
    say(f"simulated fleet exporter (dcgm-exporter + kube-state-metrics series) at {service.url}/metrics")
    return service


def backfill_history(prometheus_home: Path, now_s: int) -> None:
    """Backfill the fleet's history up to ``now_s``: a week on first start, the gap since the last one after."""
    from slicewise.simulator.backfill import backfill
    from slicewise.simulator.fleet import Fleet

    marker = prometheus_home / "backfilled_until"
    end_s = now_s - now_s % STEP_S
    start_s = int(marker.read_text()) if marker.exists() else end_s - HISTORY_DAYS * 86_400
    if end_s - start_s < STEP_S:
        return
    say(f"backfilling simulated history {_iso(start_s)} .. {_iso(end_s)} into Prometheus (promtool) ...")
    report = backfill(
        Fleet.default(),
        start_s,
        end_s,
        STEP_S,
        prometheus_home / "data",
        target_labels=prometheus_stack.FLEET_TARGET_LABELS,
    )
    marker.write_text(str(end_s))
    say(f"backfilled {len(report.blocks)} block(s) in {report.seconds:.0f}s")


def start_prometheus(home: Path, exporter: processes.Service) -> processes.Service:
    prometheus_home = home / "prometheus"
    existing = processes.recorded("prometheus", prometheus_home / "run")
    if existing is not None:
        say(f"Prometheus already running at {existing.url}")
        return existing
    backfill_history(prometheus_home, int(time.time()))
    target = exporter.url.removeprefix("http://")
    service = prometheus_stack.start(prometheus_home, scrape_targets=[target])
    say(f"Prometheus at {service.url} (scraping {target})")
    return service


def progress(states: dict[str, str]) -> str:
    """``12/56 tasks done`` and the tasks doing something now (not waiting, not done; upstream failures counted)."""
    done = sum(state in ("success", "skipped") for state in states.values())
    upstream = sum(state == "upstream_failed" for state in states.values())
    active = [f"{task}={state}" for task, state in states.items() if state not in QUIET_STATES]
    counts = f"{done}/{len(states)} tasks done" + (f", {upstream} upstream_failed" if upstream else "")
    return "  ".join([counts, *active])


#: Task states the progress line leaves out by name: not started yet, finished, or failed because of another.
QUIET_STATES = ("none", "success", "skipped", "upstream_failed")


def follow_run(api: AirflowApi, dag_id: str, run: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Follow one run until it ends, printing its task states as they change."""
    started = time.monotonic()
    last_line = ""
    while time.monotonic() - started < timeout_s:
        current = next((r for r in api.dag_runs(dag_id) if r["dag_run_id"] == run["dag_run_id"]), run)
        states = {
            ti["task_id"]: ti.get("state") or "none" for ti in api.task_instances(dag_id, run["dag_run_id"])
        }
        line = f"{dag_id}: {current['state']}  " + progress(states)
        if line != last_line:
            say(line)
            last_line = line
        if current["state"] in TERMINAL_RUN_STATES:
            return current
        time.sleep(3)
    raise TimeoutError(f"{dag_id} run {run['dag_run_id']} did not finish within {timeout_s:.0f}s")


def wait_for_new_run(api: AirflowApi, dag_id: str, after: str, timeout_s: float) -> dict[str, Any]:
    """The first run of ``dag_id`` queued after ``after`` (ISO time) — the scheduler creates it, e.g. from an
    Asset event — followed to its end."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if api.dag(dag_id) is not None:
            runs = [
                r for r in api.dag_runs(dag_id) if r.get("queued_at") and _time(r["queued_at"]) > _time(after)
            ]
            if runs:
                first = min(runs, key=lambda r: _time(r["queued_at"]))
                say(f"{dag_id}: run {first['dag_run_id']} ({first.get('run_type')}) started by the scheduler")
                return follow_run(api, dag_id, first, timeout_s - (time.monotonic() - started))
        time.sleep(3)
    raise TimeoutError(f"the scheduler started no {dag_id} run within {timeout_s:.0f}s")


def ingest_hours(api: AirflowApi, hour_end: datetime, hours: int, timeout_s: float) -> list[dict[str, Any]]:
    """Run ``gpu_metrics_ingest`` for the newest ``hours`` complete hours, one run per hour, and follow each.

    One run per request rather than one backfill: on the SQLite metadata DB the scheduler and the DAG processor
    hold the write lock often, and a backfill request answered 503 after creating some of its runs left a run the
    scheduler could not create task instances for (seen in CI: queued for ten minutes). A single run with a fixed
    id is one insert, so retrying it is safe; 409 means it exists (an earlier answer was lost, or the scheduler
    made the newest hour's own run)."""
    deadline = time.monotonic() + timeout_s
    while api.dag(INGEST_DAG) is None:  # the DAG processor has not parsed the file yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"{INGEST_DAG} was not parsed within {timeout_s:.0f}s")
        time.sleep(2)
    ends = sorted(hour_end - timedelta(hours=back) for back in range(hours))
    for end in ends:
        _create_hour_run(api, end - timedelta(hours=1), end)
    found: dict[datetime, dict[str, Any]] = {}
    while len(found) < len(ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{INGEST_DAG}: runs for {sorted(set(ends) - set(found))} never appeared")
        for run in api.dag_runs(INGEST_DAG, limit=50):
            run_end = run.get("data_interval_end")
            if run_end and _time(run_end) in ends:
                found.setdefault(_time(run_end), run)
        time.sleep(2)
    return [follow_run(api, INGEST_DAG, found[end], deadline - time.monotonic()) for end in ends]


def _create_hour_run(api: AirflowApi, start: datetime, end: datetime, attempts: int = 10) -> None:
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

    def locked(exc: BaseException) -> bool:
        # 500/503: the SQLite metadata DB was locked a moment and the insert rolled back; try again.
        return isinstance(exc, requests.HTTPError) and _status(exc) in (500, 503)

    try:
        for attempt in Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_fixed(3),
            retry=retry_if_exception(locked),
            reraise=True,
        ):
            with attempt:
                api.create_run(
                    INGEST_DAG,
                    run_id=f"demo_history__{start.isoformat()}",
                    logical_date=start.isoformat(),
                    data_interval=(start.isoformat(), end.isoformat()),
                )
    except requests.HTTPError as exc:
        if _status(exc) != 409:  # 409: the run exists (an earlier answer was lost, or the scheduler's own)
            raise


def _status(exc: requests.HTTPError) -> int:
    return exc.response.status_code if exc.response is not None else 0


#: What the embedded demo changes from the shipped defaults, and why (docs/demo.md).
DEMO_SETTINGS = {
    # Show the whole loop: production clusters stay on `recommend` until someone sets apply on purpose.
    "SLICEWISE_ROLLOUT_MODE": "apply",
    # A model trained on the demo's first hours rarely beats the baselines yet: act on the trusted baseline.
    "SLICEWISE_PLANNER_FALLBACK": "baseline",
    # The published rule acts on utilisation alone, so the demo's fleet changes at almost any hour: sim-a100-80-1
    # (notebooks and bursty embedders, all evictable) has its hourly P90 under the band in 503 of 504 hours of
    # three simulated weeks, sim-h100-1 outside working hours (packing, the default, changes layouts only when
    # pending demand needs it).
    "SLICEWISE_PLANNER_POLICY": "thresholds",
    # ... but on an upper forecast: a trusted champion's P90 put sim-a100-80-1 at 41 % in CI (14:05 UTC), just
    # over the shipped 40 %, and the cycle showed no rollout; the fallback baseline p90_last_hour reaches 60 % on
    # weekday peaks (the most in six simulated weeks). 65 % clears it at every minute (tests/unit/
    # test_demo_settings.py); nodes under it split one step, at most half the fleet per plan.
    "SLICEWISE_PLANNER_LOW_UTIL": "0.65",
    # Six nodes near the band: a trusted champion's forecast can put every expected gain under the shipped 0.25
    # GPU-h/h hysteresis (seen in CI: sim-h100-1 at 0.12), and the cycle would show no rollout.
    "SLICEWISE_PLANNER_MIN_GAIN_GPU_HOURS": "0.05",
    "SLICEWISE_PLANNER_MAX_CHANGE_SHARE": "0.5",
    "SLICEWISE_ROLLOUT_WAVE_SHARES": "1.0",
    # The simulator re-draws its pending pods every 15 minutes, and in working hours a wave that spans a
    # re-draw saw pending GPU requests rise by 5 with no pod of its own among them (seen in CI at 13:15 UTC):
    # the shipped tolerance of 2 rolled the demo back for the simulator's noise.
    "SLICEWISE_ANALYSIS_PENDING_TOLERANCE": "8",
    # The simulated load after a layout change is a fresh draw, not the same pods' load: a node nearly idle before
    # can draw no running pod for the seconds the demo measures, and the utilisation-drop rule rolled the demo
    # back for that (2 of 2 rollouts on 2026-12-07). It is measured and shown, and decides nothing here.
    "SLICEWISE_ANALYSIS_EXTRA_CHECKS": json.dumps([dry_run_of("utilisation-drop")]),
    # Minutes in production; seconds here so the cycle ends while you watch.
    "SLICEWISE_SIMULATED_RECONFIGURE_S": "5",
    "SLICEWISE_ROLLOUT_POLL_S": "2",
    "SLICEWISE_ANALYSIS_BAKE_S": "30",
    "SLICEWISE_ANALYSIS_INTERVAL_S": "15",
    "SLICEWISE_ANALYSIS_COUNT": "2",
}
#: Validated hours the forecaster needs before its first update: one held out with its 60-minute future, and
#: enough before it to train on (forecasting.steps.split_steps).
FIRST_HOURS = 4


def up(timeout_s: float, extra_settings: dict[str, str] | None = None) -> int:
    """Start (or reuse) the stack and run one full hourly cycle through the real scheduler."""
    from slicewise import demo_summary

    home = slicewise_home()
    began = time.monotonic()
    exporter = start_exporter(home)
    prometheus = start_prometheus(home, exporter)
    mlflow = mlflow_stack.start(home / "mlflow")
    say(f"MLflow tracking server and model registry at {mlflow.url}")
    say("starting Airflow (API server + UI, scheduler, DAG processor, triggerer) ...")
    connections = {
        "prometheus_default": {
            "conn_type": "http",
            "host": processes.LOOPBACK,
            "port": prometheus.port,
            "description": "Prometheus of the embedded simulated fleet",
        },
        "mlflow_default": {
            "conn_type": "http",
            "host": processes.LOOPBACK,
            "port": mlflow.port,
            "description": "MLflow of the embedded stack",
        },
    }
    env = {"SLICEWISE_HOME": str(home), **DEMO_SETTINGS, **(extra_settings or {})}
    stack = airflow_stack.start(home / "airflow", REPO, connections, env)
    say(f"Airflow UI at {stack.api_url} (login {stack.username} / {stack.password})")
    api = AirflowApi(stack.api_url, stack.username, stack.password)
    hour_end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    cycle_start = datetime.now(UTC).isoformat()

    say(f"1/4 {INGEST_DAG}: the {FIRST_HOURS} newest complete hours from Prometheus, validated ...")
    ingested = ingest_hours(api, hour_end, FIRST_HOURS, timeout_s)
    say("2/4 forecaster_training: started by the slicewise_metrics Asset ...")
    training = _until_trained(api, cycle_start, timeout_s)
    say("3/4 gpu_partition_rollout (apply mode): started by the slicewise_forecaster Asset ...")
    # The Asset event is emitted by the upstream run's last task, before that run is marked finished: the
    # downstream run is queued after the upstream one started, not necessarily after it ended.
    rollout = wait_for_new_run(api, ROLLOUT_DAG, str(training.get("start_date") or cycle_start), timeout_s)
    say("4/4 gpu_cost_report: started by the slicewise_rollout Asset ...")
    report = wait_for_new_run(api, COST_DAG, str(rollout.get("start_date") or cycle_start), timeout_s)

    print()
    say(f"cycle done in {time.monotonic() - began:.0f}s")
    for line in demo_summary.lines(load_settings(), mlflow.url, str(rollout["dag_run_id"])):
        say(line)
    runs = [*ingested, training, rollout, report]
    say(f"Airflow UI:  {stack.api_url}  login {stack.username} / {stack.password}")
    say(f"MLflow UI:   {mlflow.url}")
    say(f"Prometheus:  {prometheus.url}/graph")
    say("stop everything with: make stop")
    failed = [r["dag_id"] + " " + r["dag_run_id"] for r in runs if r["state"] != "success"]
    if failed:
        say("runs that did not succeed: " + ", ".join(failed))
        for run in runs:
            if run["state"] != "success":
                for line in demo_summary.failures(
                    home / "airflow" / "logs", run["dag_id"], run["dag_run_id"]
                ):
                    say(f"  {run['dag_id']} {line}")
    return 0 if not failed else 1


def _until_trained(api: AirflowApi, after: str, timeout_s: float) -> dict[str, Any]:
    """Follow forecaster runs until one registers a model (an early run may skip: too little history yet)."""
    deadline = time.monotonic() + timeout_s
    seen = after
    while time.monotonic() < deadline:
        run = wait_for_new_run(api, TRAINING_DAG, seen, deadline - time.monotonic())
        states = {
            ti["task_id"]: ti.get("state") for ti in api.task_instances(TRAINING_DAG, run["dag_run_id"])
        }
        if run["state"] != "success" or states.get("publish_forecaster") == "success":
            return run
        say(f"{TRAINING_DAG}: that run skipped (not enough validated history yet); waiting for the next")
        seen = str(run.get("queued_at"))
    raise TimeoutError(f"{TRAINING_DAG} registered no model within {timeout_s:.0f}s")


def down() -> int:
    home = slicewise_home()
    stopped = airflow_stack.stop(home / "airflow")
    for name, run_dir in (
        ("mlflow", home / "mlflow" / "run"),
        ("prometheus", home / "prometheus" / "run"),
        ("simulator", home / "run"),
    ):
        service = processes.recorded(name, run_dir)
        if service is not None:
            processes.stop(service, run_dir)
            stopped.append(name)
    say(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def status() -> int:
    home = slicewise_home()
    recorded = {
        **{name: processes.recorded(name, home / "airflow" / "run") for name in airflow_stack.COMPONENTS},
        "prometheus": processes.recorded("prometheus", home / "prometheus" / "run"),
        "mlflow": processes.recorded("mlflow", home / "mlflow" / "run"),
        "simulator": processes.recorded("simulator", home / "run"),
    }
    print(json.dumps({name: (s.url if s else None) for name, s in recorded.items()}, indent=2))
    return 0


def _time(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slicewise.demo", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for each step (900)")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            return up(args.timeout)
        return down() if args.action == "down" else status()
    except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
        say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
