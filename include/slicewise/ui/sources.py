"""Where the pages' data comes from: settings, cost reports, plans, the cluster and the rollout ledger.

Each loader returns its data or raises :class:`Unavailable` with a sentence a person can act on ("no report
yet", "cluster unreachable: ..."); the pages show that sentence in place of the section. Reads only: nothing
here creates a report, a plan, a ledger or the simulated cluster's state file.

Runs in the Airflow API server, where ``airflow.sdk``'s Variable and Connection read the metadata database
(the API server sets ``_AIRFLOW_PROCESS_CONTEXT=server``) as well as ``AIRFLOW_VAR_*`` / ``AIRFLOW_CONN_*``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from slicewise.settings import VARIABLE_NAME, Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from slicewise.cluster.base import GpuNode
    from slicewise.planning.types import FleetPlan
    from slicewise.rollout.ledger import (
        EventRecord,
        Ledger,
        Mark,
        MeasurementRecord,
        NodeRecord,
        Rollout,
        Wave,
    )
    from slicewise.whatif.reviews import Review

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A page waits at most this long for the cluster or the ledger: a hung backend must not hang the UI.
SOURCE_TIMEOUT_S = 10.0
REPORT_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: The files of a report folder the pages serve, with their media types.
REPORT_FILES = {
    "report.html": "text/html; charset=utf-8",
    "allocation.csv": "text/csv; charset=utf-8",
    "summary.json": "application/json",
}


class Unavailable(Exception):
    """A source could not be read (unreachable, malformed); the message says which and why, in words."""


class Missing(Unavailable):
    """There is nothing to show (yet): no report, plan, ledger or cluster state, or no such item."""


# -- settings -------------------------------------------------------------------------------------------------


def read_settings_variable() -> str | None:
    """The raw Airflow Variable ``slicewise_settings``, or None when it is not set."""
    from airflow.sdk import Variable

    value = Variable.get(VARIABLE_NAME, default=None)
    return None if value is None else str(value)


def ui_settings(
    read_variable: Callable[[], str | None] = read_settings_variable,
) -> tuple[Settings, list[str]]:
    """The settings the DAGs use (defaults < ``SLICEWISE_*`` env < Variable ``slicewise_settings``) and notes
    for the page. A Variable that cannot be read or is invalid is left out and named in a note, so a page still
    shows what env and defaults say. SettingsError when env or defaults themselves are invalid."""
    notes: list[str] = []
    try:
        raw = read_variable()
    except Exception as exc:  # the metadata DB may be down: the pages still work from env and defaults
        log.warning("reading Variable %s failed", VARIABLE_NAME, exc_info=True)
        return load_settings(), [f"Airflow Variable {VARIABLE_NAME} could not be read ({exc}); ignoring it."]
    if not raw:
        return load_settings(), notes
    try:
        overrides = json.loads(raw)
        if not isinstance(overrides, dict):
            raise SettingsError("it must be a JSON object")
        return load_settings(overrides), notes
    except (json.JSONDecodeError, SettingsError) as exc:
        notes.append(f"Airflow Variable {VARIABLE_NAME} is invalid ({exc}); ignoring it.")
        return load_settings(), notes


def storage_root(settings: Settings) -> ObjectStoragePath:
    """The storage root; Unavailable when its URL cannot be opened (unknown scheme, missing fsspec package)."""
    from slicewise.store import storage_path

    try:
        return storage_path(settings.storage_root)
    except Exception as exc:
        raise _failed(f"the storage root {_without_password(settings.storage_root)}", exc) from exc


def _failed(what: str, exc: Exception) -> Unavailable:
    """An unexpected error reading ``what``, logged with its trace for the API server's log. Object stores raise
    their own exception types, so adapters here catch broadly and turn everything into a sentence."""
    log.warning("%s could not be read", what, exc_info=True)
    return Unavailable(f"{what} could not be read: {type(exc).__name__}: {exc}")


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``'s result, or Unavailable when it raises or takes longer than ``seconds`` (the call then goes
    on in a worker thread that nobody waits for)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slicewise-ui")
    try:
        return pool.submit(call).result(timeout=seconds)
    except FutureTimeout:
        raise Unavailable(f"{what} did not answer within {seconds:g} s.") from None
    except Unavailable:
        raise
    except Exception as exc:  # cluster clients and database drivers raise their own types
        log.warning("%s failed", what, exc_info=True)
        raise Unavailable(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        pool.shutdown(wait=False)


def shaped(what: str, shape: Callable[..., T], *args: Any) -> T:
    """``shape(*args)``, or Unavailable naming ``what`` when the data is not what the page can show (a summary
    or plan from another version, say): one section says so instead of the page failing."""
    try:
        return shape(*args)
    except Exception as exc:
        log.warning("%s could not be shown", what, exc_info=True)
        raise Unavailable(f"{what} could not be shown: {type(exc).__name__}: {exc}") from exc


# -- cost reports -----------------------------------------------------------------------------------------------


def has_report_file(root: ObjectStoragePath, date: str, name: str) -> bool:
    try:
        return bool(REPORT_DATE.match(date)) and (root / "reports" / date / name).exists()
    except Exception:  # only decides whether to embed the page; a broken store shows up elsewhere
        return False


def report_dates(root: ObjectStoragePath) -> list[str]:
    """Dates of the published reports (folders ``reports/<YYYY-MM-DD>/`` holding ``summary.json``), newest first."""
    folder = root / "reports"
    try:
        if not folder.exists():
            return []
        dates = [p.name for p in folder.iterdir() if REPORT_DATE.match(p.name)]
        return sorted((d for d in dates if (folder / d / "summary.json").exists()), reverse=True)
    except Exception as exc:
        raise _failed(f"the list of reports under {folder}", exc) from exc


def read_summary(root: ObjectStoragePath, date: str) -> dict[str, Any]:
    """``reports/<date>/summary.json`` as a dict; Unavailable when missing or unreadable."""
    text = report_file(root, date, "summary.json").decode("utf-8", errors="replace")
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unavailable(f"the summary of the report of {date} is not valid JSON: {exc}") from exc
    if not isinstance(summary, dict):
        raise Unavailable(f"the summary of the report of {date} is not a JSON object")
    return summary


def report_file(root: ObjectStoragePath, date: str, name: str) -> bytes:
    """One of :data:`REPORT_FILES` of the report of ``date``; Unavailable for other names, malformed dates
    (no path escapes the reports folder) and missing files."""
    if not REPORT_DATE.match(date) or name not in REPORT_FILES:
        raise Missing(f"there is no report file {date}/{name}")
    path = root / "reports" / date / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise Missing(f"the report of {date} has no {name}") from None
    except Exception as exc:
        raise _failed(str(path), exc) from exc


# -- what-if reviews --------------------------------------------------------------------------------------------


def latest_review(root: ObjectStoragePath) -> Review:
    """The newest published what-if review; Unavailable without one."""
    from slicewise.whatif import reviews

    try:
        review = reviews.newest(root)
    except Exception as exc:
        raise _failed(f"the what-if reviews under {root / reviews.FOLDER}", exc) from exc
    if review is None:
        raise Missing(
            "no what-if review yet: gpu_whatif_review replays the week's validated metrics every Monday "
            "(or trigger it)."
        )
    return review


def review_html(root: ObjectStoragePath, name: str) -> bytes:
    """The ``report.html`` of the published what-if review ``name`` (``<since>_<until>``); Unavailable for any
    other name (no path leaves the reviews folder)."""
    from slicewise.whatif import reviews

    try:
        match = next((path for path in reviews.published(root) if path.name == name), None)
    except Exception as exc:
        raise _failed(f"the what-if reviews under {root / reviews.FOLDER}", exc) from exc
    if match is None:
        raise Missing(f"there is no what-if review {name}")
    try:
        return (match / "report.html").read_bytes()
    except FileNotFoundError:
        raise Missing(f"the what-if review {name} has no report.html") from None
    except Exception as exc:
        raise _failed(f"the report.html of the what-if review {name}", exc) from exc


# -- plans ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatestPlan:
    run_id: str
    made_at: str
    plan: FleetPlan
    has_html: bool


def _latest_folder(root: ObjectStoragePath) -> tuple[str, str, ObjectStoragePath]:
    from slicewise.planning import storage

    marker = root / "plans" / storage.LATEST
    try:
        latest = json.loads(marker.read_text())
        run_id, made_at = str(latest["run_id"]), str(latest.get("made_at", ""))
    except FileNotFoundError:
        raise Missing(
            "no plan yet: gpu_partition_rollout publishes one on each run (recommend mode changes nothing)."
        ) from None
    except Exception as exc:
        raise _failed(str(marker), exc) from exc
    return run_id, made_at, storage.run_folder(root, run_id)


def latest_plan(root: ObjectStoragePath) -> LatestPlan:
    """The plan ``plans/latest.json`` points at; Unavailable when there is none or it cannot be read."""
    from slicewise.planning import storage

    run_id, made_at, folder = _latest_folder(root)
    try:
        plan = storage.read_plan(folder / storage.PLAN_JSON)
        has_html = (folder / storage.PLAN_HTML).exists()
    except FileNotFoundError:
        raise Missing(f"the latest plan (run {run_id}) has no {storage.PLAN_JSON} in {folder}") from None
    except Exception as exc:
        raise _failed(f"the latest plan (run {run_id})", exc) from exc
    return LatestPlan(run_id, made_at, plan, has_html)


def latest_plan_html(root: ObjectStoragePath) -> bytes:
    """The ``plan.html`` of the latest plan."""
    from slicewise.planning import storage

    run_id, _, folder = _latest_folder(root)
    try:
        return (folder / storage.PLAN_HTML).read_bytes()
    except FileNotFoundError:
        raise Missing(f"the latest plan (run {run_id}) has no {storage.PLAN_HTML}") from None
    except Exception as exc:
        raise _failed(f"the {storage.PLAN_HTML} of the latest plan (run {run_id})", exc) from exc


# -- the cluster ------------------------------------------------------------------------------------------------


def cluster_nodes(settings: Settings, timeout_s: float = SOURCE_TIMEOUT_S) -> list[GpuNode]:
    """The managed GPU nodes as the configured backend reports them. A simulated cluster without a state file
    is reported as not started (opening it would create one)."""
    from slicewise.cluster.factory import open_backend, simulated_state_path

    if settings.cluster_backend == "simulated" and not simulated_state_path(settings).exists():
        raise Missing(
            f"the simulated cluster has no state file at {simulated_state_path(settings)} yet "
            "(`make demo` starts the simulated fleet)."
        )
    what = f"the {settings.cluster_backend} cluster backend"
    return within(timeout_s, what, lambda: open_backend(settings).list_nodes())


def cluster_identity(settings: Settings) -> str:
    """The ledger's name for the configured cluster (as the rollout engine writes it)."""
    from slicewise.rollout.wiring import cluster_identity as identity

    return identity(settings)


# -- the rollout ledger -----------------------------------------------------------------------------------------


@contextmanager
def _ledger(settings: Settings) -> Iterator[Ledger]:
    from sqlalchemy.engine import make_url

    from slicewise.rollout.ledger import Ledger
    from slicewise.rollout.ledger.url import ledger_url

    url = ledger_url(settings)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database or "").expanduser()
        if not path.exists():
            raise Missing(
                f"no rollout ledger yet at {path}: the first gpu_partition_rollout run in apply mode creates it."
            )
    ledger = Ledger.open(url)
    try:
        yield ledger
    finally:
        ledger.close()


def read_ledger(
    settings: Settings, what: str, read: Callable[[Ledger], T], timeout_s: float = SOURCE_TIMEOUT_S
) -> T:
    """``read(ledger)`` on the configured ledger, within ``timeout_s``; Unavailable when there is no ledger yet,
    it cannot be reached, or the read fails (``what`` names the read in the message)."""

    def run() -> T:
        with _ledger(settings) as ledger:
            return read(ledger)

    return within(timeout_s, what, run)


def last_changes(settings: Settings, nodes: list[str]) -> dict[str, datetime | None]:
    """When a rollout on this cluster last finished changing each node (the ledger's ``last_change``)."""
    cluster = cluster_identity(settings)
    return read_ledger(
        settings,
        "the rollout ledger",
        lambda ledger: {node: ledger.last_change(node, cluster=cluster) for node in nodes},
    )


def recent_rollouts(settings: Settings, limit: int = 20) -> list[Rollout]:
    """The newest rollouts of every cluster in the ledger, newest first."""
    return read_ledger(settings, "the rollout ledger", lambda ledger: ledger.recent_rollouts(limit=limit))


def recent_marks(settings: Settings, limit: int = 20) -> list[Mark]:
    """What runs changed outside the waves (taints, annotations, pod moves, holds, the autoscaler's ranking),
    on every cluster in the ledger, newest first."""
    return read_ledger(settings, "the rollout ledger", lambda ledger: ledger.recent_marks(limit=limit))


@dataclass(frozen=True)
class RolloutDetail:
    rollout: Rollout
    waves: list[Wave]
    nodes: list[NodeRecord]
    measurements: list[MeasurementRecord]
    events: list[EventRecord]
    story: str


def rollout_detail(settings: Settings, rollout_id: int) -> RolloutDetail:
    """Everything the ledger holds on one rollout; Unavailable naming the id when there is no such rollout."""

    def read(ledger: Ledger) -> RolloutDetail:
        from slicewise.rollout.ledger import LedgerError

        try:
            rollout = ledger.rollout(rollout_id)
        except LedgerError as exc:
            raise Missing(f"the ledger has {exc}") from None
        return RolloutDetail(
            rollout,
            ledger.waves(rollout_id),
            ledger.nodes(rollout_id),
            ledger.measurements(rollout_id),
            ledger.events(rollout_id),
            ledger.story(rollout_id),
        )

    return read_ledger(settings, "the rollout ledger", read)


def settings_facts(settings: Settings) -> Mapping[str, str]:
    """The settings a reader of these pages needs to interpret them (no credentials: only ids and paths)."""
    return {
        "storage root": _without_password(settings.storage_root),
        "cluster backend": settings.cluster_backend,
        "ledger": (
            f"Connection {settings.ledger_conn_id}, if defined, else <SLICEWISE_HOME>/ledger.db"
            if settings.ledger_conn_id
            else "<SLICEWISE_HOME>/ledger.db"
        ),
        "planner dwell": f"{settings.planner_dwell_hours:g} h",
    }


def _without_password(url: str) -> str:
    """``url`` with the password of a ``user:password@host`` part replaced (fsspec URLs may carry one)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
