"""
### GPU cost report

What the GPUs cost, who held them and what they were used for, following MIG slices and MPS tenants, plus what
Slicewise's changes saved and how good its forecasts were. Runs every day at 00:15 UTC over the **previous
full UTC day**, and on each `slicewise_rollout` event with a **partial** report of the day so far (same files,
`"partial": true` in `summary.json`). Reads only validated metric partitions (quarantined hours never), the
planner's `plans/*/observed.json` and `forecasts.json`, and the rollout ledger.

| task | does |
|---|---|
| `collect_inputs` | the window's validated hours (and the hours before it that savings compare against), the planner's runs, the ledger's applied changes and rollbacks → `inputs.json` in a work folder. No validated hour: the daily run fails, a partial run skips |
| `allocate` | per hour: every GPU-minute attributed (MIG slice = its share of the GPU, MPS tenant = 1/replicas, whole GPU = 1, nobody = `__idle__`), used hours from DCGM engine activity, idle = allocated - used, priced per node → `allocation.parquet` |
| `attribute` | idle time per namespace with evidence (allocated-but-idle, memory-bound, input-bound, could-share; "not measured" when DCGM cannot say), savings per applied change (an estimate, with its method), forecast accuracy per predictor |
| `publish_report` | `reports/<date>/report.html` (self-contained: tables and plots), `allocation.csv` (OpenCost's field names), `summary.json`; replaces the day's folder atomically; emits `slicewise_cost_report` with the headline totals and paths |

Params: `mode` (`auto`: partial on a rollout event, else daily; `daily`; `partial`), `report_date`
(`YYYY-MM-DD`, default: yesterday for daily, today for partial — yesterday in a day's first hour),
`cost_mig_share` (`compute` or `memory`).
Settings `cost_*` (docs/costs.md). Connections: `slicewise_ledger` (optional; else the SQLite ledger in
`SLICEWISE_HOME`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from slicewise.assets import COST_REPORT, ROLLOUT
from slicewise.errors import task_outcome


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("15 0 * * *", timezone="UTC"), assets=ROLLOUT
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,  # backfill past days on purpose (Param report_date), not by accident
    max_active_runs=1,  # two runs writing the same day's folder would race
    tags=["slicewise", "cost", "report"],
    default_args={
        "owner": "slicewise",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "execution_timeout": timedelta(minutes=30),
    },
    params={
        "mode": Param(
            "auto",
            enum=["auto", "daily", "partial"],
            description="auto: partial on a rollout event, else the previous full UTC day.",
        ),
        "report_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            description=(
                "UTC day to report, YYYY-MM-DD (default: yesterday; today for a partial report, "
                "yesterday before 01:00)."
            ),
        ),
        "cost_mig_share": Param(
            None,
            type=["null", "string"],
            enum=[None, "compute", "memory"],
            description="A MIG slice counts compute slices / 7 or memory slices / 8 of its GPU.",
        ),
    },
    doc_md=__doc__,
)
def gpu_cost_report() -> None:
    @task
    @task_outcome()
    def collect_inputs(
        params: Any = None,
        run_id: str | None = None,
        dag_run: Any = None,
        triggering_asset_events: Any = None,
    ) -> str:
        from slicewise.connections import task_settings
        from slicewise.costs import steps, window
        from slicewise.rollout.ledger.url import ledger_url

        settings = task_settings(params)
        rollout_event = bool((triggering_asset_events or {}).get(ROLLOUT, []))
        span = window.resolve(dag_run.run_after, params["mode"], params.get("report_date"), rollout_event)
        # Nothing validated yet skips (NothingToReportYet); an hour lost after collecting began fails once.
        return steps.collect(settings, span, run_id or "manual", ledger_url(settings))

    @task
    @task_outcome()
    def allocate(inputs: str, params: Any = None) -> dict[str, str]:
        from slicewise.connections import task_settings
        from slicewise.costs import steps

        return steps.allocate(task_settings(params), inputs)

    @task
    @task_outcome()
    def attribute(inputs: str, allocated: dict[str, str], params: Any = None) -> dict[str, str]:
        from slicewise.connections import task_settings
        from slicewise.costs import steps

        return steps.analyse(task_settings(params), inputs, allocated)

    @task(outlets=[COST_REPORT])
    @task_outcome()
    def publish_report(
        inputs: str,
        allocated: dict[str, str],
        analysed: dict[str, str],
        params: Any = None,
        outlet_events: Any = None,
    ) -> dict[str, Any]:
        from datetime import UTC, datetime

        from slicewise.connections import task_settings
        from slicewise.costs import steps

        generated_at = datetime.now(UTC).isoformat(timespec="seconds")  # metadata only, never in the maths
        extra = steps.publish(task_settings(params), inputs, allocated, analysed, generated_at)
        outlet_events[COST_REPORT].extra = extra
        return extra

    # TaskFlow calls return XComArgs that resolve to the annotated values when the tasks run.
    inputs: Any = collect_inputs()
    allocated: Any = allocate(inputs)
    analysed: Any = attribute(inputs, allocated)
    publish_report(inputs, allocated, analysed)


gpu_cost_report()
