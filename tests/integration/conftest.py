"""Real services for the integration tests: a Prometheus with backfilled simulated history, an Airflow DB.

Every process a fixture starts is stopped by that fixture, and only that process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from slicewise.simulator.backfill import backfill
from slicewise.simulator.faults import Faults
from slicewise.simulator.fleet import Fleet
from slicewise.stack import processes
from slicewise.stack import prometheus as prometheus_stack

#: A fixed, past stretch of time: tests never depend on the wall clock.
FIRST_HOUR = datetime(2026, 11, 20, 6, tzinfo=UTC)
CLEAN_HOURS = 3
STEP_S = 60
#: Hours after the clean ones, each with one kind of corruption written into Prometheus.
FAULT_HOURS = ("nan", "out_of_range", "duplicate_pod", "gaps", "drop_labels")
FAULTY_NODE = "sim-h100-0"


def hour(offset: int) -> datetime:
    return FIRST_HOUR + timedelta(hours=offset)


def fault_hour(kind: str) -> datetime:
    return hour(CLEAN_HOURS + FAULT_HOURS.index(kind))


def _seconds(moment: datetime) -> int:
    return int(moment.timestamp())


@dataclass(frozen=True)
class PrometheusWithHistory:
    url: str
    port: int
    fleet: Fleet


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    return Fleet.default()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[PrometheusWithHistory]:
    home = tmp_path_factory.mktemp("prometheus")
    labels = prometheus_stack.FLEET_TARGET_LABELS
    backfill(
        fleet, _seconds(hour(0)), _seconds(hour(CLEAN_HOURS)), STEP_S, home / "data", target_labels=labels
    )
    for kind in FAULT_HOURS:
        start = fault_hour(kind)
        # Gaps and missing labels cover part of the hour: the rest of the node's samples still arrive.
        end = start + (timedelta(minutes=20) if kind in ("gaps", "drop_labels") else timedelta(hours=1))
        faults = Faults(_seconds(start), _seconds(end), nodes=(FAULTY_NODE,), **{kind: True})
        backfill(
            fleet,
            _seconds(start),
            _seconds(start + timedelta(hours=1)),
            STEP_S,
            home / "data",
            faults=faults,
            target_labels=labels,
        )
    service = prometheus_stack.start(home)
    try:
        yield PrometheusWithHistory(service.url, service.port, fleet)
    finally:
        processes.stop(service, home / "run")


@pytest.fixture(scope="session")
def rollout_mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tracking server with an empty registry: the planner finds no champion and trusts a baseline."""
    from slicewise.stack import mlflow as mlflow_stack

    home = tmp_path_factory.mktemp("mlflow-rollout")
    service = mlflow_stack.start(home)
    try:
        yield service.url
    finally:
        processes.stop(service, home / "run")


@pytest.fixture()
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rollout_mlflow: str) -> Path:
    """Validated hours in a fresh storage root; the run's settings point at it and at MLflow."""
    from tests.support.rollout_dag import publish_history

    publish_history(tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_MLFLOW_TRACKING_URI", rollout_mlflow)
    return tmp_path


@pytest.fixture(scope="session")
def core_api(airflow_db: None) -> Iterator[Any]:
    """The real Core API (the routes behind the UI's Required Actions page), in process."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    with TestClient(create_app(apps="core")) as client:
        yield client
