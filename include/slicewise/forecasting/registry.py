"""The one MLflow adapter: tracking runs, registering versions, reading and moving the ``champion`` alias.

Aliases only (registry stages are deprecated). Saving, loading, registering and promoting are separate
functions, so the training DAG decides promotion between them with :mod:`slicewise.forecasting.promotion`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

CHAMPION_ALIAS = "champion"


class RegistryError(RuntimeError):
    """MLflow could not be reached or refused a request; the message says which in one line."""


@dataclass(frozen=True)
class Champion:
    version: str
    model: Any  # a Keras model


def _client(tracking_uri: str) -> Any:
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


def _wrap(action: str, error: Exception) -> RegistryError:
    text = str(error).replace("\n", " ")
    return RegistryError(f"MLflow {action} failed: {type(error).__name__}: {text[:300]}")


def check_reachable(tracking_uri: str) -> None:
    """Fail early and clearly when the tracking server does not answer (nothing else has happened yet)."""
    try:
        _client(tracking_uri).search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many types for one cause: the server is not there
        raise _wrap(f"at {tracking_uri}", exc) from exc


def load_champion(tracking_uri: str, name: str) -> Champion | None:
    """The model behind ``models:/name@champion``, or None when no version holds the alias yet."""
    from mlflow.exceptions import MlflowException

    client = _client(tracking_uri)
    try:
        version = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    except MlflowException as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(exc.error_code) or "not found" in str(exc).lower():
            return None
        raise _wrap("reading the champion alias", exc) from exc
    import mlflow.keras

    # The model's custom layers must be registered with Keras before loading: a process that never built a
    # model (the planner's) has not imported them yet.
    import slicewise.forecasting.model  # noqa: F401

    model = mlflow.keras.load_model(f"models:/{name}@{CHAMPION_ALIAS}")
    return Champion(str(version.version), model)


def log_and_register(
    tracking_uri: str,
    experiment: str,
    name: str,
    model: Any,
    *,
    params: dict[str, Any],
    metrics: dict[str, float],
    tags: dict[str, str],
    spec_text: str,
    plot: Any,
    sample_inputs: Any,
    sample_outputs: Any,
) -> tuple[str, str]:
    """One MLflow run with everything about this update, and a new registered version; returns (run, version)."""
    import math

    import mlflow
    import mlflow.keras
    from mlflow.models import infer_signature

    _client(tracking_uri)
    try:
        mlflow.set_experiment(experiment)
        with mlflow.start_run(run_name=tags.get("airflow_run_id")) as run:
            mlflow.set_tags(tags)
            mlflow.log_params(params)
            mlflow.log_metrics({k: v for k, v in metrics.items() if v is not None and math.isfinite(v)})
            mlflow.log_text(spec_text, "spec.yaml")
            if plot is not None:
                mlflow.log_figure(plot, "forecast_vs_actual.png")
            signature = infer_signature(sample_inputs, sample_outputs)
            # No input_example: with MLflow 3.17 it raises FileNotFoundError for this flavour.
            info = mlflow.keras.log_model(
                model, name="model", signature=signature, registered_model_name=name
            )
            return run.info.run_id, str(info.registered_model_version)
    except Exception as exc:
        raise _wrap("logging the training run", exc) from exc


def set_champion(tracking_uri: str, name: str, version: str) -> None:
    try:
        _client(tracking_uri).set_registered_model_alias(name, CHAMPION_ALIAS, version)
    except Exception as exc:
        raise _wrap(f"moving {name}@{CHAMPION_ALIAS} to version {version}", exc) from exc


def tag_version(tracking_uri: str, name: str, version: str, tags: dict[str, str]) -> None:
    client = _client(tracking_uri)
    try:
        for key, value in tags.items():
            client.set_model_version_tag(name, version, key, value)
    except Exception as exc:
        raise _wrap(f"tagging {name} version {version}", exc) from exc


def champion_version(tracking_uri: str, name: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(_client(tracking_uri).get_model_version_by_alias(name, CHAMPION_ALIAS).version)
    except MlflowException:
        return None


@dataclass(frozen=True)
class RegistryStatus:
    """What the registry says when no fresh forecaster event is at hand."""

    champion: str | None  # version holding the alias
    newest_at: datetime | None  # when the newest version was registered (the last hourly update)
    newest_trust: str  # the predictor the newest evaluation trusted (version tag "trust")


def status(tracking_uri: str, name: str) -> RegistryStatus:
    """Champion version, time of the newest version and its ``trust`` tag; raises RegistryError if unreachable."""
    from datetime import UTC

    client = _client(tracking_uri)
    try:
        versions = client.search_model_versions(f"name = '{name}'", max_results=1000)
    except Exception as exc:
        raise _wrap(f"listing versions of {name}", exc) from exc
    if not versions:
        return RegistryStatus(None, None, "")
    newest = max(versions, key=lambda v: int(v.version))
    created = datetime.fromtimestamp(int(newest.creation_timestamp) / 1000, tz=UTC)
    return RegistryStatus(champion_version(tracking_uri, name), created, str(newest.tags.get("trust", "")))
