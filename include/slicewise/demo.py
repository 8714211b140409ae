"""The embedded default, end to end: ``python -m slicewise.demo up|down|status`` (``make demo`` / ``make stop``).

``up`` starts, on 127.0.0.1 only, the simulated fleet's exporter, a real Prometheus holding a backfilled week of
the fleet's history and scraping the exporter live, an MLflow tracking server, and Airflow (API server + UI,
scheduler, DAG processor, triggerer). It then follows the scheduler's run of ``gpu_metrics_ingest`` for the
latest complete hour and prints where everything is. Everything it starts is recorded under ``var/`` (pid and
start time), so ``down`` stops exactly that, and a second ``up`` reuses what is running.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slicewise import store
from slicewise.cluster.factory import simulated_state_path
from slicewise.settings import load_settings, slicewise_home
from slicewise.stack import airflow as airflow_stack
from slicewise.stack import mlflow as mlflow_stack
from slicewise.stack import processes
from slicewise.stack import prometheus as prometheus_stack
from slicewise.stack.airflow_api import TERMINAL_RUN_STATES, AirflowApi

REPO = Path(__file__).resolve().parents[2]
INGEST_DAG = "gpu_metrics_ingest"
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


def follow_latest_run(
    api: AirflowApi, dag_id: str, interval_end: datetime, timeout_s: float
) -> dict[str, Any]:
    """Wait for the scheduler's run of ``dag_id`` ending at ``interval_end``; print task progress."""
    started = time.monotonic()
    wanted = interval_end.strftime("%Y-%m-%dT%H:%M:%S")
    run: dict[str, Any] | None = None
    triggered = False
    last_line = ""
    while time.monotonic() - started < timeout_s:
        if api.dag(dag_id) is None:  # the DAG processor has not parsed the file yet
            time.sleep(2)
            continue
        runs = [r for r in api.dag_runs(dag_id) if str(r.get("data_interval_end", "")).startswith(wanted)]
        if runs:
            run = runs[0]
        elif not triggered and time.monotonic() - started > 90:
            # The scheduler creates the hour's run by itself; if it has not after 90 s, ask for one.
            # A manual run owns the data interval that ends at its logical date.
            run = api.trigger(dag_id, logical_date=interval_end.isoformat())
            triggered = True
        if run is not None:
            states = {
                ti["task_id"]: ti.get("state") or "none"
                for ti in api.task_instances(dag_id, run["dag_run_id"])
            }
            line = f"{dag_id} {run['dag_run_id']}: {run['state']}  " + "  ".join(
                f"{k}={v}" for k, v in states.items()
            )
            if line != last_line:
                say(line)
                last_line = line
            if run["state"] in TERMINAL_RUN_STATES:
                return run
        time.sleep(3)
    raise TimeoutError(f"{dag_id} did not finish the hour ending {wanted} within {timeout_s:.0f}s")


def up(timeout_s: float) -> int:
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
    stack = airflow_stack.start(home / "airflow", REPO, connections, {"SLICEWISE_HOME": str(home)})
    say(f"Airflow UI at {stack.api_url} (login {stack.username} / {stack.password})")
    api = AirflowApi(stack.api_url, stack.username, stack.password)
    now = datetime.now(UTC)
    hour_end = now.replace(minute=0, second=0, microsecond=0)
    run = follow_latest_run(api, INGEST_DAG, hour_end, timeout_s)
    settings = load_settings()
    paths = store.PartitionPaths(store.storage_path(settings.storage_root), hour_end - timedelta(hours=1))
    manifest = store.read_manifest(paths.published)
    print()
    say(f"done in {time.monotonic() - began:.0f}s: {INGEST_DAG} run {run['dag_run_id']} {run['state']}")
    if manifest is not None:
        say(
            f"partition: {paths.published}  ({manifest['gpu_rows']} GPU rows, {manifest['gpu_series']} "
            f"series, {manifest['demand_rows']} demand rows)"
        )
    else:
        say(f"no published partition; quarantine (if any): {paths.quarantine}")
    say(f"Airflow UI:  {stack.api_url}/dags/{INGEST_DAG}  login {stack.username} / {stack.password}")
    say(f"Prometheus:  {prometheus.url}/graph")
    say(f"MLflow UI:   {mlflow.url}")
    say("stop everything with: make stop")
    return 0 if run["state"] == "success" else 1


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


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slicewise.demo", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the DAG run (600)")
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
