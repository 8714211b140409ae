"""Airflow for the embedded default: API server (UI), scheduler, DAG processor and triggerer as separate
processes on 127.0.0.1, SQLite metadata, LocalExecutor.

``airflow standalone`` is not used: it binds its log server to 0.0.0.0 and leaves orphans on SIGTERM.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slicewise.stack import processes

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
ADMIN_USER = "admin"
#: How long the scheduler's, DAG processor's and triggerer's connections to the SQLite metadata DB wait for
#: another process's write lock. At Python's default, 5 s, the scheduler's loop failed with "database is locked"
#: while TensorFlow tasks started on 2 cores, and the scheduler exited (seen in CI, leaving the demo's runs
#: queued). Not the API server: there a request's sync commit on the event loop can wait for a transaction whose
#: own commit needs that loop, so a long wait is a deadlock for its whole length (seen in CI: 60 s heartbeats);
#: at 5 s it fails fast and the caller retries. Airflow imports it by path (``[database]
#: sql_alchemy_connect_args``).
SQLITE_CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
PATIENT_COMPONENTS = ("scheduler", "dag-processor", "triggerer")


@dataclass(frozen=True)
class AirflowStack:
    home: Path
    api_url: str
    username: str
    password: str
    env: Mapping[str, str]


def airflow_binary() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def environment(
    home: Path,
    repo: Path,
    api_port: int,
    connections: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment every Airflow component of the embedded stack shares."""
    secrets_file = home / "secrets.json"
    if not secrets_file.exists():
        home.mkdir(parents=True, exist_ok=True)
        # One JWT secret (64+ bytes) for all components, kept across restarts so issued tokens stay valid.
        secrets_file.write_text(
            json.dumps({"jwt_secret": secrets.token_urlsafe(64), "password": secrets.token_urlsafe(12)})
        )
        secrets_file.chmod(0o600)
    stored = json.loads(secrets_file.read_text())
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({ADMIN_USER: stored["password"]}))
    passwords.chmod(0o600)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",  # a 2-core machine: more concurrent tasks only thrash
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{processes.LOOPBACK}:{api_port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API_AUTH__JWT_SECRET": stored["jwt_secret"],
        "AIRFLOW__API__BASE_URL": f"http://{processes.LOOPBACK}:{api_port}",
        "AIRFLOW__API__HOST": processes.LOOPBACK,
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(processes.free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(processes.free_port()),
        "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "30",
        # On 2 busy cores the API server can take longer than the 5 s default to answer a starting task.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        **{f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn) for conn_id, conn in connections.items()},
        **(extra or {}),
    }
    return env


def migrate(env: Mapping[str, str], log: Path) -> None:
    with log.open("ab") as out:
        result = subprocess.run(
            [airflow_binary(), "db", "migrate"],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed; see {log}:\n{processes.tail(log)}")


def start(
    home: Path,
    repo: Path,
    connections: Mapping[str, Mapping[str, Any]],
    extra_env: Mapping[str, str] | None = None,
) -> AirflowStack:
    """Start (or reuse) the four components; the API server's port is kept across restarts when possible."""
    run_dir = home / "run"
    running = {name: processes.recorded(name, run_dir) for name in COMPONENTS}
    api = running["api-server"]
    api_port = api.port if api is not None else processes.free_port()
    env = environment(home, repo, api_port, connections, extra_env)
    if not all(running.values()):
        run_dir.mkdir(parents=True, exist_ok=True)
        migrate(env, run_dir / "migrate.log")
    for name in COMPONENTS:
        if running[name] is not None:
            continue
        argv = [airflow_binary(), name]
        if name == "api-server":
            argv += ["--host", processes.LOOPBACK, "--port", str(api_port), "--workers", "1"]
        if name in ("scheduler", "triggerer"):
            argv.append("--skip-serve-logs")  # the UI reads local log files; no log server on 0.0.0.0
        running[name] = processes.start(
            name,
            argv,
            port=api_port if name == "api-server" else 0,
            url=f"http://{processes.LOOPBACK}:{api_port}",
            run_dir=run_dir,
            env={**env, **_patience(name)},
        )
    api_service = running["api-server"]
    assert api_service is not None
    processes.wait_http(f"{api_service.url}/api/v2/monitor/health", api_service, timeout_s=180)
    password = json.loads((home / "secrets.json").read_text())["password"]
    return AirflowStack(home, api_service.url, ADMIN_USER, password, env)


def _patience(component: str) -> dict[str, str]:
    """The SQLite lock wait of ``component`` (see ``SQLITE_CONNECT_ARGS``)."""
    if component not in PATIENT_COMPONENTS:
        return {}
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.SQLITE_CONNECT_ARGS"}


def stop(home: Path) -> list[str]:
    stopped = []
    for name in reversed(COMPONENTS):
        service = processes.recorded(name, home / "run")
        if service is not None:
            processes.stop(service, home / "run")
            stopped.append(name)
    return stopped
