"""The durable rollout ledger: what a rollout planned, what it did to each node, and what it measured; and
what each run changed outside the waves (its marks).

A crash mid-rollout resumes or rolls back from here, never re-applies blindly. Each write method commits its
own transaction (``start_rollout`` one for the whole rollout), and every read starts a fresh one, so several
Airflow task processes sharing the database see each other's writes. ``now`` is always passed in.

SQLite (the default) is opened with foreign keys on, WAL journal and a busy timeout; its write transactions
begin ``IMMEDIATE`` so concurrent writers queue instead of failing on a lock upgrade. Postgres needs
``psycopg2`` (production installs it). Open one :class:`Ledger` per process (an engine does not survive a
fork). Database errors other than those named here propagate as SQLAlchemy errors (``OperationalError``:
the database is unreachable or stayed locked past the timeout; retrying the task is right).

The package: this module (the :class:`Ledger` and the status names), ``tables`` (the SQLAlchemy schema and the
statuses), ``db`` (engine, rows, validation), ``story`` (a rollout told as lines) and ``url`` (which database,
from the settings and the Airflow Connection).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Self

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from slicewise.rollout.ledger.db import (
    WRITE_OPTION,
    LedgerError,
    check_plan,
    iso,
    json_copy,
    node_row,
    open_engine,
    rollout_row,
    unfinished,
    utc,
)
from slicewise.rollout.ledger.story import render_story
from slicewise.rollout.ledger.tables import (
    MARK_KINDS,
    MEASUREMENT_OUTCOMES,
    NODE_CHANGED,
    NODE_STATUSES,
    ROLLOUT_STATUSES,
    TERMINAL,
    UNFINISHED,
    WAVE_STATUSES,
    EventRecord,
    EventRow,
    LockRow,
    Mark,
    MarkKind,
    MarkRow,
    MeasurementRecord,
    MeasurementRow,
    NodeRecord,
    NodeRow,
    NodeStatus,
    OpenStep,
    OpenStepRow,
    Pruned,
    Rollout,
    RolloutRow,
    RolloutStatus,
    Wave,
    WaveRow,
    WaveStatus,
    event_record,
    mark_record,
    measurement_record,
    node_record,
    open_step_record,
    rollout_record,
    split_value,
    wave_record,
)

__all__ = [
    "MARK_KINDS",
    "MEASUREMENT_OUTCOMES",
    "NODE_STATUSES",
    "ROLLOUT_STATUSES",
    "TERMINAL",
    "TRANSITIONS",
    "UNFINISHED",
    "WAVE_STATUSES",
    "EventRecord",
    "Ledger",
    "LedgerError",
    "Mark",
    "MarkKind",
    "MeasurementRecord",
    "NodeRecord",
    "NodeStatus",
    "OpenStep",
    "Pruned",
    "Rollout",
    "RolloutStatus",
    "Wave",
    "WaveStatus",
    "cluster_key",
]

#: Legal rollout status changes. Terminal statuses have none; setting the current status again is always
#: allowed (a retried task repeats its last write).
TRANSITIONS: dict[str, tuple[str, ...]] = {
    RolloutStatus.RUNNING: (RolloutStatus.PAUSED, RolloutStatus.PROMOTED, RolloutStatus.ROLLING_BACK),
    RolloutStatus.PAUSED: (RolloutStatus.RUNNING, RolloutStatus.ROLLING_BACK),
    RolloutStatus.ROLLING_BACK: (RolloutStatus.ROLLED_BACK, RolloutStatus.FAILED),
    RolloutStatus.PROMOTED: (),
    RolloutStatus.ROLLED_BACK: (),
    RolloutStatus.FAILED: (),
}


def cluster_key(backend: str, identity: str) -> str:
    """The ledger's name for a cluster: the backend name and the caller's identity string of the cluster."""
    return f"{backend}:{identity}"


class Ledger:
    """The rollout ledger on one database. Build with :meth:`open`; returns plain records, never ORM rows."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reads = sessionmaker(engine, expire_on_commit=False)
        self._writes = sessionmaker(engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False)

    @classmethod
    def open(cls, url: str) -> Ledger:
        """Connect to ``url`` (a SQLAlchemy URL) and create any missing tables."""
        return cls(open_engine(url))

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._writes.begin() as session:
            yield session

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self._reads.begin() as session:
            yield session

    # -- the one-rollout-per-cluster lock --------------------------------------------------------------

    def acquire_lock(self, cluster: str, holder: str, ttl_s: float, now: datetime) -> bool:
        """Take the cluster's lock for ``ttl_s`` seconds. True if taken, or already held by ``holder`` (then
        its expiry moves to ``now + ttl_s``); False while another holder's lock has not expired. An expired
        lock is taken over, and the takeover is told on the cluster's unfinished rollout, if any."""
        now = utc(now)
        if ttl_s <= 0:
            raise LedgerError(f"lock ttl must be positive, got {ttl_s}")
        expires = now + timedelta(seconds=ttl_s)
        try:
            with self._write() as session:
                row = session.get(LockRow, cluster)
                if row is None:
                    session.add(LockRow(cluster=cluster, holder=holder, acquired_at=now, expires_at=expires))
                    return True
                if row.holder == holder:
                    row.expires_at = expires
                    return True
                if row.expires_at > now:
                    return False
                previous, expired_at = row.holder, row.expires_at
                # Compare-and-set: of two processes taking over the same expired lock, one wins.
                taken = session.execute(
                    update(LockRow)
                    .where(LockRow.cluster == cluster, LockRow.holder == previous, LockRow.expires_at <= now)
                    .values(holder=holder, acquired_at=now, expires_at=expires)
                    .execution_options(synchronize_session=False)
                )
                if taken.rowcount != 1:  # type: ignore[attr-defined]
                    return False
                rollout = unfinished(session, cluster)
                if rollout is not None:
                    message = f"lock taken over by {holder} from {previous} (expired {iso(expired_at)})"
                    session.add(EventRow(rollout_id=rollout.id, at=now, message=message))
                return True
        except IntegrityError:
            return False  # another process inserted the lock first

    def release_lock(self, cluster: str, holder: str) -> None:
        """Release the lock if ``holder`` holds it; otherwise do nothing."""
        with self._write() as session:
            session.execute(delete(LockRow).where(LockRow.cluster == cluster, LockRow.holder == holder))

    def lock_holder(self, cluster: str, now: datetime) -> str | None:
        """Who holds the cluster's lock at ``now``; None when free or expired."""
        held = self.lock(cluster, now)
        return held[0] if held is not None else None

    def lock(self, cluster: str, now: datetime) -> tuple[str, datetime] | None:
        """The cluster's lock at ``now``: its holder and when it expires unless refreshed or released; None when
        free or expired."""
        now = utc(now)
        with self._read() as session:
            row = session.get(LockRow, cluster)
            return (row.holder, row.expires_at) if row is not None and row.expires_at > now else None

    # -- rollouts --------------------------------------------------------------------------------------

    def unfinished_rollout(self, cluster: str) -> Rollout | None:
        """The cluster's newest rollout that is RUNNING, PAUSED or ROLLING_BACK, if any."""
        with self._read() as session:
            row = unfinished(session, cluster)
            return rollout_record(row) if row is not None else None

    def start_rollout(
        self,
        cluster: str,
        run_id: str,
        plan_path: str,
        waves: Sequence[Sequence[str]],
        desired: Mapping[str, Mapping[str, str | None]],
        now: datetime,
    ) -> Rollout:
        """Record a RUNNING rollout with its waves (PENDING) and nodes (PENDING, desired labels), all in one
        transaction. Every node appears in exactly one wave and has desired labels. LedgerError if the
        cluster already has an unfinished rollout."""
        now = utc(now)
        check_plan(waves, desired)
        try:
            with self._write() as session:
                existing = unfinished(session, cluster)
                if existing is not None:
                    raise LedgerError(
                        f"cluster {cluster} already has unfinished rollout #{existing.id} ({existing.status}, "
                        f"run {existing.run_id}): resume or roll it back first"
                    )
                row = RolloutRow(
                    cluster=cluster,
                    run_id=run_id,
                    plan_path=plan_path,
                    status=RolloutStatus.RUNNING,
                    reason="started",
                    created_at=now,
                    updated_at=now,
                )
                session.add(row)
                session.flush()  # assigns the id
                session.add_all(
                    WaveRow(
                        rollout_id=row.id,
                        index=index,
                        nodes=list(names),
                        status=WaveStatus.PENDING,
                        updated_at=now,
                    )
                    for index, names in enumerate(waves)
                )
                session.flush()  # the waves before the nodes that reference them
                session.add_all(
                    NodeRow(
                        rollout_id=row.id,
                        node=name,
                        wave=index,
                        desired=dict(desired[name]),
                        step="",
                        status=NodeStatus.PENDING,
                        detail="",
                        cordoned_by_us=False,
                        updated_at=now,
                    )
                    for index, names in enumerate(waves)
                    for name in names
                )
                size = f"{len(waves)} wave(s), {sum(len(names) for names in waves)} node(s)"
                message = f"rollout started by run {run_id}: {size}, plan {plan_path}"
                session.add(EventRow(rollout_id=row.id, at=now, message=message))
                return rollout_record(row)
        except IntegrityError as exc:
            # Only a racing start gets here (the unique index on unfinished rollouts per cluster).
            raise LedgerError(f"cluster {cluster} already has an unfinished rollout: {exc.orig}") from exc

    def rollout(self, rollout_id: int) -> Rollout:
        with self._read() as session:
            return rollout_record(rollout_row(session, rollout_id))

    def recent_rollouts(self, cluster: str | None = None, limit: int = 20) -> list[Rollout]:
        """Newest first, optionally of one cluster."""
        with self._read() as session:
            query = select(RolloutRow).order_by(RolloutRow.id.desc()).limit(limit)
            if cluster is not None:
                query = query.where(RolloutRow.cluster == cluster)
            return [rollout_record(row) for row in session.scalars(query)]

    def set_rollout_status(self, rollout_id: int, status: str, reason: str, now: datetime) -> Rollout:
        """Move the rollout to ``status`` along :data:`TRANSITIONS` and tell it as an event. LedgerError on an
        illegal change. Repeating a terminal status changes nothing; repeating another updates the reason."""
        now = utc(now)
        if status not in ROLLOUT_STATUSES:
            raise LedgerError(f"unknown rollout status {status!r}; known: {', '.join(ROLLOUT_STATUSES)}")
        with self._write() as session:
            row = rollout_row(session, rollout_id)
            if status == row.status and status in TERMINAL:
                return rollout_record(row)
            if status != row.status and status not in TRANSITIONS[row.status]:
                raise LedgerError(f"rollout #{rollout_id} cannot go from {row.status} to {status}")
            message = f"rollout {row.status} -> {status}: {reason}"
            row.status, row.reason, row.updated_at = status, reason, now
            session.add(EventRow(rollout_id=rollout_id, at=now, message=message))
            return rollout_record(row)

    # -- waves and nodes -------------------------------------------------------------------------------

    def waves(self, rollout_id: int) -> list[Wave]:
        with self._read() as session:
            rollout_row(session, rollout_id)
            query = select(WaveRow).where(WaveRow.rollout_id == rollout_id).order_by(WaveRow.index)
            return [wave_record(row) for row in session.scalars(query)]

    def set_wave_status(self, rollout_id: int, index: int, status: str, now: datetime) -> None:
        """Set a wave's status; a change is told as an event."""
        now = utc(now)
        if status not in WAVE_STATUSES:
            raise LedgerError(f"unknown wave status {status!r}; known: {', '.join(WAVE_STATUSES)}")
        with self._write() as session:
            row = session.get(WaveRow, (rollout_id, index))
            if row is None:
                raise LedgerError(f"rollout #{rollout_id} has no wave {index}")
            if row.status != status:
                message = f"wave status {row.status} -> {status}"
                session.add(EventRow(rollout_id=rollout_id, at=now, wave=index, message=message))
            row.status, row.updated_at = status, now

    def node(self, rollout_id: int, node: str) -> NodeRecord:
        with self._read() as session:
            return node_record(node_row(session, rollout_id, node))

    def nodes(self, rollout_id: int, wave: int | None = None) -> list[NodeRecord]:
        """The rollout's nodes (of one wave if given), in wave order, then in their order within the wave."""
        with self._read() as session:
            rollout_row(session, rollout_id)
            waves = session.scalars(select(WaveRow).where(WaveRow.rollout_id == rollout_id)).all()
            rows = {
                row.node: row
                for row in session.scalars(select(NodeRow).where(NodeRow.rollout_id == rollout_id))
            }
            order = [
                name
                for w in sorted(waves, key=lambda w: w.index)
                if wave in (None, w.index)
                for name in w.nodes
            ]
            return [node_record(rows[name]) for name in order]

    def record_snapshot(
        self, rollout_id: int, node: str, snapshot: Mapping[str, Any], now: datetime
    ) -> NodeRecord:
        """Keep the node's pre-change state. The FIRST snapshot wins: a resumed step must never overwrite the
        state before the change with a half-changed one. Returns the node with the snapshot it keeps."""
        now = utc(now)
        kept = json_copy(snapshot, "snapshot")
        with self._write() as session:
            node_row(session, rollout_id, node)
            session.execute(
                update(NodeRow)
                .where(NodeRow.rollout_id == rollout_id, NodeRow.node == node, NodeRow.snapshot.is_(None))
                .values(snapshot=kept, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            session.expire_all()
            return node_record(node_row(session, rollout_id, node))

    def record_intent(
        self, rollout_id: int, node: str, step: str, intent: Mapping[str, Any], now: datetime
    ) -> NodeRecord:
        """Write-ahead: before a write to the cluster, what it will be and what the node showed just before
        (kept beside the snapshot under ``intent``, the step named ``step``), so a resumed run can tell "we may
        have done this" from "someone else did" and judge what the cluster shows after it."""
        now = utc(now)
        kept = json_copy(intent, "intent")
        with self._write() as session:
            row = node_row(session, rollout_id, node)
            if row.snapshot is None:
                raise LedgerError(f"{node}: no snapshot yet; an intent is recorded after the snapshot")
            row.snapshot = {**row.snapshot, "intent": kept}
            row.step = step
            row.updated_at = now
            return node_record(row)

    def update_node(
        self,
        rollout_id: int,
        node: str,
        *,
        step: str | None = None,
        status: str | None = None,
        detail: str | None = None,
        cordoned_by_us: bool | None = None,
        now: datetime,
    ) -> NodeRecord:
        """Change the given fields (None leaves a field as it is). Becoming DONE or RESTORED stamps
        ``changed_at`` for the dwell-time rule."""
        now = utc(now)
        if status is not None and status not in NODE_STATUSES:
            raise LedgerError(f"unknown node status {status!r}; known: {', '.join(NODE_STATUSES)}")
        with self._write() as session:
            row = node_row(session, rollout_id, node)
            if status is not None:
                if status in NODE_CHANGED and row.status != status:
                    row.changed_at = now
                row.status = status
            if step is not None:
                row.step = step
            if detail is not None:
                row.detail = detail
            if cordoned_by_us is not None:
                row.cordoned_by_us = cordoned_by_us
            row.updated_at = now
            return node_record(row)

    def last_change(self, node: str, *, cluster: str | None = None) -> datetime | None:
        """When a rollout (of ``cluster``, if given) last finished changing ``node``: the latest time it became
        DONE or RESTORED, even if a later step (a failed restore) moved it on; None if never."""
        with self._read() as session:
            query = (
                select(NodeRow.changed_at)
                .join(RolloutRow, RolloutRow.id == NodeRow.rollout_id)
                .where(NodeRow.node == node, NodeRow.changed_at.is_not(None))
                .order_by(NodeRow.changed_at.desc())
                .limit(1)
            )
            if cluster is not None:
                query = query.where(RolloutRow.cluster == cluster)
            return session.scalar(query)

    # -- measurements and events -----------------------------------------------------------------------

    def add_measurement(
        self,
        rollout_id: int,
        wave: int,
        check: str,
        node: str,
        outcome: str,
        value: float | None,
        detail: str,
        now: datetime,
    ) -> None:
        """Record one measurement. NaN and infinities are kept (see ``ledger_tables``); None means no number."""
        now = utc(now)
        if outcome not in MEASUREMENT_OUTCOMES:
            raise LedgerError(f"unknown outcome {outcome!r}; known: {', '.join(MEASUREMENT_OUTCOMES)}")
        number, nonfinite = split_value(value)
        with self._write() as session:
            if session.get(WaveRow, (rollout_id, wave)) is None:
                raise LedgerError(f"rollout #{rollout_id} has no wave {wave}")
            session.add(
                MeasurementRow(
                    rollout_id=rollout_id,
                    wave=wave,
                    check_name=check,
                    node=node,
                    outcome=outcome,
                    value=number,
                    nonfinite=nonfinite,
                    detail=detail,
                    taken_at=now,
                )
            )

    def measurements(self, rollout_id: int, wave: int | None = None) -> list[MeasurementRecord]:
        """In the order they were taken."""
        with self._read() as session:
            query = select(MeasurementRow).where(MeasurementRow.rollout_id == rollout_id)
            if wave is not None:
                query = query.where(MeasurementRow.wave == wave)
            query = query.order_by(MeasurementRow.taken_at, MeasurementRow.id)
            return [measurement_record(row) for row in session.scalars(query)]

    def add_event(
        self,
        rollout_id: int,
        message: str,
        now: datetime,
        *,
        node: str | None = None,
        wave: int | None = None,
    ) -> None:
        """Add a line to the rollout's story."""
        now = utc(now)
        with self._write() as session:
            rollout_row(session, rollout_id)
            session.add(EventRow(rollout_id=rollout_id, at=now, node=node, wave=wave, message=message))

    def events(self, rollout_id: int) -> list[EventRecord]:
        """In the order they happened."""
        with self._read() as session:
            query = (
                select(EventRow).where(EventRow.rollout_id == rollout_id).order_by(EventRow.at, EventRow.id)
            )
            return [event_record(row) for row in session.scalars(query)]

    # -- changes outside the waves ---------------------------------------------------------------------

    def add_marks(self, cluster: str, run_id: str, marks: Sequence[tuple[str, str]], now: datetime) -> None:
        """Record what a run changed outside the waves, as (kind, message) pairs, in one transaction. LedgerError
        on a kind not in :data:`MARK_KINDS`."""
        now = utc(now)
        _check_kinds(kind for kind, _ in marks)
        with self._write() as session:
            session.add_all(
                MarkRow(cluster=cluster, run_id=run_id, at=now, kind=kind, message=message)
                for kind, message in marks
            )

    def recent_marks(
        self, cluster: str | None = None, limit: int = 20, *, run_id: str | None = None
    ) -> list[Mark]:
        """Newest first, optionally of one cluster and of one run."""
        with self._read() as session:
            query = select(MarkRow).order_by(MarkRow.at.desc(), MarkRow.id.desc()).limit(limit)
            if cluster is not None:
                query = query.where(MarkRow.cluster == cluster)
            if run_id is not None:
                query = query.where(MarkRow.run_id == run_id)
            return [mark_record(row) for row in session.scalars(query)]

    def begin_step(self, cluster: str, run_id: str, kind: str, intent: str, now: datetime) -> OpenStep:
        """Write-ahead for a step outside the waves, before its first write to the cluster: ``intent`` says, from
        the plan, what the step is to do. Returns the step, for :meth:`end_step`. LedgerError on a kind not in
        :data:`MARK_KINDS`."""
        now = utc(now)
        _check_kinds([kind])
        with self._write() as session:
            row = OpenStepRow(cluster=cluster, run_id=run_id, begun_at=now, kind=kind, intent=intent)
            session.add(row)
            session.flush()
            return open_step_record(row)

    def end_step(self, step: OpenStep, lines: Sequence[str], now: datetime) -> None:
        """Keep the step's lines as marks of its run and kind and close it, in one transaction. A step another
        run settled meanwhile (the lock had expired under a slow step) still gets its lines: each is true of the
        writes it tells of, beside the other run's line that the step may have ended."""
        now = utc(now)
        with self._write() as session:
            session.add_all(
                MarkRow(cluster=step.cluster, run_id=step.run_id, at=now, kind=step.kind, message=line)
                for line in lines
            )
            session.execute(delete(OpenStepRow).where(OpenStepRow.id == step.id))

    def settle_abandoned_steps(self, cluster: str, found_by: str, now: datetime) -> list[Mark]:
        """Every step of ``cluster`` left open, told as a mark of its run and closed, in one transaction; call it
        under the cluster's lock, before any step (an open step is then one whose process died inside it).
        Oldest first."""
        now = utc(now)
        with self._write() as session:
            rows = session.scalars(
                select(OpenStepRow).where(OpenStepRow.cluster == cluster).order_by(OpenStepRow.id)
            ).all()
            marks = [
                MarkRow(
                    cluster=cluster,
                    run_id=row.run_id,
                    at=now,
                    kind=row.kind,
                    message=(
                        f"ended inside this step (begun {iso(row.begun_at)}) before telling what it changed; "
                        f"it was to {row.intent}. Found by run {found_by}; the next plan reads the cluster as it is"
                    ),
                )
                for row in rows
            ]
            session.add_all(marks)
            for row in rows:
                session.delete(row)
            session.flush()
            return [mark_record(mark) for mark in marks]

    def open_steps(self, cluster: str | None = None) -> list[OpenStep]:
        """Steps begun and not yet closed, oldest first: running now, or left by a process that died."""
        with self._read() as session:
            query = select(OpenStepRow).order_by(OpenStepRow.id)
            if cluster is not None:
                query = query.where(OpenStepRow.cluster == cluster)
            return [open_step_record(row) for row in session.scalars(query)]

    def prune(self, cluster: str, before: datetime) -> Pruned:
        """Delete what ``cluster``'s history holds from before ``before``, in one transaction: rollouts that ended
        (a terminal status) and were last updated before it, with their waves, nodes, measurements and events,
        and marks made before it. Never an unfinished rollout, an open step or a lock: those are what a crash
        resumes or settles from. Returns how many rollouts and marks went."""
        before = utc(before)
        with self._write() as session:
            # The database's ON DELETE CASCADE takes the waves, nodes, measurements and events.
            rollouts = session.execute(
                delete(RolloutRow).where(
                    RolloutRow.cluster == cluster,
                    RolloutRow.status.in_(TERMINAL),
                    RolloutRow.updated_at < before,
                )
            )
            marks = session.execute(delete(MarkRow).where(MarkRow.cluster == cluster, MarkRow.at < before))
            return Pruned(rollouts=_deleted(rollouts), marks=_deleted(marks))

    def story(self, rollout_id: int) -> str:
        """A readable multi-line account of the rollout for task logs: waves, each node's labels before and
        after with its status, the measurements and the events."""
        rollout = self.rollout(rollout_id)
        return render_story(
            rollout,
            self.waves(rollout_id),
            self.nodes(rollout_id),
            self.measurements(rollout_id),
            self.events(rollout_id),
        )


def _deleted(result: Any) -> int:
    return int(result.rowcount)


def _check_kinds(kinds: Iterable[str]) -> None:
    unknown = sorted(set(kinds) - set(MARK_KINDS))
    if unknown:
        raise LedgerError(f"unknown mark kinds {unknown}; known: {', '.join(MARK_KINDS)}")
