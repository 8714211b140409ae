"""The forecaster DAG against a real MLflow server: two hourly updates, the champion gate, MLflow down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from slicewise import store
from slicewise.forecasting.steps import EVAL_HOURS
from slicewise.simulator.fleet import Fleet
from slicewise.stack import mlflow as mlflow_stack
from slicewise.stack import processes
from tests.support.partitions import publish_hour

pytestmark = pytest.mark.integration
DAG_ID = "forecaster_training"
MODEL = "gpu_load_forecaster"
FIRST = datetime(2026, 11, 23, 6, tzinfo=UTC)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("mlflow")
    service = mlflow_stack.start(home)
    try:
        yield service.url
    finally:
        processes.stop(service, home / "run")


def run_dag(retries: int | None = None) -> tuple[dict[str, str], Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"))
    dag = bag.get_dag(DAG_ID)
    assert dag is not None, bag.import_errors
    if retries is not None:
        for task in dag.tasks:
            task.retries = retries
    run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    return states | {"__run__": run.state}, run


def registry(url: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url)


def champion(url: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(registry(url).get_model_version_by_alias(MODEL, "champion").version)
    except MlflowException:
        return None


def test_two_hourly_updates_register_versions_and_move_the_alias_only_by_the_rule(
    mlflow_server: str, airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_MLFLOW_TRACKING_URI", mlflow_server)
    fleet = Fleet.default()
    for hour in range(4):
        publish_hour(root, fleet, FIRST + timedelta(hours=hour))

    states, _ = run_dag(retries=0)
    assert states["__run__"] == "success", states
    first = registry(mlflow_server).get_model_version(MODEL, "1")
    assert first.tags["gate"] in ("promoted", "kept") and first.tags["gate_reason"]
    assert champion(mlflow_server) == ("1" if first.tags["gate"] == "promoted" else None)
    run = registry(mlflow_server).get_run(first.run_id)
    assert {"model.h60.pinball_p90", "mean_last_hour.h60.pinball_p90", "last_value.h15.mae"} <= set(
        run.data.metrics
    )
    before = champion(mlflow_server)

    # Four hours leave none to calibrate on after training: the quantiles stay as trained.
    assert run.data.metrics["calibration.h60.p90"] == 1.0
    # From scratch it trains: the newest hour of windows whose targets are known (until 2026-12-07 none were
    # taken, every update trained 0 epochs).
    assert int(run.data.params["new_windows"]) > 0 and int(run.data.params["epochs"]) > 0

    for hour in (4, 5, 6):
        publish_hour(root, fleet, FIRST + timedelta(hours=hour))
    states, _ = run_dag(retries=0)
    assert states["__run__"] == "success", states
    second = registry(mlflow_server).get_model_version(MODEL, "2")
    second_run = registry(mlflow_server).get_run(second.run_id)
    assert second_run.data.tags["newest_hour_end"] == (FIRST + timedelta(hours=7)).isoformat()
    # The shipped spec fits nothing on the hour after training (calibration_gain 0, no expert mix), so the model
    # trains up to the gate's held-out hour: its windows end in the hour before the newest data less the longest
    # horizon (60 min), their targets known. Each quantile's factor is fitted on that held-out hour as advice,
    # logged with the version; the applied one stays at 1.
    params = second_run.data.params
    gate_hour = FIRST + timedelta(hours=7) - timedelta(hours=EVAL_HOURS, minutes=60)
    assert params["training_data_end"] == gate_hour.isoformat()
    assert params["calibration_fitted_on"] == "the gate's held-out hour (advice only)"
    fits = {k: v for k, v in second_run.data.metrics.items() if k.startswith("calibration.fit.")}
    assert len(fits) == 2 * 2 and all(0.13 <= v <= 7.4 for v in fits.values())
    assert any(v != 1.0 for v in fits.values())
    assert second_run.data.metrics["calibration.h60.p90"] == 1.0
    assert second_run.data.params["started_from"] == (before or "scratch")
    assert int(params["new_windows"]) > 0 and int(params["replay_windows"]) > 0 and int(params["epochs"]) > 0
    expected = "2" if second.tags["gate"] == "promoted" else before
    assert champion(mlflow_server) == expected
    # The gate's reason names the comparison it made.
    assert "pinball_p90@60min" in second.tags["gate_reason"]


def test_with_mlflow_down_the_update_fails_and_the_champion_is_unchanged(
    mlflow_server: str, airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    fleet = Fleet.default()
    for hour in range(4):
        publish_hour(root, fleet, FIRST + timedelta(hours=hour))
    before_versions = len(registry(mlflow_server).search_model_versions(f"name='{MODEL}'"))
    before = champion(mlflow_server)
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_MLFLOW_TRACKING_URI", f"http://127.0.0.1:{processes.free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    states, _ = run_dag(retries=0)
    assert states["__run__"] == "failed"
    assert states["publish_forecaster"] == "upstream_failed"
    assert champion(mlflow_server) == before
    assert len(registry(mlflow_server).search_model_versions(f"name='{MODEL}'")) == before_versions
    assert json.dumps(states)  # states are plain strings, shown in the UI


def test_a_new_install_with_too_little_history_skips_with_the_reason(
    mlflow_server: str, airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_hour(store.storage_path(tmp_path.as_uri()), Fleet.default(), FIRST)
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("SLICEWISE_MLFLOW_TRACKING_URI", mlflow_server)
    before = len(registry(mlflow_server).search_model_versions(f"name='{MODEL}'"))
    states, _ = run_dag(retries=0)
    assert states["update_model"] == "skipped" and states["publish_forecaster"] == "skipped"
    assert states["__run__"] == "success"
    assert len(registry(mlflow_server).search_model_versions(f"name='{MODEL}'")) == before


def _quick(spec: Any, name: str, **architecture: Any) -> Any:
    """``spec`` under its own registry entry (the tests above count versions), one epoch per update."""
    import dataclasses

    return dataclasses.replace(
        spec,
        name=name,
        architecture=dataclasses.replace(spec.architecture, **architecture),
        training=dataclasses.replace(spec.training, epochs_per_update=1, time_budget_s=20),
    )


def _register_champion(mlflow_server: str, experiment: str, name: str, model: Any) -> str:
    """Register ``model`` as ``name``'s champion; returns its version."""
    import numpy as np

    from slicewise.forecasting import registry as adapter

    sample = np.zeros((1, *model.input_shape[1:]), "float32")
    _, version = adapter.log_and_register(
        mlflow_server,
        experiment,
        name,
        model,
        params={},
        metrics={},
        tags={},
        spec_text="",
        plot=None,
        sample_inputs=sample,
        sample_outputs=model.predict(sample, verbose=0),
    )
    adapter.set_champion(mlflow_server, name, version)
    return version


def _five_hours(seed: int) -> Any:
    """Six GPUs, five hours of a minute grid, steady noisy load."""
    import numpy as np

    from slicewise.forecasting.windows import Panel

    steps = 5 * 60
    load = np.clip(np.random.default_rng(seed).normal(0.4, 0.15, (6, steps)), 0, 1)
    return Panel([("h", i, "") for i in range(6)], 1_764_410_400 + 60 * np.arange(steps), load, load / 2, 60)


def test_a_champion_built_for_other_input_features_is_set_aside_not_fed_todays_windows(
    mlflow_server: str,
) -> None:
    import keras

    from slicewise.forecasting import registry as adapter
    from slicewise.forecasting.spec import load_specs
    from slicewise.forecasting.steps import hourly_update
    from slicewise.forecasting.windows import FEATURES

    spec = _quick(load_specs()[0], "forecaster_with_an_older_champion")
    # A version from before a feature was added: it reads one feature fewer per step.
    older = keras.Sequential(
        [keras.Input((spec.window_steps, len(FEATURES) - 1)), keras.layers.LSTM(2), keras.layers.Dense(2)]
    )
    old_version = _register_champion(mlflow_server, "older-champion", spec.name, older)
    result = hourly_update(
        spec, _five_hours(3), tracking_uri=mlflow_server, experiment="older-champion", tags={}
    )

    run = registry(mlflow_server).get_run(result["run_id"])
    assert run.data.params["started_from"] == "scratch"
    assert run.data.params["champion_set_aside"] == old_version
    assert (run.data.params["members"], run.data.params["member_window_steps"]) == ("1", "whole window")
    # The gate compared the new version with the baselines only, and says so.
    assert "champion" not in result["reason"].replace("no champion yet", "")
    expected = result["version"] if result["promoted"] else old_version
    assert adapter.champion_version(mlflow_server, spec.name) == expected


def test_a_champion_whose_head_mixes_other_anchors_is_set_aside_and_the_new_version_has_the_specs(
    mlflow_server: str,
) -> None:
    import mlflow.keras

    from slicewise.forecasting.model import build_model, extra_anchors_of
    from slicewise.forecasting.spec import load_specs
    from slicewise.forecasting.steps import hourly_update

    before = _quick(load_specs()[0], "forecaster_with_other_anchors", extra_anchors=())
    spec = _quick(before, before.name, extra_anchors=("fleet_load",))
    old_version = _register_champion(mlflow_server, "other-anchors", spec.name, build_model(before))
    result = hourly_update(
        spec, _five_hours(4), tracking_uri=mlflow_server, experiment="other-anchors", tags={}
    )

    run = registry(mlflow_server).get_run(result["run_id"])
    assert (run.data.params["started_from"], run.data.params["champion_set_aside"]) == (
        "scratch",
        old_version,
    )
    assert run.data.params["extra_anchors"] == "fleet_load"
    mlflow.set_tracking_uri(mlflow_server)
    registered = mlflow.keras.load_model(f"models:/{spec.name}/{result['version']}")
    assert extra_anchors_of(registered) == {("fleet_load",)}


def test_an_update_with_the_expert_mix_fits_logs_and_registers_its_weights(
    mlflow_server: str, tmp_path: Path
) -> None:
    import dataclasses

    import mlflow.keras
    import numpy as np
    import pandas as pd

    from slicewise.forecasting.backtest import panel_from_long
    from slicewise.forecasting.experts import MIX_EXPERTS
    from slicewise.forecasting.model import expert_weights_of
    from slicewise.forecasting.steps import hourly_update
    from tests.support.forecasting import synthetic_csv, tiny_spec

    spec = dataclasses.replace(tiny_spec(), name="mixed_forecaster", min_observed_steps=4, expert_mix=True)
    csv = synthetic_csv(tmp_path / "trace.csv", hours=8, n_series=4)
    panel = panel_from_long(pd.read_csv(csv), "timestamp_anon", "container_ip", "value", 60, 100.0)
    result = hourly_update(spec, panel, tracking_uri=mlflow_server, experiment="mixed", tags={})
    run = registry(mlflow_server).get_run(result["run_id"])
    assert (run.data.params["expert_mix"], run.data.params["expert_eta"]) == ("True", "5.0")
    logged = np.array(
        [
            [
                [run.data.metrics[f"experts.h{m}.p{round(q * 100)}.{e}"] for e in MIX_EXPERTS]
                for q in spec.quantiles
            ]
            for m in spec.horizons_minutes
        ]
    )
    # Fitted on the hour after training: weights per horizon and quantile that sum to 1, not all on the model.
    np.testing.assert_allclose(logged.sum(axis=-1), 1.0, rtol=1e-5)
    assert (logged[..., 0] < 1.0).any()
    # The registered version carries the weights it was logged with.
    mlflow.set_tracking_uri(mlflow_server)
    loaded = mlflow.keras.load_model(f"models:/mixed_forecaster/{result['version']}")
    np.testing.assert_allclose(expert_weights_of(loaded), logged, rtol=1e-5)
