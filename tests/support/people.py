"""People answering human-in-the-loop tasks while ``dag.test()`` runs (Airflow 3.3: tasks park in
``awaiting_input``; ``dag.test()`` waits until something resumes them).

An answer goes through the real Core API route the UI's Required Actions page uses
(``PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{map_index}/hitlDetails``). Nobody answering is
played by the scheduler's own timeout sweep (``SchedulerJobRunner.check_awaiting_input_timeouts``), which
``dag.test()`` never runs itself: past ``response_timeout`` it takes the operator's default option.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from datetime import datetime
from types import SimpleNamespace
from typing import Any

log = logging.getLogger(__name__)


def _preload_orm() -> None:
    # Configure every ORM mapper in this thread first: lazy model imports from the helper thread and from
    # dag.test() otherwise deadlock on the import lock.
    import airflow.models.dagrun  # noqa: F401
    from airflow.models import import_all_models
    from sqlalchemy.orm import configure_mappers

    import_all_models()
    configure_mappers()


def _awaiting(dag_id: str, run_id: str) -> list[tuple[str, int]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.state == "awaiting_input",
            )
        )
        return [(str(task_id), int(map_index)) for task_id, map_index in rows]


def _fail_parked(dag_id: str, run_id: str) -> None:
    """Escape hatch when the helper dies: fail parked tasks so ``dag.test()`` returns instead of hanging."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.state == "awaiting_input",
            )
            .values(state="failed")
        )


def _sweep_timeouts() -> None:
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    SchedulerJobRunner.check_awaiting_input_timeouts(SimpleNamespace(log=log))  # it uses only self.log


def run_with_people(
    dag: Any,
    run_after: datetime,
    conf: dict[str, Any],
    core_api: Any,
    answer: str | None,
    *,
    watchdog_s: float = 300,
) -> tuple[Any, list[str]]:
    """``dag.test()`` while a person answers every waiting task with ``answer`` (None: nobody answers and
    the timeouts run out). Returns the run and the task ids that were answered."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.types import DagRunType

    _preload_orm()
    run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=run_after, run_after=run_after)
    stop, answered, errors = threading.Event(), [], []
    give_up = time.monotonic() + watchdog_s

    def person() -> None:
        try:
            while not stop.wait(0.5):
                if answer is None:
                    _sweep_timeouts()
                else:
                    for task_id, map_index in _awaiting(dag.dag_id, run_id):
                        run_path = f"/api/v2/dags/{dag.dag_id}/dagRuns/{run_id}"
                        path = f"{run_path}/taskInstances/{task_id}/{map_index}/hitlDetails"
                        reply = core_api.patch(path, json={"chosen_options": [answer], "params_input": {}})
                        assert reply.status_code == 200, (reply.status_code, reply.text)
                        answered.append(task_id)
                if time.monotonic() > give_up:
                    raise TimeoutError(f"dag.test() still waiting after {watchdog_s} s")
        except BaseException as exc:
            traceback.print_exc()
            errors.append(exc)
            _fail_parked(dag.dag_id, run_id)

    helper = threading.Thread(target=person, daemon=True, name="a-person")
    helper.start()
    try:
        run = dag.test(run_after=run_after, run_conf=conf)
    finally:
        stop.set()
        helper.join(timeout=10)
    if errors:
        raise errors[0]
    return run, answered
