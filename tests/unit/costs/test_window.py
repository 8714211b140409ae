"""The report window: the previous full UTC day, or the day so far on a rollout event."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from slicewise.costs.window import resolve

RUN = datetime(2026, 11, 25, 0, 15, tzinfo=UTC)


def test_the_daily_run_covers_the_previous_full_utc_day() -> None:
    window = resolve(RUN, "auto")
    assert (window.day, window.partial) == (date(2026, 11, 24), False)
    assert window.start == datetime(2026, 11, 24, tzinfo=UTC) and window.end == datetime(
        2026, 11, 25, tzinfo=UTC
    )
    assert len(window.hours) == 24


def test_a_rollout_event_gives_the_day_so_far_up_to_the_last_whole_hour() -> None:
    window = resolve(datetime(2026, 11, 24, 14, 47, tzinfo=UTC), "auto", rollout_event=True)
    assert window.partial and window.day == date(2026, 11, 24)
    assert window.end == datetime(2026, 11, 24, 14, tzinfo=UTC) and len(window.hours) == 14


def test_a_partial_report_in_the_first_hour_of_a_day_covers_the_day_before() -> None:
    # 00:15: nothing of the new day is complete; the rollout acted on yesterday's hours.
    window = resolve(RUN, "partial")
    assert window.day == date(2026, 11, 24) and window.partial and len(window.hours) == 24
    assert resolve(datetime(2026, 11, 25, 1, 5, tzinfo=UTC), "partial").day == date(2026, 11, 25)
    assert resolve(RUN, "partial", report_date="2026-11-25").hours == []  # an explicit day is kept


def test_an_explicit_day_and_mode_win_and_times_are_read_in_utc() -> None:
    cest = timezone(timedelta(hours=2))
    window = resolve(datetime(2026, 11, 25, 1, 30, tzinfo=cest), "daily", report_date="2026-11-20")
    assert window.day == date(2026, 11, 20) and not window.partial and len(window.hours) == 24
    assert resolve(datetime(2026, 11, 25, 1, 30, tzinfo=cest), "daily").day == date(2026, 11, 23)
    with pytest.raises(ValueError, match="mode"):
        resolve(RUN, "weekly")
