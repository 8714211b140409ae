"""A small client of Airflow 3's REST API (``/api/v2``), enough to follow DAG runs from the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

TERMINAL_RUN_STATES = ("success", "failed")


@dataclass
class AirflowApi:
    base_url: str
    username: str
    password: str
    timeout_s: float = 30.0
    _token: str | None = field(default=None, repr=False)

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            response = requests.post(
                f"{self.base_url}/auth/token",
                timeout=self.timeout_s,
                json={"username": self.username, "password": self.password},
            )
            response.raise_for_status()
            self._token = str(response.json()["access_token"])
        return {"Authorization": f"Bearer {self._token}"}

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(
            method, f"{self.base_url}/api/v2{path}", headers=self._headers(), timeout=self.timeout_s, **kwargs
        )
        if response.status_code == 401:  # token expired: fetch a new one once
            self._token = None
            response = requests.request(
                method,
                f"{self.base_url}/api/v2{path}",
                headers=self._headers(),
                timeout=self.timeout_s,
                **kwargs,
            )
        response.raise_for_status()
        return response.json() if response.content else None

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self._request("GET", f"/dags/{dag_id}")
            return result
        except requests.HTTPError as exc:
            if exc.response is not None and exc.response.status_code == 404:
                return None
            raise

    def unpause(self, dag_id: str) -> None:
        self._request("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def dag_runs(self, dag_id: str, limit: int = 20) -> list[dict[str, Any]]:
        result = self._request(
            "GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-run_after", "limit": limit}
        )
        runs: list[dict[str, Any]] = result["dag_runs"]
        return runs

    def trigger(
        self, dag_id: str, logical_date: str | None, conf: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": logical_date, "conf": conf or {}}
        )
        return result

    def create_run(
        self, dag_id: str, run_id: str, logical_date: str, data_interval: tuple[str, str]
    ) -> dict[str, Any]:
        """One run with the given id and data interval (409 if the id or the logical date has a run already)."""
        result: dict[str, Any] = self._request(
            "POST",
            f"/dags/{dag_id}/dagRuns",
            json={
                "dag_run_id": run_id,
                "logical_date": logical_date,
                "data_interval_start": data_interval[0],
                "data_interval_end": data_interval[1],
            },
        )
        return result

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        result = self._request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        instances: list[dict[str, Any]] = result["task_instances"]
        return instances
