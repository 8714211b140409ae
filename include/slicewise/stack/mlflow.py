"""A real MLflow tracking server for the embedded default and the tests: SQLite backend, local artifacts,
loopback only."""

from __future__ import annotations

import sys
from pathlib import Path

from slicewise.stack import processes


def start(home: Path, *, port: int | None = None, name: str = "mlflow") -> processes.Service:
    """Start (or reuse) ``mlflow server`` with its database and artifacts under ``home``."""
    existing = processes.recorded(name, home / "run")
    if existing is not None:
        return existing
    port = port or processes.free_port()
    home.mkdir(parents=True, exist_ok=True)
    url = f"http://{processes.LOOPBACK}:{port}"
    argv = [
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--host",
        processes.LOOPBACK,
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{home / 'mlflow.db'}",
        "--artifacts-destination",
        (home / "artifacts").as_uri(),
    ]
    # The server's background job workers take ~1.8 GB; Slicewise needs none of them.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    service = processes.start(name, argv, port=port, url=url, run_dir=home / "run", env=env)
    processes.wait_http(f"{url}/health", service, timeout_s=120)
    return service
