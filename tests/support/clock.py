"""A settable clock for code that takes ``clock: Callable[[], float]``, and the instant most tests start at."""

from __future__ import annotations

#: Monday 2024-01-08 14:00:30 UTC: working hours, so most of the simulated fleet's slots hold a pod.
WORKDAY_INSTANT = 1_704_672_000 + 14 * 3600 + 30


class FakeClock:
    """Returns ``now`` (unix seconds) until a test moves it: ``clock.now += 20``."""

    def __init__(self, now: float) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now
