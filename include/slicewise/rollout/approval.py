"""The person a wave asks when its analysis is Inconclusive: Airflow's human-in-the-loop branch (Required
Actions in the UI). Imported by the DAG file while parsing, so it stays as light as the DAG."""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.hitl import HITLBranchOperator

CONTINUE, ROLL_BACK = "Continue the rollout", "Roll back"
APPROVAL_TIMEOUT = timedelta(minutes=60)  # no answer from a person in this time -> roll back


def ask_person(index: int) -> HITLBranchOperator:
    """The ``wave_<index>.ask_person`` task: branches to ``approved`` or ``rejected`` (the default on timeout)."""
    return HITLBranchOperator(
        task_id="ask_person",
        subject=f"Wave {index} of the GPU partition rollout is inconclusive: continue or roll back?",
        body="The analysis could not decide. Evidence:\n\n```\n"
        f"{{{{ ti.xcom_pull(task_ids='wave_{index}.analyse') }}}}\n```\n"
        "No answer before the timeout rolls the rollout back.",
        options=[CONTINUE, ROLL_BACK],
        defaults=[ROLL_BACK],
        response_timeout=APPROVAL_TIMEOUT,
        options_mapping={CONTINUE: f"wave_{index}.approved", ROLL_BACK: f"wave_{index}.rejected"},
    )
