"""``sharing``: what fractional sharing alone gives, scheduled as Kubernetes schedules.

Any share on any GPU with room, at no cost (no slice sizes, replica counts, reconfiguration or guard rails), as
under ``ideal``; but each pod is placed once — when it arrives, or when room frees up — and never moved, and the
queue is tried in arrival order with backfill: a pod that does not fit does not hold up the ones behind it, and
nothing makes room for it. The placement is ``ideal``'s packer (the node in use where the pod fits tightest, else
the smallest free node), with one care that repacking does not need: a pod that may run on other models does not
open the last free node of a model some pods can run on alone (their ``gpu_spec``), while another node will do.
Without it an unpinned pod took a sample's one P100 or V100 node and the pods pinned there waited for weeks.

Beside ``ideal`` it splits the bound in two. ``ideal`` also repacks running pods for free and admits pods in
arrival order (a later small pod is suspended so that an earlier whole-GPU pod gets its GPUs); ``sharing`` has
neither, so its small pods wait almost nothing and pods that need whole GPUs wait as under ``static``, or longer,
while small pods backfill every GPU that frees up. It is no bound for the mean (serving the multi-GPU pods is
worth more than it costs on most fleets): it is what the small pods' wait would be if nothing made room for the
large ones, against which a policy's price for serving them is read (docs/backtest.md).

``sharing-forms`` is ``sharing`` in the forms a GPU can really take: each fractional pod holds the smallest MIG
slice (``g`` / compute slices) or MPS tenant (1 / replicas, the catalogue's replica counts up to the model's
limit) at least its share, on any GPU model it may run on, or else a whole GPU: a 0.6-GPU pod holds a whole GPU,
as it does under ``packing``, where ``sharing`` pairs it with a 0.4-GPU pod. Still optimistic — a GPU takes any
mix of those sizes, where a real one has one MIG layout or one replica count —, it tells how much of ``ideal``'s
node-GPU-hour cut placing each pod once could reach with the sharing the GPU Operator offers (docs/backtest.md).
"""

from __future__ import annotations

import dataclasses
import functools

from slicewise.catalog import Catalog, GpuModel
from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.fleet import EPS, WHOLE, Ask
from slicewise.whatif.ideal import IdealReplay, NewPacking, Packing
from slicewise.whatif.policies import SHARING, SHARING_FORMS
from slicewise.whatif.trace import TraceNode, TracePod


class SharingReplay(IdealReplay):
    """``sharing`` over a trace: :class:`IdealReplay`'s fleet, packer and meter without repacking or suspension."""

    name = SHARING

    def _new_packing(self, nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig) -> NewPacking:
        return functools.partial(Packing, spare=self._sole_models(nodes))

    def _sole_models(self, nodes: list[TraceNode]) -> frozenset[str]:
        """The GPU models of the fleet some pod can run on alone (its ``gpu_spec`` leaves it one): placing
        pods once, the last free node of such a model is left to them while another will do."""
        kinds = {n.model for n in nodes}
        allowed = (kinds.intersection(p.models) for p in self.pods if p.models)
        return frozenset(next(iter(only)) for only in allowed if len(only) == 1)

    def _arrive(self, pod_id: int, when: float) -> None:
        self.waiting_since[pod_id] = when
        if self.packing.add(pod_id, self.asks[pod_id]):
            self._start(pod_id, when)
        else:
            self.waiting.append(pod_id)  # pod ids follow arrival: the queue stays in arrival order
        self.state.refresh(self.packing, self.work, when)

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
        self.state.refresh(self.packing, self.work, when)


class FormsReplay(SharingReplay):
    """``sharing-forms``: :class:`SharingReplay` with each fractional share rounded up to a form the GPUs offer."""

    name = SHARING_FORMS

    def _asks(
        self, pods: tuple[TracePod, ...], nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig
    ) -> list[Ask]:
        models = config.fleet_models(nodes, catalog)
        replicas = catalog.mps_replica_counts()
        forms = {name: form_sizes(models.of(name), replicas) for name in {n.model for n in nodes}}
        return [in_forms(ask, forms) for ask in super()._asks(pods, nodes, catalog, config)]


def form_sizes(model: GpuModel, replicas: list[int]) -> tuple[float, ...]:
    """The shares of a GPU of ``model`` one pod can hold, ascending: its MIG slices, its MPS tenants, a whole GPU."""
    return tuple(sorted({*mig_sizes(model), *mps_sizes(model, replicas)}))


def mig_sizes(model: GpuModel) -> tuple[float, ...]:
    """The shares of a GPU of ``model`` a MIG slice gives (``g`` / compute slices), ascending, then a whole GPU;
    (1.0,) for a model without MIG."""
    return tuple(sorted({profile.g / model.compute_slices for profile in model.profiles.values()} | {WHOLE}))


def mps_sizes(model: GpuModel, replicas: list[int]) -> tuple[float, ...]:
    """The shares of a GPU of ``model`` an MPS tenant gives (1 / replicas, up to the model's limit), ascending,
    then a whole GPU."""
    return tuple(sorted({1 / r for r in replicas if 1 < r <= model.mps_max_replicas} | {WHOLE}))


def in_forms(ask: Ask, forms: dict[str, tuple[float, ...]]) -> Ask:
    """``ask`` with a fractional share rounded up to the smallest form of the models it may run on (``forms``,
    by the node list's model names)."""
    if not ask.fractional:
        return ask
    allowed = [sizes for name, sizes in forms.items() if not ask.models or name in ask.models]
    share = min((size for sizes in allowed for size in sizes if size >= ask.share - EPS), default=WHOLE)
    return dataclasses.replace(ask, share=share)
