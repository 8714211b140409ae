"""``sharing``: what fractional sharing alone gives, scheduled as Kubernetes schedules.

Any share on any GPU with room, at no cost (no slice sizes, replica counts, reconfiguration or guard rails), as
under ``ideal``; but each pod is placed once — when it arrives, or when room frees up — and never moved, and the
queue is tried in arrival order with backfill: a pod that does not fit does not hold up the ones behind it, and
nothing makes room for it. The placement is ``ideal``'s packer (the node in use where the pod fits tightest, else
the smallest free node).

Beside ``ideal`` it splits the bound in two. ``ideal`` also repacks running pods for free and admits pods in
arrival order (a later small pod is suspended so that an earlier whole-GPU pod gets its GPUs); ``sharing`` has
neither, so its small pods wait almost nothing and pods that need whole GPUs wait as under ``static``, or longer,
while small pods backfill every GPU that frees up. It is no bound for the mean (serving the multi-GPU pods is
worth more than it costs on most fleets): it is what the small pods' wait would be if nothing made room for the
large ones, against which a policy's price for serving them is read (docs/backtest.md).
"""

from __future__ import annotations

from slicewise.whatif.fleet import Ask
from slicewise.whatif.ideal import IdealReplay
from slicewise.whatif.policies import SHARING


class SharingReplay(IdealReplay):
    """``sharing`` over a trace: :class:`IdealReplay`'s fleet, packer and meter without repacking or suspension."""

    name = SHARING

    def _arrive(self, pod_id: int, when: float) -> None:
        self.waiting_since[pod_id] = when
        if self.packing.add(pod_id, self.asks[pod_id]):
            self._start(pod_id, when)
        else:
            self.waiting.append(pod_id)  # pod ids follow arrival: the queue stays in arrival order
        self.state.refresh(self.packing, self.work)

    def _depart(self, pod_ids: list[int], when: float) -> None:
        self._remove(pod_ids)
        still: list[int] = []
        # Placing pods only takes room: an ask that failed cannot fit later in the pass.
        failed: set[Ask] = set()
        for pod_id in self.waiting:
            ask = self.asks[pod_id]
            if ask not in failed and self.packing.add(pod_id, ask):
                self._start(pod_id, when)
            else:
                failed.add(ask)
                still.append(pod_id)
        self.waiting = still
        self.state.refresh(self.packing, self.work)
