"""Airflow-facing glue: settings and endpoints resolved from Variables, Params and Connections.

Only called inside tasks (never at DAG parse time), so no Variable or Connection is read while parsing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slicewise.metrics.prometheus import PrometheusEndpoint, endpoint_from_connection
from slicewise.settings import VARIABLE_NAME, Settings, SettingsError, load_settings


def task_settings(params: Mapping[str, Any] | None = None) -> Settings:
    """Defaults < ``SLICEWISE_*`` env < Variable ``slicewise_settings`` < non-null run Params."""
    from airflow.sdk import Variable

    raw = Variable.get(VARIABLE_NAME, default=None)
    try:
        from_variable = json.loads(raw) if raw else None
    except json.JSONDecodeError as exc:
        raise SettingsError(f"Airflow Variable {VARIABLE_NAME} is not valid JSON: {exc}") from exc
    if from_variable is not None and not isinstance(from_variable, dict):
        raise SettingsError(f"Airflow Variable {VARIABLE_NAME} must be a JSON object")
    from_params = {
        k: v for k, v in (params or {}).items() if v is not None and k in Settings.__dataclass_fields__
    }
    return load_settings(from_variable, from_params)


def prometheus_endpoint(conn_id: str) -> PrometheusEndpoint:
    """The endpoint of the Airflow Connection ``conn_id`` (e.g. ``AIRFLOW_CONN_PROMETHEUS_DEFAULT``)."""
    from airflow.sdk import Connection

    conn = Connection.get(conn_id)
    return endpoint_from_connection(
        conn.conn_type, conn.host, conn.port, conn.schema, conn.login, conn.password, conn.extra_dejson
    )


def mlflow_tracking_uri(settings: Settings) -> str:
    """``mlflow_tracking_uri`` when set, else the URL of the Airflow Connection ``mlflow_default``."""
    if settings.mlflow_tracking_uri:
        return settings.mlflow_tracking_uri
    from airflow.sdk import Connection

    try:
        conn = Connection.get("mlflow_default")
    except Exception as exc:  # the SDK raises its own not-found type; the message is what matters
        raise SettingsError(
            "no MLflow tracking server configured: set the setting mlflow_tracking_uri or the Airflow "
            f"Connection mlflow_default ({exc})"
        ) from exc
    return endpoint_from_connection(conn.conn_type, conn.host, conn.port, conn.schema, None, None, {}).url
