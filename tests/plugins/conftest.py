"""Fixtures for the plugin's pages: a migrated Airflow metadata DB (tokens are checked against its revoked-token
table), a SLICEWISE_HOME holding what the DAGs would have written, and the real API server app with real users.

tests/conftest.py turns ``simple_auth_manager_all_admins`` on for the whole session, which makes the simple
auth manager sign every request in as admin. Here it is off, with a viewer and an admin whose passwords the
tests know, so "anonymous is refused" means something.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import fleet_data

USERS = {"viewer": "viewer-password", "admin": "admin-password"}


@dataclass(frozen=True)
class Home:
    """A SLICEWISE_HOME and the env that points Slicewise at it."""

    path: Path
    store: Path
    state: Path
    ledger: Path

    def env(self) -> dict[str, str]:
        return {
            "SLICEWISE_HOME": str(self.path),
            "SLICEWISE_STORAGE_ROOT": self.store.as_uri(),
            "SLICEWISE_CLUSTER_BACKEND": "simulated",
            "SLICEWISE_SIMULATED_CLUSTER_STATE": str(self.state),
        }


def make_home(folder: Path) -> Home:
    folder.mkdir(parents=True, exist_ok=True)
    return Home(folder, folder / "store", folder / "cluster" / "state.json", folder / "ledger.db")


def auth_env(folder: Path) -> dict[str, str]:
    """Simple auth manager with real users and known passwords, all-admins off."""
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        # Long enough for HS512 (the API server's default JWT algorithm); fixed so tokens outlive a restart.
        "AIRFLOW__API_AUTH__JWT_SECRET": "slicewise-plugin-tests-" + "x" * 64,
    }


@dataclass
class Api:
    client: Any  # fastapi.testclient.TestClient
    tokens: dict[str, str]

    def get(self, path: str, user: str | None = "viewer", **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}))
        if user is not None:
            headers["Authorization"] = f"Bearer {self.tokens[user]}"
        return self.client.get(path, headers=headers, follow_redirects=False, **kwargs)


@pytest.fixture(scope="module")
def api(airflow_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The Airflow API server app (core: UI, public API, auth, plugins from plugins/) in a TestClient."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    folder = tmp_path_factory.mktemp("auth")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in auth_env(folder).items():
            patch.setenv(name, value)
        with TestClient(create_app(apps="core")) as client:
            tokens = {}
            for user, password in USERS.items():
                answer = client.post("/auth/token", json={"username": user, "password": password})
                assert answer.status_code == 201, answer.text
                tokens[user] = answer.json()["access_token"]
            yield Api(client, tokens)


@pytest.fixture()
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A SLICEWISE_HOME with nothing in it: no report, plan, ledger or cluster state."""
    home = make_home(tmp_path / "slicewise")
    for name, value in home.env().items():
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture()
def full_home(empty_home: Home) -> Home:
    """Two cost reports, a plan, a what-if review, a ledger with a promoted and a rolled-back rollout, the
    simulated cluster."""
    from datetime import UTC, datetime, timedelta

    from slicewise.rollout.ledger import cluster_key
    from slicewise.settings import load_settings
    from slicewise.ui.sources import cluster_identity

    fleet_data.write_report(empty_home.store, fleet_data.OLDER_REPORT_DATE)
    fleet_data.write_report(empty_home.store)
    fleet_data.write_plan(empty_home.store)
    fleet_data.write_review(empty_home.store)
    # The dwell column runs on the wall clock, like the planner: the node was changed 20 minutes ago.
    fleet_data.write_cluster(empty_home.state, datetime.now(UTC) - timedelta(minutes=20))
    identity = cluster_identity(load_settings())
    assert identity == cluster_key("simulated", str(empty_home.state))
    fleet_data.write_ledger(f"sqlite:///{empty_home.ledger}", identity)
    return empty_home
