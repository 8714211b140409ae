"""The scheduler model of the backtest: nodes of MIG slices or (MPS-shared) whole GPUs, filled first-fit.

Every GPU of a node has the node's layout (as NVIDIA's ``all-*`` and Slicewise's ``sw-*`` mig-parted configs
do), except under a split config (``sw-4of8-*``: the first half MIG, the rest whole GPUs). A slot is one MIG
instance (its share of the GPU is g / compute slices), one MPS tenant (1 / replicas) or one whole GPU (1). A
pod asks for ``gpus`` GPUs of ``share`` each:

- one GPU, ``share < 1``: the smallest free slot at least ``share`` (best fit on the node), so a trace request
  is a size, not a resource name: a 0.46-GPU pod takes a 4g slice, an MPS tenant of 1/2, or a whole GPU;
- whole GPUs (``share == 1``, one or more): that many free slots of a full GPU on one node (MIG-disabled GPUs
  without MPS, or 7g instances); MPS tenants never host them (the device plugin refuses multi-GPU requests
  under MPS, and a tenant gets only 1 / replicas of the GPU).

A pod that names GPU models (``gpu_spec``) only goes to nodes of those models. Which node, among those with a
fitting slot, is the scheduler model's choice (``--scheduler``):

- ``first-fit``: the first node in name order;
- ``spread``: Kubernetes' default, ``NodeResourcesFit`` with the ``LeastAllocated`` strategy: the node whose
  allocated share of its GPUs is the lowest once the pod is on it;
- ``binpack``: ``NodeResourcesFit`` with ``MostAllocated`` (the bin-packing profile): the highest.

Both scores are taken over the node's GPU capacity (the share of its GPUs its taken slots cover), as the
scheduler scores ``nvidia.com/gpu`` and ``nvidia.com/mig-*`` when they are among its scored resources; the
trace's CPU and memory are not modelled. Ties go to the first node in name order (kube-scheduler picks one of
the tied nodes at random). Nothing fits -> the pod waits. With ``prefer_shared`` (the backtest's default) a
fractional pod prefers MPS nodes: the preferred node affinity on ``nvidia.com/gpu.sharing-strategy=mps`` that
docs/planner.md recommends for fractional pods. The planner's standby taints (``planning.standby``:
``PreferNoSchedule``) count against a node. Where either is in play the model adds the scores as kube-scheduler's
default profile does: ``TaintToleration`` x 3 (100 - 100 x the node's untolerated taints // the most any node
that fits has; 100 for all when none has any), ``NodeAffinity`` x 2 (100 for an MPS node when one fits, else 0)
and ``NodeResourcesFit`` x 1 (the score above, 0-100; none for first-fit). The planner taints no MPS node, so
the MPS preference (200 points) never meets a taint; with up to four grades (one per node size) a grade is worth
``3 x 100 / most`` points, 75 when some fitting node has four, and a tighter fit (up to 100) can jump one, as it
does in a cluster. With two grades or fewer, the sum orders the nodes as "fewer taints first, then the fit".

A node the planner emptied for the cluster autoscaler is **released**: the autoscaler removes it, so no pod is
placed there; when pods fit no other node, the autoscaler adds back the released nodes they need (each chosen
by :meth:`ReplayFleet.to_add`; the replay charges the time it takes). A node the autoscaler found unneeded
(``unneeded_since``) carries its ``DeletionCandidateOfClusterAutoscaler`` soft taint until a pod lands there, a
change takes it away or it goes.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from slicewise.catalog import Catalog, GpuModel, Layout, resource_for_profile
from slicewise.catalog.resources import GPU_RESOURCE

WHOLE = 1.0
EPS = 1e-9
FIRST_FIT, SPREAD, BINPACK = "first-fit", "spread", "binpack"
SCHEDULERS = (FIRST_FIT, SPREAD, BINPACK)
#: kube-scheduler's highest plugin score, and the default profile's weights of the plugins the model scores.
MAX_SCORE = 100
TAINT_WEIGHT, AFFINITY_WEIGHT, FIT_WEIGHT = 3, 2, 1


@dataclass(frozen=True)
class Ask:
    """What a pod asks the scheduler model for: ``gpus`` GPUs of ``share`` each, on a node of one of ``models``
    (the node list's names; () = any)."""

    gpus: int
    share: float
    models: tuple[str, ...] = ()

    @property
    def fractional(self) -> bool:
        return self.gpus == 1 and self.share < WHOLE - EPS


@dataclass
class Slot:
    gpu: int
    share: float
    resource: str
    pod: int = -1  # the pod on it; -1 when free


def slots_for(model: GpuModel, layouts: Sequence[Layout | None], replicas: int) -> list[Slot]:
    """The slots of GPUs in ``layouts``, one per GPU (None: MIG disabled, ``replicas`` MPS tenants per GPU)."""
    slots = []
    for gpu, layout in enumerate(layouts):
        if layout is None:
            slots += [Slot(gpu, 1.0 / replicas, GPU_RESOURCE) for _ in range(replicas)]
            continue
        for profile, count in layout:
            share = model.profile(profile).g / model.compute_slices
            slots += [Slot(gpu, share, resource_for_profile(profile)) for _ in range(count)]
    return slots


class SimNode:
    """One node: its configuration, its slots and the pods on them."""

    def __init__(
        self,
        name: str,
        gpus: int,
        model: GpuModel,
        catalog: Catalog,
        mig_config: str,
        plugin: str,
        kind: str = "",
        price: float = 0.0,
    ):
        """``kind``: the GPU model as the node list names it (what a pod's ``gpu_spec`` names); ``price``: per
        GPU-hour."""
        self.name, self.gpus, self.model, self.catalog, self.kind = name, gpus, model, catalog, kind
        self.price = price
        self.available = True  # False while the MIG manager / device plugin reconfigures it
        # Cordoned so that its pods finish (planning.holds): they run on, no pod is placed there.
        self.held = False
        self.last_change: float | None = None
        self.pods: dict[int, list[int]] = {}  # pod -> its slot indices
        self.gpu_pods = [0] * gpus  # pods per physical GPU
        self.load = 0.0  # requested GPU-equivalents of the pods on it
        self.allocated = 0.0  # GPU-equivalents of its taken slots (what the scheduler scores)
        self.configure(mig_config, plugin)

    def configure(self, mig_config: str, plugin: str) -> None:
        if self.pods:
            raise RuntimeError(f"{self.name}: reconfigured with pods on it")
        self.mig_config, self.plugin = mig_config, plugin
        layouts = self.catalog.gpu_layouts(mig_config, self.model.name, self.gpus)
        self.replicas = self.catalog.mps_replicas(plugin)
        self.slots = slots_for(self.model, layouts, self.replicas)

    def free_whole(self) -> int:
        """Free slots that are a whole GPU (MIG disabled without MPS, or a 7g instance)."""
        return sum(1 for s in self.slots if s.pod < 0 and s.share >= WHOLE - EPS)

    def free_shares(self) -> Counter[float]:
        return Counter(s.share for s in self.slots if s.pod < 0)

    def fit(self, gpus: int, share: float) -> list[int] | None:
        """The slots a pod would take here, or None."""
        if gpus == 1 and share < WHOLE - EPS:
            best = None
            for index, slot in enumerate(self.slots):
                if (
                    slot.pod < 0
                    and slot.share >= share - EPS
                    and (best is None or slot.share < self.slots[best].share)
                ):
                    best = index
            return None if best is None else [best]
        whole = [i for i, s in enumerate(self.slots) if s.pod < 0 and s.share >= WHOLE - EPS]
        return whole[:gpus] if len(whole) >= gpus else None

    def place(self, pod: int, slots: list[int], demand: float) -> None:
        for index in slots:
            self.slots[index].pod = pod
            self.gpu_pods[self.slots[index].gpu] += 1
            self.allocated += self.slots[index].share
        self.pods[pod] = slots
        self.load += demand

    def release(self, pod: int, demand: float) -> list[int]:
        slots = self.pods.pop(pod)
        for index in slots:
            self.slots[index].pod = -1
            self.gpu_pods[self.slots[index].gpu] -= 1
            self.allocated -= self.slots[index].share
        if not self.pods:
            self.load = self.allocated = 0.0  # no drift from float sums on an empty node
        else:
            self.load = max(0.0, self.load - demand)
        return slots

    def copy(self) -> SimNode:
        twin = copy.copy(self)
        twin.slots = [Slot(s.gpu, s.share, s.resource, s.pod) for s in self.slots]
        twin.pods = {pod: list(slots) for pod, slots in self.pods.items()}
        twin.gpu_pods = list(self.gpu_pods)
        return twin

    def busy_gpus(self) -> int:
        return sum(1 for n in self.gpu_pods if n)

    def gpu_utilisation(self) -> float:
        """cluster-autoscaler's utilisation of a GPU node: its pods' ``nvidia.com/gpu`` requests over its
        allocatable ``nvidia.com/gpu`` (MPS tenants are units of it). A node that advertises none, every GPU under
        MIG (the mixed strategy names its instances ``nvidia.com/mig-*``), reads 0: an "unready GPU" to the
        autoscaler, which scales such a node down as if idle whenever its pods fit elsewhere."""
        units = [s for s in self.slots if s.resource == GPU_RESOURCE]
        return sum(1 for s in units if s.pod >= 0) / len(units) if units else 0.0


class ReplayFleet:
    """All nodes plus the fleet-wide count of free slots by share (of available nodes), for quick refusals."""

    def __init__(self, nodes: list[SimNode], scheduler: str = FIRST_FIT, prefer_shared: bool = False):
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")
        self.nodes = nodes
        self.scheduler = scheduler
        self.prefer_shared = prefer_shared
        self.mps = np.array([n.replicas > 1 for n in nodes], dtype=bool)  # nodes sharing their GPUs by MPS
        self.by_name = {n.name: n for n in nodes}
        self.position = {n.name: i for i, n in enumerate(nodes)}
        self.owned: set[str] | None = None  # a fork's nodes copied so far; None: every node is this fleet's
        self.free: Counter[float] = Counter()
        for node in nodes:
            self.free.update(node.free_shares())
        self.nodes_by_free_whole: Counter[int] = Counter(n.free_whole() for n in nodes)
        self.total_gpus = sum(n.gpus for n in nodes)
        self.work = 0.0  # GPU-equivalents the running pods requested
        self.busy_gpus = 0  # physical GPUs hosting at least one pod
        self.busy_node_gpus = 0  # GPUs of the nodes hosting at least one pod
        self.busy_cost_rate = 0.0  # their price per hour
        self.away_gpus = 0  # GPUs of the nodes being reconfigured
        # The scheduler's view, one entry per node: allocated GPU share, size, whether it takes pods now.
        self.allocated = np.zeros(len(nodes))
        self.sizes = np.array([n.gpus for n in nodes], dtype=float)
        self.up = np.ones(len(nodes), dtype=bool)
        self.released = np.zeros(len(nodes), dtype=bool)  # emptied for the autoscaler: removed until needed
        self.taints = np.zeros(len(nodes), dtype=np.int8)  # standby taints (PreferNoSchedule): fewer first
        # Nodes the last plan kept for pinned pods (planning.pinned): the autoscaler adds them last for a pod that
        # may run anywhere, as the priority expander ranks their node groups.
        self.added_last = np.zeros(len(nodes), dtype=bool)
        # Since when the autoscaler has found the node unneeded (NaN: it has not): the node carries its soft taint
        # (DeletionCandidateOfClusterAutoscaler, PreferNoSchedule), one more untolerated taint on top of the
        # planner's, and is removed once unneeded for the autoscaler's unneeded time. The replay sets it and decides
        # whether a pod landing there makes the node needed again (engine.Replay._maybe_needed); a change or a
        # removal clears it.
        self.unneeded_since = np.full(len(nodes), np.nan)
        self.unbilled = np.zeros(len(nodes), dtype=bool)  # removed, and not (yet) being added back
        self.unbilled_gpus = 0
        self._kind_masks: dict[tuple[str, ...], np.ndarray] = {}

    @property
    def releasable_gpus(self) -> int:
        """GPUs of whole nodes with no pod that are not being reconfigured: what an autoscaler could remove."""
        return self.total_gpus - self.busy_node_gpus - self.away_gpus

    @property
    def service_gpus(self) -> int:
        """GPUs of the nodes the cluster pays for: every node but those the autoscaler removed and is not adding
        back."""
        return self.total_gpus - self.unbilled_gpus

    @property
    def taken(self) -> float:
        """GPU-equivalents of the slots the running pods hold."""
        return float(self.allocated.sum())

    def _account(self, node: SimNode, before: tuple[int, bool], demand: float) -> None:
        gpus, occupied = before
        self.work = max(0.0, self.work + demand)
        self.busy_gpus += node.busy_gpus() - gpus
        self.busy_node_gpus += node.gpus * (bool(node.pods) - occupied)
        self.busy_cost_rate += node.gpus * node.price * (bool(node.pods) - occupied)
        self.allocated[self.position[node.name]] = node.allocated

    def fork(self) -> ReplayFleet:
        """A copy that shares the nodes until it changes one (copy on write): cheap for a short look ahead."""
        twin = copy.copy(self)
        twin.nodes = list(self.nodes)
        twin.by_name = dict(self.by_name)
        twin.free = Counter(self.free)
        twin.nodes_by_free_whole = Counter(self.nodes_by_free_whole)
        twin.allocated, twin.up, twin.mps = self.allocated.copy(), self.up.copy(), self.mps.copy()
        twin.released, twin.taints = self.released.copy(), self.taints.copy()
        twin.added_last = self.added_last.copy()
        twin.unneeded_since, twin.unbilled = self.unneeded_since.copy(), self.unbilled.copy()
        twin.owned = set()
        return twin

    def own(self, node: SimNode) -> SimNode:
        """The node as this fleet may change it (a fork copies it on first write). A fork that owns it already
        returns its own copy, so a caller holding the node from before the first write never changes the
        original, which the fleet it was forked from still uses."""
        if self.owned is None:
            return node
        if node.name in self.owned:
            return self.by_name[node.name]
        mine = node.copy()
        self.nodes[self.position[node.name]] = mine
        self.by_name[node.name] = mine
        self.owned.add(node.name)
        return mine

    def could_fit(self, ask: Ask) -> bool:
        """False when no free slot of the whole fleet could hold the request (a quick refusal; models aside)."""
        if ask.fractional:
            return any(count > 0 and s >= ask.share - EPS for s, count in self.free.items())
        return self.free[WHOLE] >= ask.gpus if WHOLE in self.free else False

    def eligible(self, models: tuple[str, ...]) -> np.ndarray:
        """Which nodes a pod naming ``models`` may run on (every node for ``()``), as a mask."""
        mask = self._kind_masks.get(models)
        if mask is None:
            mask = np.array([not models or n.kind in models for n in self.nodes], dtype=bool)
            self._kind_masks[models] = mask
        return mask

    def find(self, ask: Ask) -> tuple[SimNode, list[int]] | None:
        """The node and slots the scheduler model gives the request now, or None (it waits): the feasible node
        with the highest score, kube-scheduler's weighted sum of ``TaintToleration`` (weight 3, by the standby
        ``taints`` and the autoscaler's soft taint the pod does not tolerate), ``NodeAffinity`` (weight 2,
        with ``prefer_shared`` for a fractional pod on an MPS node) and ``NodeResourcesFit`` (weight 1, by the
        scheduler model), each normalised as kube-scheduler does over the nodes that fit; ties to name order."""
        if not self.could_fit(ask):
            return None
        allowed = self.up & self.eligible(ask.models)
        shared = self.prefer_shared and ask.fractional
        if not shared and not self.taints[allowed].any() and np.isnan(self.unneeded_since[allowed]).all():
            return self._placed(ask, allowed)  # the fit score alone orders the nodes
        feasible, slots = [], []
        for index in np.flatnonzero(allowed):
            found = self.nodes[index].fit(ask.gpus, ask.share)
            if found is not None:
                feasible.append(index)
                slots.append(found)
        if not feasible:
            return None
        at = np.array(feasible)
        best = int(np.argmax(self._scores(ask, at, shared)))  # the first of the highest: name order
        return self.nodes[at[best]], slots[best]

    def _scores(self, ask: Ask, at: np.ndarray, shared: bool) -> np.ndarray:
        """kube-scheduler's score of each node in ``at`` (the nodes that fit): the default plugin weights, each
        plugin's score normalised over those nodes (``DefaultNormalizeScore``: integer, 0-100)."""
        taints = self.taints[at].astype(np.int64) + ~np.isnan(self.unneeded_since[at])
        most = int(taints.max())
        # TaintToleration: fewer untolerated PreferNoSchedule taints score higher (reversed); none: all 100.
        toleration = np.full(len(at), MAX_SCORE) if most == 0 else MAX_SCORE - MAX_SCORE * taints // most
        affinity = np.where(self.mps[at], MAX_SCORE, 0) if shared else 0  # one preferred term: 100 or 0
        fit = 0.0 if self.scheduler == FIRST_FIT else self._fit_score(ask, at)
        return TAINT_WEIGHT * toleration + AFFINITY_WEIGHT * affinity + FIT_WEIGHT * fit

    def _fit_score(self, ask: Ask, at: np.ndarray) -> np.ndarray:
        """``NodeResourcesFit``'s score (0-100) of each node in ``at`` with the pod on it: its allocated share of
        its GPUs (``MostAllocated``), or the rest (``LeastAllocated``)."""
        after = (self.allocated[at] + ask.gpus * ask.share) / self.sizes[at]
        return (1.0 - after if self.scheduler == SPREAD else after) * MAX_SCORE

    def _placed(self, ask: Ask, allowed: np.ndarray) -> tuple[SimNode, list[int]] | None:
        """The scheduler model's node among ``allowed`` (a mask) by the fit score alone, and the slots there, or
        None."""
        candidates = np.flatnonzero(allowed)
        if self.scheduler != FIRST_FIT and len(candidates) > 1:
            # Stable sort: equal scores keep name order.
            candidates = candidates[np.argsort(-self._fit_score(ask, candidates), kind="stable")]
        for index in candidates:
            node = self.nodes[index]
            slots = node.fit(ask.gpus, ask.share)
            if slots is not None:
                return node, slots
        return None

    def _whole_changed(self, before: int, after: int) -> None:
        self.nodes_by_free_whole[before] -= 1
        self.nodes_by_free_whole[after] += 1

    def take(self, node: SimNode, pod: int, slots: list[int], demand: float) -> SimNode:
        node = self.own(node)
        before, whole = (node.busy_gpus(), bool(node.pods)), node.free_whole()
        node.place(pod, slots, demand)
        self.free.subtract(node.slots[i].share for i in slots)
        self._account(node, before, demand)
        self._whole_changed(whole, node.free_whole())
        return node

    def give_back(self, node: SimNode, pod: int, demand: float) -> SimNode:
        node = self.own(node)
        before, whole = (node.busy_gpus(), bool(node.pods)), node.free_whole()
        slots = node.release(pod, demand)
        if node.available and not node.held:
            self.free.update(node.slots[i].share for i in slots)
            self._whole_changed(whole, node.free_whole())
        self._account(node, before, -demand)
        return node

    def hold(self, node: SimNode) -> None:
        """Cordon the node so that its pods finish (``planner_cordon_to_drain``, planning.holds): they run on, and
        no pod is placed there until :meth:`unhold` (or a change, or a removal, which lift the hold too)."""
        node = self.own(node)
        if node.held or not node.available:
            return
        self.free.subtract(node.free_shares())
        self.nodes_by_free_whole[node.free_whole()] -= 1
        node.held = True
        self.up[self.position[node.name]] = False

    def unhold(self, node: SimNode) -> None:
        node = self.own(node)
        if not node.held:
            return
        node.held = False
        self.free.update(node.free_shares())
        self.nodes_by_free_whole[node.free_whole()] += 1
        self.up[self.position[node.name]] = True

    def unavailable(self, node: SimNode) -> None:
        """The node goes away for reconfiguration (its pods must have been released first)."""
        self.unhold(node)
        node = self.own(node)
        if node.available:
            self.free.subtract(node.free_shares())
            self.nodes_by_free_whole[node.free_whole()] -= 1
            node.available = False
            self.up[self.position[node.name]] = False
            self.unneeded_since[self.position[node.name]] = np.nan
            self.away_gpus += node.gpus

    def back(self, node: SimNode, mig_config: str, plugin: str) -> None:
        node = self.own(node)
        node.configure(mig_config, plugin)
        node.available = True
        self.up[self.position[node.name]] = True
        self.mps[self.position[node.name]] = node.replicas > 1
        self.away_gpus -= node.gpus
        self.free.update(node.free_shares())
        self.nodes_by_free_whole[node.free_whole()] += 1

    def release(self, node: SimNode) -> None:
        """The autoscaler removes an empty, available node: no pod is placed there until :meth:`restore`."""
        self.unhold(node)
        node = self.own(node)
        position = self.position[node.name]
        if node.pods or not node.available or self.released[position]:
            raise RuntimeError(f"{node.name}: only an empty node that takes pods can be released")
        self.free.subtract(node.free_shares())
        self.nodes_by_free_whole[node.free_whole()] -= 1
        self.up[position] = False
        self.released[position] = True
        self.unneeded_since[position] = np.nan
        self.unbilled[position] = True
        self.unbilled_gpus += node.gpus

    def renew(self, node: SimNode, mig_config: str, plugin: str) -> None:
        """A released node as the autoscaler will add it back: a new machine of its node group, in the group's
        configuration (the labels Slicewise set went with the old Node object)."""
        node = self.own(node)
        position = self.position[node.name]
        if not self.released[position]:
            raise RuntimeError(f"{node.name}: only a released node is renewed")
        node.configure(mig_config, plugin)
        node.last_change = None
        self.mps[position] = node.replicas > 1

    def booting(self, position: int) -> None:
        """The autoscaler has asked for a released node back: it is billed from now, though it takes no pod
        until :meth:`restore`."""
        if self.unbilled[position]:
            self.unbilled[position] = False
            self.unbilled_gpus -= self.nodes[position].gpus

    def restore(self, node: SimNode) -> None:
        """A released node is back (the autoscaler added it), empty, as :meth:`renew` left it."""
        node = self.own(node)
        position = self.position[node.name]
        if not self.released[position]:
            raise RuntimeError(f"{node.name}: not released")
        self.booting(position)
        self.released[position] = False
        self.up[position] = True
        self.free.update(node.free_shares())
        self.nodes_by_free_whole[node.free_whole()] += 1

    def to_add(self, ask: Ask, exclude: Collection[int] = ()) -> int | None:
        """The released node the autoscaler adds for a request no node in service fits (by position), or None:
        for a pod that names no GPU model, one the last plan did not keep for pinned pods where one fits (the
        ``priority`` expander ranks those groups last), then the smallest that hosts it, then the first in name
        order (the ``least-waste`` expander's choice)."""
        candidates = np.flatnonzero(self.released & self.eligible(ask.models))
        fitting = [
            int(i)
            for i in candidates
            if int(i) not in exclude and self.nodes[i].fit(ask.gpus, ask.share) is not None
        ]
        anywhere = not ask.models
        return (
            min(fitting, key=lambda i: (anywhere and bool(self.added_last[i]), self.sizes[i], i))
            if fitting
            else None
        )

    def fragmentation(self, requests: Counter[tuple[int, float]]) -> float | None:
        """The expected share of free capacity that cannot host a request drawn from ``requests`` ((gpus,
        share) -> count): free slots smaller than a one-GPU request; for whole-GPU requests, everything but
        the whole GPUs on nodes with enough of them free. None with no free capacity or no requests."""
        free = sum(share * count for share, count in self.free.items() if count > 0)
        total = sum(requests.values())
        if free <= EPS or total == 0:
            return None
        unusable = 0.0
        for (gpus, share), count in requests.items():
            if gpus == 1 and share < WHOLE - EPS:
                small = sum(s * n for s, n in self.free.items() if n > 0 and s < share - EPS)
            else:
                usable = sum(k * n for k, n in self.nodes_by_free_whole.items() if k >= gpus and n > 0)
                small = free - usable
            unusable += count * small
        return min(1.0, max(0.0, unusable / total / free))
