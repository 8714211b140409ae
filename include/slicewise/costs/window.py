"""Which hours a cost report covers: the previous full UTC day, or the day so far (a partial report)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

DAILY, PARTIAL, AUTO = "daily", "partial", "auto"
MODES = (AUTO, DAILY, PARTIAL)


@dataclass(frozen=True)
class ReportWindow:
    day: date
    start: datetime
    end: datetime
    partial: bool

    @property
    def hours(self) -> list[datetime]:
        """Hour starts in ``[start, end)``."""
        count = int((self.end - self.start).total_seconds() // 3600)
        return [self.start + timedelta(hours=k) for k in range(count)]

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "date": self.day.isoformat(),
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "partial": self.partial,
        }


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{moment} has no timezone")
    return datetime.fromtimestamp(moment.timestamp(), tz=UTC)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def resolve(
    run_after: datetime, mode: str, report_date: str | None = None, rollout_event: bool = False
) -> ReportWindow:
    """The window of a run at ``run_after``.

    ``daily``: the whole UTC day ``report_date``, by default the day before ``run_after``. ``partial``: the day
    so far, ``[midnight, run_after floored to the hour)`` of ``report_date`` (default: ``run_after``'s day),
    never past that day's end; in the first hour of a day, when nothing of it is complete yet, the day before
    (a rollout just after midnight acted on the previous day's hours). ``auto``: partial when the run was
    triggered by a rollout event, else daily. The window may still be empty (an explicit ``report_date`` in
    the future): the caller decides what that means.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    now = _utc(run_after)
    partial = mode == PARTIAL or (mode == AUTO and rollout_event)
    default_day = now.date() if partial else now.date() - timedelta(days=1)
    hour = now.replace(minute=0, second=0, microsecond=0)
    if partial and not report_date and hour == _midnight(default_day):
        default_day -= timedelta(days=1)
    day = date.fromisoformat(report_date) if report_date else default_day
    start = _midnight(day)
    end = start + timedelta(days=1)
    if partial:
        end = min(end, hour)
        end = max(end, start)
    return ReportWindow(day, start, end, partial)
