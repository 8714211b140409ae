"""``sharing-modes``: ``sharing-forms`` in the modes the GPU Operator gives a node, a reference.

``sharing-forms`` lets any GPU take any mix of slices and tenants, and any node mix whole-GPU pods with MPS
tenants. The NVIDIA device plugin does not: "the same sharing method is applied to all GPUs on a node" (one MPS
replica count for all of them), and "sharing with MPS is currently not supported on devices with MIG enabled"
(k8s-device-plugin's README). Here each node in use has one mode, set by the pod that opened it:

- **whole GPUs**: whole-GPU pods, fractional pods on whole GPUs and, on a model with MIG, any MIG slices per GPU
  beside whole GPUs (mig-parted's per-device configs and the mixed strategy allow that mix);
- **MPS** with one tenant size (1 / replicas): only fractional pods that tenant holds, one tenant each.

A fractional pod goes, best fit, to a tenant or slice on a node in use, else to a whole GPU on a node in use
(best fit by whole GPUs left, as a whole-GPU pod), else to the smallest free node, which it puts in MPS with the
smallest tenant that holds it where that is smaller than its smallest MIG slice (on a model without MIG, any tenant
below a whole GPU), and in whole-GPU mode otherwise. Placed once and never moved, as under ``sharing``. A node's
mode lasts while it holds a pod and is free to change once it is empty (no reconfiguration time), and a GPU takes
any mix of MIG slices, so it is still optimistic; but it is a greedy rule, not a bound. It tells how much of
``ideal``'s node-GPU-hour cut placing each pod once could reach within the modes a real node has (docs/backtest.md).

``ideal-modes`` is ``ideal`` (free repacking, arrival-order admission) on the same nodes: how much of ``ideal``'s
lead the modes themselves cost when pods move for free.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slicewise.catalog import Catalog
from slicewise.whatif.engine import BacktestConfig
from slicewise.whatif.fleet import EPS, WHOLE, Ask
from slicewise.whatif.ideal import Buckets, IdealReplay, NewPacking, NodeSpec, OpenNode, Packing
from slicewise.whatif.policies import IDEAL_MODES, SHARING_MODES
from slicewise.whatif.sharing import SharingReplay, mig_sizes, mps_sizes
from slicewise.whatif.trace import TraceNode

#: What a placement that gives a fractional pod a whole GPU adds to its slack: any tenant or slice wins over it.
WHOLE_GPU_FOR_A_SHARE = float(1 << 10)


@dataclass(frozen=True)
class NodeForms:
    """The shares a node of one model offers a fractional pod, each ascending and ending with a whole GPU."""

    mig: tuple[float, ...]
    mps: tuple[float, ...]


def _smallest(sizes: tuple[float, ...], share: float) -> float:
    return next(size for size in sizes if size >= share - EPS)


class ModeNode(OpenNode):
    """A node in use with one mode: ``tenant`` 1.0 for whole GPUs (and MIG slices), below 1 for MPS tenants of
    that size; None until its first pod."""

    __slots__ = ("forms", "tenant")

    def __init__(self, spec: NodeSpec, forms: NodeForms):
        super().__init__(spec)
        self.forms = forms
        self.tenant: float | None = None

    def form(self, ask: Ask) -> tuple[float, float] | None:
        """(the share this node gives ``ask``, the node's tenant after it); None where its mode cannot host it."""
        if not ask.fractional:
            return None if self.tenant is not None and self.tenant < WHOLE - EPS else (WHOLE, WHOLE)
        if self.tenant is not None and self.tenant < WHOLE - EPS:
            return (self.tenant, self.tenant) if self.tenant >= ask.share - EPS else None
        mig = _smallest(self.forms.mig, ask.share)
        if self.tenant is None:
            mps = _smallest(self.forms.mps, ask.share)
            if mps < mig - EPS:
                return mps, mps
        return mig, WHOLE

    def fit(self, ask: Ask) -> tuple[int, ...] | None:
        form = self.form(ask)
        return None if form is None else super().fit(Ask(ask.gpus, form[0], ask.models))

    def slack(self, ask: Ask, gpus: tuple[int, ...]) -> float:
        form = self.form(ask)
        assert form is not None
        slack = super().slack(Ask(ask.gpus, form[0], ask.models), gpus)
        return slack + WHOLE_GPU_FOR_A_SHARE if ask.fractional and form[0] >= WHOLE - EPS else slack

    def take(self, pod: int, ask: Ask, gpus: tuple[int, ...]) -> None:
        form = self.form(ask)
        assert form is not None
        self.tenant = form[1]
        super().take(pod, Ask(ask.gpus, form[0], ask.models), gpus)


class ModesPacking(Packing):
    """:class:`Packing` whose nodes each have one mode (:class:`ModeNode`)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        by_size: dict[tuple[str, ...], Buckets],
        forms: Mapping[str, NodeForms],
        spare: frozenset[str] = frozenset(),
    ):
        super().__init__(nodes, by_size, spare)
        self.forms = forms  # by the node list's model name

    def _opened(self, spec: NodeSpec) -> OpenNode:
        return ModeNode(spec, self.forms[spec.kind])


def modes_packing(
    nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig, spare: frozenset[str] = frozenset()
) -> NewPacking:
    """What makes empty :class:`ModesPacking` of ``nodes``, with the forms of each node's GPU model (``spare``:
    :class:`Packing`'s)."""
    models = config.fleet_models(nodes, catalog)
    replicas = catalog.mps_replica_counts()
    forms = {
        name: NodeForms(mig_sizes(models.of(name)), mps_sizes(models.of(name), replicas))
        for name in {n.model for n in nodes}
    }
    return functools.partial(ModesPacking, forms=forms, spare=spare)


class ModesReplay(SharingReplay):
    """``sharing-modes``: :class:`SharingReplay` on nodes with one sharing mode each."""

    name = SHARING_MODES

    def _new_packing(self, nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig) -> NewPacking:
        return modes_packing(nodes, catalog, config, self._sole_models(nodes))


class IdealModesReplay(IdealReplay):
    """``ideal-modes``: :class:`IdealReplay` (free repacking, arrival order) on nodes with one sharing mode each."""

    name = IDEAL_MODES

    def _new_packing(self, nodes: list[TraceNode], catalog: Catalog, config: BacktestConfig) -> NewPacking:
        return modes_packing(nodes, catalog, config)
