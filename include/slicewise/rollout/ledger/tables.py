"""The rollout ledger's schema: status values, tables, and the plain records the ledger hands out.

Portable SQL only (SQLite by default, Postgres in production). Times are stored as UTC: ``TIMESTAMP WITH
TIME ZONE`` on Postgres, naive UTC text on SQLite (which has no time zone type); both come back aware.
Table names carry a ``slicewise_`` prefix so the ledger can share a database with other applications.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class RolloutStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"  # waiting for a person (an Inconclusive analysis)
    PROMOTED = "PROMOTED"  # every wave applied and analysed successfully
    ROLLING_BACK = "ROLLING_BACK"
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"  # a rollback could not complete: a person must look


class WaveStatus(StrEnum):
    PENDING = "PENDING"
    APPLYING = "APPLYING"
    ANALYSING = "ANALYSING"
    PASSED = "PASSED"
    FAILED = "FAILED"
    INCONCLUSIVE = "INCONCLUSIVE"
    SKIPPED = "SKIPPED"


class NodeStatus(StrEnum):
    """ABORTED: given up before its labels changed; FAILED: the change was attempted and did not verify, so the
    node must be restored."""

    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    DONE = "DONE"
    ABORTED = "ABORTED"
    FAILED = "FAILED"
    RESTORING = "RESTORING"
    RESTORED = "RESTORED"
    RESTORE_FAILED = "RESTORE_FAILED"


class MarkKind(StrEnum):
    """What a mark tells of: one of the changes a run makes outside the waves."""

    NODE_GROUPS = "node groups"  # the autoscaler's priority expander ConfigMap written, or left to a person
    STANDBY = "standby"  # a standby taint added or removed
    SCALE_DOWN = "scale-down"  # cluster-autoscaler's scale-down-disabled annotation added or removed
    MOVES = "pod moves"  # fractional pods evicted from whole GPUs (or skipped, with the reason)
    HOLDS = "holds"  # cordons that wait for pods to finish: held, released, cleared or refused


ROLLOUT_STATUSES = tuple(RolloutStatus)
MARK_KINDS = tuple(MarkKind)
UNFINISHED = (RolloutStatus.RUNNING, RolloutStatus.PAUSED, RolloutStatus.ROLLING_BACK)
TERMINAL = (RolloutStatus.PROMOTED, RolloutStatus.ROLLED_BACK, RolloutStatus.FAILED)
WAVE_STATUSES = tuple(WaveStatus)
NODE_STATUSES = tuple(NodeStatus)
#: A rollout finished changing the node: the dwell-time rule counts from here.
NODE_CHANGED = (NodeStatus.DONE, NodeStatus.RESTORED)

#: Analysis outcomes, spelled as Argo Rollouts spells them.
MEASUREMENT_OUTCOMES = ("Successful", "Failed", "Inconclusive", "Error")


class UtcDateTime(TypeDecorator[datetime]):
    """An aware datetime stored as UTC; a naive one is refused (its zone would be a guess)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware one")
        value = value.astimezone(UTC)
        # SQLite keeps text; dropping the (always UTC) offset keeps every stored value in one sortable format.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class RolloutRow(Base):
    __tablename__ = "slicewise_rollouts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(512), index=True)
    run_id: Mapped[str] = mapped_column(String(250))
    plan_path: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


# The database itself refuses a second unfinished rollout per cluster, even from racing processes.
Index(
    "ux_slicewise_rollouts_one_unfinished",
    RolloutRow.cluster,
    unique=True,
    sqlite_where=RolloutRow.status.in_(UNFINISHED),
    postgresql_where=RolloutRow.status.in_(UNFINISHED),
)


class WaveRow(Base):
    __tablename__ = "slicewise_waves"

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("slicewise_rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    index: Mapped[int] = mapped_column("wave", Integer, primary_key=True)  # 0 is the canary
    nodes: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class NodeRow(Base):
    __tablename__ = "slicewise_nodes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["rollout_id", "wave"], ["slicewise_waves.rollout_id", "slicewise_waves.wave"], ondelete="CASCADE"
        ),
    )

    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("slicewise_rollouts.id", ondelete="CASCADE"), primary_key=True
    )
    node: Mapped[str] = mapped_column(String(253), primary_key=True, index=True)  # a DNS-1123 name
    wave: Mapped[int] = mapped_column(Integer)
    # SQL NULL until the first snapshot, so "not yet taken" is a plain IS NULL test.
    snapshot: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    desired: Mapped[dict[str, str | None]] = mapped_column(JSON)
    step: Mapped[str] = mapped_column(String(128), default="")
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")
    cordoned_by_us: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    changed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


class MeasurementRow(Base):
    __tablename__ = "slicewise_measurements"
    __table_args__ = (
        ForeignKeyConstraint(
            ["rollout_id", "wave"], ["slicewise_waves.rollout_id", "slicewise_waves.wave"], ondelete="CASCADE"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(Integer, index=True)
    wave: Mapped[int] = mapped_column(Integer)
    check_name: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    outcome: Mapped[str] = mapped_column(String(16))
    # NaN and +/-inf are not portable SQL values: they are stored as NULL with their spelling in `nonfinite`.
    value: Mapped[float | None] = mapped_column(Double, nullable=True)
    nonfinite: Mapped[str | None] = mapped_column(String(8), nullable=True)
    detail: Mapped[str] = mapped_column(Text, default="")
    taken_at: Mapped[datetime] = mapped_column(UtcDateTime)


class EventRow(Base):
    __tablename__ = "slicewise_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("slicewise_rollouts.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    node: Mapped[str | None] = mapped_column(String(253), nullable=True)
    wave: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text)


class MarkRow(Base):
    """A change a run made outside the waves (the autoscaler's ranking, taints, annotations, pod moves, held
    cordons), kept per cluster whether or not a rollout followed: a run that changes no node's labels may still
    evict pods, and the ledger is where that is told."""

    __tablename__ = "slicewise_marks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(512), index=True)
    run_id: Mapped[str] = mapped_column(String(250))
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class OpenStepRow(Base):
    """A step outside the waves that has begun and not yet told what it changed: written before the step's first
    write to the cluster, and deleted in the transaction that keeps the step's marks. A row left behind is a run
    killed inside the step; the next run under the lock turns it into a mark (nothing it changed goes untold)."""

    __tablename__ = "slicewise_open_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(512), index=True)
    run_id: Mapped[str] = mapped_column(String(250))
    begun_at: Mapped[datetime] = mapped_column(UtcDateTime)
    kind: Mapped[str] = mapped_column(String(64))
    intent: Mapped[str] = mapped_column(Text)  # what the step was to do, from the plan


class LockRow(Base):
    __tablename__ = "slicewise_locks"

    cluster: Mapped[str] = mapped_column(String(512), primary_key=True)
    holder: Mapped[str] = mapped_column(String(512))
    acquired_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


# The records handed out: plain frozen data, detached from any database session.


@dataclass(frozen=True)
class Rollout:
    id: int
    cluster: str
    run_id: str
    plan_path: str
    status: str
    reason: str
    created_at: datetime
    updated_at: datetime

    @property
    def finished(self) -> bool:
        """True once the status is terminal (PROMOTED, ROLLED_BACK or FAILED)."""
        return self.status in TERMINAL


@dataclass(frozen=True)
class Wave:
    rollout_id: int
    index: int  # 0 is the canary
    nodes: tuple[str, ...]  # in the order they are changed
    status: str
    updated_at: datetime


@dataclass(frozen=True)
class NodeRecord:
    rollout_id: int
    node: str
    wave: int
    snapshot: (
        dict[str, Any] | None
    )  # labels (and whatever the caller kept) before the change; None until taken
    desired: dict[str, str | None]  # label -> wanted value; None removes the label
    step: str  # the last completed step, named by the caller ("" before the first)
    status: str
    detail: str
    cordoned_by_us: bool
    updated_at: datetime
    changed_at: datetime | None  # when the node last became DONE or RESTORED in this rollout


@dataclass(frozen=True)
class MeasurementRecord:
    rollout_id: int
    wave: int
    check: str
    node: str
    outcome: str
    value: float | None  # NaN / inf come back as such; None when the check produced no number
    detail: str
    taken_at: datetime


@dataclass(frozen=True)
class EventRecord:
    rollout_id: int
    at: datetime
    message: str
    node: str | None
    wave: int | None


@dataclass(frozen=True)
class Mark:
    cluster: str
    run_id: str
    at: datetime
    kind: str  # one of MARK_KINDS
    message: str


@dataclass(frozen=True)
class OpenStep:
    id: int
    cluster: str
    run_id: str
    begun_at: datetime
    kind: str  # one of MARK_KINDS
    intent: str


@dataclass(frozen=True)
class Pruned:
    """What :meth:`~slicewise.rollout.ledger.Ledger.prune` deleted."""

    rollouts: int
    marks: int


def rollout_record(row: RolloutRow) -> Rollout:
    return Rollout(
        row.id, row.cluster, row.run_id, row.plan_path, row.status, row.reason, row.created_at, row.updated_at
    )


def wave_record(row: WaveRow) -> Wave:
    return Wave(row.rollout_id, row.index, tuple(row.nodes), row.status, row.updated_at)


def node_record(row: NodeRow) -> NodeRecord:
    return NodeRecord(
        rollout_id=row.rollout_id,
        node=row.node,
        wave=row.wave,
        snapshot=dict(row.snapshot) if row.snapshot is not None else None,
        desired=dict(row.desired),
        step=row.step,
        status=row.status,
        detail=row.detail,
        cordoned_by_us=row.cordoned_by_us,
        updated_at=row.updated_at,
        changed_at=row.changed_at,
    )


def measurement_record(row: MeasurementRow) -> MeasurementRecord:
    value = float(row.nonfinite) if row.nonfinite is not None else row.value
    return MeasurementRecord(
        row.rollout_id, row.wave, row.check_name, row.node, row.outcome, value, row.detail, row.taken_at
    )


def split_value(value: float | None) -> tuple[float | None, str | None]:
    """(value column, nonfinite column) for a measured value."""
    if value is None:
        return None, None
    value = float(value)
    return (value, None) if math.isfinite(value) else (None, repr(value))


def event_record(row: EventRow) -> EventRecord:
    return EventRecord(row.rollout_id, row.at, row.message, row.node, row.wave)


def mark_record(row: MarkRow) -> Mark:
    return Mark(row.cluster, row.run_id, row.at, row.kind, row.message)


def open_step_record(row: OpenStepRow) -> OpenStep:
    return OpenStep(row.id, row.cluster, row.run_id, row.begun_at, row.kind, row.intent)
