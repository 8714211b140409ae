"""
### GPU metrics ingest

Every hour, pulls the previous hour of NVIDIA **dcgm-exporter** series (per GPU and per MIG instance, with
pod / namespace attribution) and **kube-state-metrics** GPU requests from Prometheus, validates them with
Great Expectations, and publishes them as the `slicewise_metrics` Asset.

| task | does |
|---|---|
| `pull_metrics` | reads `[data_interval_start, data_interval_end)` at `step_s` into a staging folder; Prometheus down or slow → retried, then fails having written nothing |
| `validate_partition` | runs the GX suite; a bad hour is moved to `quarantine/date=…/hour=…/` with `report.txt`, `validation.json` and Data Docs, and this task fails with the summary in its log (no retry, no Asset event) |
| `publish_partition` | moves the hour to `metrics/date=…/hour=…/` atomically and emits `slicewise_metrics` with row and series counts |
| `prune_store` | removes hours, staging and plan folders older than `store_retention_days` before the newest published hour; returns what it removed |

Each run owns exactly its data interval: re-running replaces the partition. Backfill with
`airflow backfill create --dag-id gpu_metrics_ingest --from-date … --to-date …`.

Connection: `prometheus_default` (HTTP). Settings: Airflow Variable `slicewise_settings` (JSON) or the Params
below; see docs/configuration.md, "Settings".
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from slicewise.assets import METRICS
from slicewise.errors import task_outcome


@dag(
    # A data-interval timetable: each run owns [start, end) of the hour before it (a plain "@hourly" cron in
    # Airflow 3 gives runs an empty interval).
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,  # history comes through explicit backfills, not a surprise catch-up of months of hours
    max_active_runs=4,
    tags=["slicewise", "ingest", "prometheus"],
    default_args={
        "owner": "slicewise",
        "retries": 3,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "execution_timeout": timedelta(minutes=20),
    },
    params={
        "step_s": Param(None, type=["null", "integer"], minimum=1, description="Sample step in seconds."),
        "min_completeness": Param(
            None,
            type=["null", "number"],
            minimum=0,
            maximum=1,
            description="Minimum received/expected samples per series.",
        ),
        "max_vanished_share": Param(
            None,
            type=["null", "number"],
            minimum=0,
            maximum=1,
            description="Share of last hour's GPU series allowed to be missing.",
        ),
    },
    doc_md=__doc__,
)
def gpu_metrics_ingest() -> None:
    @task
    @task_outcome()
    def pull_metrics(
        data_interval_start: Any = None, data_interval_end: Any = None, params: Any = None
    ) -> dict[str, Any]:
        from slicewise import ingest
        from slicewise.connections import prometheus_endpoint, task_settings
        from slicewise.metrics.prometheus import PrometheusReader

        settings = task_settings(params)
        reader = PrometheusReader(prometheus_endpoint(settings.prometheus_conn_id), settings)
        staged = ingest.pull(reader, data_interval_start, data_interval_end, settings)
        return ingest.staged_to_dict(staged)

    @task(retries=0)  # a verdict on data is not transient: retrying would only re-quarantine
    @task_outcome()
    def validate_partition(
        staged: dict[str, Any],
        data_interval_start: Any = None,
        data_interval_end: Any = None,
        params: Any = None,
    ) -> dict[str, Any]:
        from slicewise import ingest
        from slicewise.connections import task_settings

        # ValidationFailed is permanent: the hour is quarantined and the task fails once, with the report.
        return ingest.validate(
            staged["staging_url"], data_interval_start, data_interval_end, task_settings(params)
        )

    @task(outlets=[METRICS])
    @task_outcome()
    def publish_partition(
        staged: dict[str, Any],
        statistics: dict[str, Any],
        outlet_events: Any = None,
        data_interval_start: Any = None,
        data_interval_end: Any = None,
        params: Any = None,
    ) -> dict[str, Any]:
        from slicewise import ingest
        from slicewise.connections import task_settings

        manifest = ingest.publish(
            staged["staging_url"],
            data_interval_start,
            data_interval_end,
            ingest.staged_from_dict(staged),
            statistics,
            task_settings(params),
        )
        outlet_events[METRICS].extra = {
            key: manifest[key]
            for key in ("interval_start", "interval_end", "gpu_rows", "gpu_series", "demand_rows", "path")
        }
        return manifest

    @task
    @task_outcome()
    def prune_store(params: Any = None) -> dict[str, Any]:
        from slicewise.connections import task_settings
        from slicewise.retention import prune_configured_store

        return prune_configured_store(task_settings(params)).as_dict()

    # TaskFlow calls return XComArgs that resolve to the annotated values when the tasks run.
    staged: Any = pull_metrics()
    statistics: Any = validate_partition(staged)
    publish_partition(staged, statistics) >> prune_store()


gpu_metrics_ingest()
