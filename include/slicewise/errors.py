"""One error vocabulary for every DAG: what fails at once, what skips, what is retried.

- :class:`PermanentError`: bad settings, bad input, a bad price file, data that failed validation. Retrying
  cannot help, so the task fails at once with the message, and Airflow does not retry it.
- :class:`NotYet`: a condition time will fix (too little validated history, nothing collected yet). The task is
  skipped with the reason, which the Airflow UI shows on it.
- Anything else (an unreachable service, a timeout, a 5xx) is retryable: it propagates, and Airflow retries the
  task as its ``retries`` say.

:func:`task_outcome` is the one place that maps them onto Airflow's exceptions; every DAG task wraps its body in
it. Modules raise their own subclasses (``SettingsError``, ``PriceError``, ``NotEnoughHistory``...), so the
logic stays free of Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class PermanentError(Exception):
    """Bad settings or input: fails the task at once with its message, never retried."""


class NotYet(Exception):
    """Not enough to work on yet: the task skips with this reason."""


@contextmanager
def task_outcome(what: str = "") -> Iterator[None]:
    """Run a task's body: a :class:`NotYet` skips it, a :class:`PermanentError` fails it without retries, and
    anything else propagates for Airflow to retry. ``what`` prefixes the message (e.g. the task's subject)."""
    prefix = f"{what}: " if what else ""
    try:
        yield
    except NotYet as reason:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException(f"{prefix}{reason}") from None
    except PermanentError as error:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"{prefix}{error}") from None
