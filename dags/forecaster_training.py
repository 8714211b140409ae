"""
### Forecaster training

Runs whenever a validated hour of metrics is published (the `slicewise_metrics` Asset). For every model spec in
`models/` it continues training the current **champion** from the MLflow registry (or starts from scratch) on
the newest hours plus a replay sample of older history, evaluates it on the newest held-out hour against the
champion and six simple baselines, logs everything to MLflow and registers a new version. The `champion` alias
moves only when the new version beats the champion and the best baseline by the spec's margin; otherwise the
version is tagged with the reason and the champion stays.

| task | does |
|---|---|
| `list_models` | the model specs in `models/*.yaml` |
| `update_model` (one per spec) | history → train → evaluate → MLflow run + registered version → gate |
| `publish_forecaster` | emits `slicewise_forecaster` with, per model, the champion version, scores and which predictor the planner should trust |

If MLflow is unreachable the update fails before changing anything, so the champion stays what it was. With
too little validated history (a new install) `update_model` is skipped and says why.
Connections: `mlflow_default` (or the setting `mlflow_tracking_uri`). Settings: docs/configuration.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from slicewise.assets import FORECASTER, METRICS
from slicewise.errors import task_outcome


@dag(
    schedule=[METRICS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # updates build on each other's champion: one at a time
    tags=["slicewise", "forecaster", "mlflow"],
    default_args={
        "owner": "slicewise",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "execution_timeout": timedelta(minutes=30),
    },
    doc_md=__doc__,
)
def forecaster_training() -> None:
    @task
    @task_outcome()
    def list_models() -> list[str]:
        from slicewise.forecasting.spec import load_specs

        return [spec.name for spec in load_specs()]

    @task(max_active_tis_per_dag=1)
    @task_outcome()
    def update_model(
        name: str, triggering_asset_events: Any = None, params: Any = None, run_id: str | None = None
    ) -> dict[str, Any]:
        from datetime import datetime

        import slicewise.forecasting.steps as update
        from slicewise import store
        from slicewise.connections import mlflow_tracking_uri, task_settings
        from slicewise.forecasting.spec import load_specs

        settings = task_settings(params)
        spec = next(s for s in load_specs() if s.name == name)
        root = store.storage_path(settings.storage_root)
        ends = [
            datetime.fromisoformat(event.extra["interval_end"])
            for event in (triggering_asset_events or {}).get(METRICS, [])
            if "interval_end" in event.extra
        ]
        # Train up to the newest validated hour, whichever event started the run: hours backfilled together
        # publish in any order, and a run started by an older hour's event must not skip for lack of history.
        newest = store.latest_published_end(root)
        newest_end = max([*ends, *([newest] if newest else [])]) if ends or newest else None
        # A new install: nothing to learn from yet is not a failure; NotEnoughHistory skips, saying why.
        if newest_end is None:
            raise update.NotEnoughHistory("no published metrics partition yet")
        panel = update.load_history(root, newest_end, spec, settings.forecast_history_hours)
        update.split_steps(panel, spec)
        return update.hourly_update(
            spec,
            panel,
            tracking_uri=mlflow_tracking_uri(settings),
            experiment=settings.mlflow_experiment,
            tags={
                "airflow_dag_id": "forecaster_training",
                "airflow_run_id": run_id or "",
                "newest_hour_end": newest_end.isoformat(),
            },
        )

    @task(outlets=[FORECASTER])
    @task_outcome()
    def publish_forecaster(results: list[dict[str, Any]], outlet_events: Any = None) -> dict[str, Any]:
        extra = {result["model"]: result for result in results}
        outlet_events[FORECASTER].extra = extra
        return extra

    # TaskFlow calls return XComArgs that resolve to the annotated values when the tasks run.
    names: Any = list_models()
    results: Any = update_model.expand(name=names)
    publish_forecaster(results)


forecaster_training()
