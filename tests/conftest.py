"""Test-wide environment: an isolated Airflow home and storage per test session, set before Airflow loads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"

_SESSION_HOME = Path(tempfile.mkdtemp(prefix="slicewise-tests-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_SESSION_HOME / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_SESSION_HOME / 'airflow' / 'airflow.db'}",
        "SLICEWISE_HOME": str(_SESSION_HOME / "slicewise"),
        # The in-process Core API answers human-in-the-loop requests in tests without a login.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    }
)
# Never inherit a developer's overrides into the tests.
for _name in [n for n in os.environ if n.startswith("SLICEWISE_") and n != "SLICEWISE_HOME"]:
    del os.environ[_name]


#: Tests that start real services (Prometheus, MLflow, Airflow, a browser) and time rollouts against live scrapes.
_SERVICE_DIRS = ("integration", "plugins")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``) the tests that start real services
    run one after another on one worker, while the other worker takes the rest: two service tests at once would
    time their rollouts against scrapes on shared cores."""
    for item in items:
        if any(Path(item.path).is_relative_to(REPO / "tests" / folder) for folder in _SERVICE_DIRS):
            item.add_marker(pytest.mark.xdist_group("services"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session's Airflow home and storage go with it (every fixture has stopped what it started by now); a
    failed session keeps them, to be looked at."""
    if exitstatus == 0:
        shutil.rmtree(_SESSION_HOME, ignore_errors=True)
    else:
        print(f"\nthe failed session's Airflow home and storage are kept in {_SESSION_HOME}")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"public GPU traces not found at {TRACES} (they live in ../shared/data/traces)")
    return TRACES


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Migrate the session's SQLite Airflow metadata DB (AIRFLOW_HOME is set above)."""
    Path(os.environ["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
