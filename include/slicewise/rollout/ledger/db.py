"""The ledger's database plumbing: the engine (SQLite tuned for several processes), and checks on inputs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, create_engine, event, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from slicewise.rollout.ledger.tables import UNFINISHED, Base, NodeRow, RolloutRow

#: How long a SQLite writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 30.0
#: Execution option of the engine that write sessions use (SQLite: ``BEGIN IMMEDIATE``).
WRITE_OPTION = "slicewise_ledger_write"


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown rollout or node, illegal transition, a rollout in the way)."""


def open_engine(url: str) -> Engine:
    """An engine on ``url`` with every ledger table created (tables that exist are left alone)."""
    sqlite = url.startswith("sqlite")
    engine = create_engine(
        url, connect_args={"timeout": BUSY_TIMEOUT_S} if sqlite else {}, pool_pre_ping=not sqlite
    )
    if sqlite:
        _tune_sqlite(engine)
    writer = engine.execution_options(**{WRITE_OPTION: True})
    try:
        Base.metadata.create_all(writer)
    except DBAPIError:
        # Another process created the same tables between our check and our CREATE: look again.
        Base.metadata.create_all(writer)
    return engine


def _tune_sqlite(engine: Engine) -> None:
    """Foreign keys, WAL (readers do not block the writer) and a busy timeout, on every connection; and
    transactions begun by us, so writers take the write lock up front (``BEGIN IMMEDIATE``)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 must not issue its own BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A deferred transaction that reads and then writes fails at once ("database is locked") when
        # another process wrote in between; IMMEDIATE waits for the write lock before reading instead.
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def utc(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise LedgerError(f"naive datetime {now!r}: pass a timezone-aware time")
    return now.astimezone(UTC)


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def json_copy(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    try:
        copied = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"{what} is not JSON data: {exc}") from exc
    if not isinstance(copied, dict):
        raise LedgerError(f"{what} must be a JSON object")
    return copied


def check_plan(waves: Sequence[Sequence[str]], desired: Mapping[str, Mapping[str, str | None]]) -> None:
    if not waves or any(not wave for wave in waves):
        raise LedgerError("a rollout needs at least one wave, and no wave may be empty")
    names = [name for wave in waves for name in wave]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise LedgerError(f"node(s) in more than one wave or twice in one: {', '.join(repeated)}")
    if set(names) != set(desired):
        missing, extra = sorted(set(names) - set(desired)), sorted(set(desired) - set(names))
        raise LedgerError(
            f"desired labels must cover exactly the wave nodes: missing {missing}, extra {extra}"
        )
    for name in names:
        json_copy(desired[name], f"desired labels of {name}")


def unfinished(session: Session, cluster: str) -> RolloutRow | None:
    query = (
        select(RolloutRow)
        .where(RolloutRow.cluster == cluster, RolloutRow.status.in_(UNFINISHED))
        .order_by(RolloutRow.id.desc())
        .limit(1)
    )
    return session.scalar(query)


def rollout_row(session: Session, rollout_id: int) -> RolloutRow:
    row = session.get(RolloutRow, rollout_id)
    if row is None:
        raise LedgerError(f"no rollout #{rollout_id}")
    return row


def node_row(session: Session, rollout_id: int, node: str) -> NodeRow:
    row = session.get(NodeRow, (rollout_id, node))
    if row is None:
        raise LedgerError(f"rollout #{rollout_id} has no node {node}")
    return row
