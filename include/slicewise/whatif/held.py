"""What the bounds pay for under the replays' cluster autoscaler: capacity held for the unneeded time.

cluster-autoscaler removes a node only once it has been unneeded for ``--scale-down-unneeded-time``
(``BacktestConfig.scale_down_unneeded_s``), so every policy replayed with that autoscaler keeps paying for a node
that long after its last pod left. ``ideal`` and ``sharing`` repack on a packer of their own and keep no node
list an autoscaler could watch; without this they would pay only for the nodes hosting pods, an autoscaler that
removes a node the moment it empties, and the share of their cut a policy reaches in paid GPU-hours would be
measured against a saving no cluster can make.

:class:`HeldCapacity` charges them, at each instant, the most node-GPUs they had in use over the last unneeded
time, the whole fleet counted in use at the replay's start (every policy starts with every node in service, and
the autoscaler removes none of them sooner than the unneeded time later).
Whichever node the GPUs were on: a node emptied and a node opened in the same window count as one, the
cheapest reading, so the bound stays a bound. A policy that the autoscaler drains of under-used nodes (its
utilisation threshold) can, in a window, pay less than its own busiest instant of that window; the bound's busy
node-GPU-hours stay the strict yardstick.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


class HeldCapacity:
    """The running maximum of a piecewise-constant level over a trailing window of ``hold_s`` seconds."""

    def __init__(self, hold_s: float, start_s: float, level: int):
        self.hold_s = hold_s
        self.level, self.since = 0, start_s
        # Earlier levels still inside the window: (when they leave it, level), levels falling, times rising.
        self.earlier: deque[tuple[float, int]] = deque([(start_s + hold_s, level)])

    @property
    def held(self) -> int:
        """The level paid for now: the current one or a higher one still inside the window."""
        return max(self.level, self.earlier[0][1]) if self.earlier else self.level

    def falls_before(self, when_s: float) -> Iterator[float]:
        """Each instant before ``when_s`` at which the highest earlier level leaves the window, in order. At each,
        :attr:`held` still reads the level paid up to it; the caller meters that, and the level is dropped when it
        asks for the next."""
        while self.earlier and (change := self.earlier[0][0]) < when_s:
            yield change
            while self.earlier and self.earlier[0][0] <= change:
                self.earlier.popleft()

    def set(self, now_s: float, level: int) -> None:
        """The level changes at ``now_s``; the one it leaves stays paid for ``hold_s`` more."""
        if level == self.level:
            return
        if now_s <= self.since:  # a level that lasted no time (several changes at one instant) is never paid
            self.level = level
            return
        until = now_s + self.hold_s
        while self.earlier and self.earlier[-1][1] <= self.level:
            self.earlier.pop()  # lower and leaving sooner than the level now closing: never the maximum again
        self.earlier.append((until, self.level))
        self.level, self.since = level, now_s
