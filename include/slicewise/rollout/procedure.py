"""Change one batch of nodes, or put them back: snapshot → cordon → drain → label → wait and verify → uncordon.

Every step is idempotent: it reads the ledger and the node first and does only what is missing, so a task that
was killed half way can simply run again. Nodes of a batch move through the steps together (at most
``rollout_max_in_flight`` of them), so no more nodes are out of service at once than the budget allows.

The MIG manager's ``success`` alone proves nothing (it is written at once when a layout is already applied, and
a stale ``success`` from the previous change looks the same): a change is verified only when the node's
allocatable GPU resources equal what the catalogue says the desired layout and MPS replicas advertise.

Write-ahead: a cordon is recorded as ours before it is written, a label write with the MIG manager's state just
before it, so a run killed after any single write resumes knowing what it may have done; a ``failed`` read after
a label write counts only once the state has moved since (the MIG manager noticed the write). No node is
uncordoned while its allocatable does not match its labels. A node Slicewise holds (:mod:`slicewise.rollout.holds`)
is cordoned already: the rollout takes its cordon over, and the uncordon drops the hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slicewise.catalog import Catalog, CatalogError, gpus_capacity
from slicewise.cluster.base import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    HOLD_ANNOTATION,
    LAST_CHANGE_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    ClusterBackend,
    ClusterError,
    EvictionBlocked,
    GpuNode,
    LabelsChanged,
    is_gpu_resource,
)
from slicewise.rollout.ledger import Ledger, NodeStatus

log = logging.getLogger(__name__)
CHANGED_LABELS = (MIG_CONFIG_LABEL, DEVICE_PLUGIN_CONFIG_LABEL)

# Steps recorded in the ledger, in order. A restore uses the same names prefixed with "restore:".
SNAPSHOT, CORDONED, DRAINED, LABELLED, VERIFIED, UNCORDONED = (
    "snapshot",
    "cordoned",
    "drained",
    "labelled",
    "verified",
    "uncordoned",
)


@dataclass(frozen=True)
class Timing:
    drain_deadline_s: float
    mig_timeout_s: float
    poll_s: float


@dataclass(frozen=True)
class Clock:
    """Time as the procedure sees it; tests pass a fake one that advances when slept."""

    now: Callable[[], datetime]
    sleep: Callable[[float], None]


class NodeFailed(Exception):
    """This node cannot reach the wanted state; the message says why (recorded in the ledger)."""


def snapshot_of(node: GpuNode, taken_at: datetime) -> dict[str, object]:
    """What a restore needs: the labels Slicewise changes (None = absent) and, for the record, the rest
    (``taken_at`` is also when the analysis measures the node's pre-change baseline)."""
    return {
        "taken_at": taken_at.isoformat(),
        "labels": {key: node.labels.get(key) for key in CHANGED_LABELS},
        "mig_config_state": node.mig_config_state,
        "allocatable": dict(node.allocatable),
        "gpu_product": node.gpu_product,
        "gpu_count": node.gpu_count,
    }


def expected_allocatable(node: GpuNode, labels: Mapping[str, str | None], catalog: Catalog) -> dict[str, int]:
    """GPU resources the node advertises once ``labels`` are applied (mixed MIG strategy)."""
    model = catalog.model_for_product(node.gpu_product)
    if model is None:
        raise NodeFailed(f"unknown GPU product {node.gpu_product!r}")
    try:
        layouts = catalog.gpu_layouts(
            labels.get(MIG_CONFIG_LABEL) or "all-disabled", model.name, node.gpu_count
        )
        replicas = catalog.mps_replicas(labels.get(DEVICE_PLUGIN_CONFIG_LABEL) or "default")
        return gpus_capacity(model, layouts, replicas)
    except CatalogError as exc:
        raise NodeFailed(f"the wanted configuration is not valid for {model.name}: {exc}") from None


def promise_broken(node: GpuNode, catalog: Catalog) -> str:
    """Why the node must stay cordoned ("" when it may be uncordoned): it does not advertise the GPU resources its
    labels promise (a MIG manager still at work, or a failed change)."""
    promised = {k: v for k, v in expected_allocatable(node, node.labels, catalog).items() if v}
    if _gpu_allocatable(node) != promised:
        return f"it advertises {_gpu_allocatable(node)}, its labels promise {promised}"
    return ""


def _without_mig_manager(node: GpuNode, catalog: Catalog) -> str:
    """``success`` for a node whose GPUs have no MIG: no MIG manager runs there (it never writes a state), so the
    device plugin advertising the wanted resources is the whole verification. "" otherwise."""
    model = catalog.model_for_product(node.gpu_product)
    return "success" if model is not None and not model.mig else ""


def _gpu_allocatable(node: GpuNode) -> dict[str, int]:
    return {k: v for k, v in node.allocatable.items() if is_gpu_resource(k) and v}


class Procedure:
    """Moves nodes to wanted labels for one rollout, recording every step in the ledger."""

    def __init__(
        self,
        backend: ClusterBackend,
        ledger: Ledger,
        rollout_id: int,
        catalog: Catalog,
        timing: Timing,
        clock: Clock,
    ) -> None:
        self.backend, self.ledger, self.rollout_id = backend, ledger, rollout_id
        self.catalog, self.timing, self.clock = catalog, timing, clock

    # -- bookkeeping ----------------------------------------------------------------------------------------
    def _event(self, node: str, message: str) -> None:
        log.info("%s: %s", node, message)
        self.ledger.add_event(self.rollout_id, message, self.clock.now(), node=node)

    def _step(self, node: str, step: str, **fields: object) -> None:
        self.ledger.update_node(self.rollout_id, node, step=step, now=self.clock.now(), **fields)  # type: ignore[arg-type]

    # -- apply ----------------------------------------------------------------------------------------------
    def _each(
        self, names: Sequence[str], step: Callable[[str], object], outcome: dict[str, str]
    ) -> list[str]:
        """Run ``step`` on every node; a node whose step fails is aborted (left at its snapshot) and drops out."""
        passed = []
        for name in names:
            try:
                step(name)
                passed.append(name)
            except NodeFailed as why:
                outcome[name] = self._abort(name, str(why))
        return passed

    def _label_desired(self, name: str) -> None:
        record = self.ledger.node(self.rollout_id, name)
        self._label(name, record.desired, self._snapshot_labels(record.snapshot), LABELLED)

    def apply(self, nodes: Sequence[str]) -> dict[str, str]:
        """Change a batch to the ledger's desired labels. Returns node -> final node status
        (DONE, ABORTED: left at its snapshot and uncordoned, FAILED: the change failed, node still cordoned)."""
        outcome: dict[str, str] = {}
        unsettled = []
        for name in nodes:
            record = self.ledger.node(self.rollout_id, name)
            if record.status in (NodeStatus.DONE, NodeStatus.ABORTED):  # settled before a crash: not again
                outcome[name] = record.status
            else:
                unsettled.append(name)
        for name in [n for n in unsettled if self._verified_before_a_crash(n)]:
            # Verified (perhaps uncordoned too) before a kill: cordoning and draining again would evict the pods
            # that started on the changed node since.
            unsettled.remove(name)
            outcome[name] = self._done(name)
        active = self._each(unsettled, self._snapshot_and_cordon, outcome)
        drained = self._each(active, self._drain, outcome)
        labelled = self._each(drained, self._label_desired, outcome)
        for name, error in self._wait_all(labelled, restore=False).items():
            if error is None:
                try:
                    outcome[name] = self._done(name)
                    continue
                except NodeFailed as why:  # the resources changed again between the check and the uncordon
                    error = str(why)
            self.ledger.update_node(
                self.rollout_id, name, status=NodeStatus.FAILED, detail=error, now=self.clock.now()
            )
            self._event(name, f"change failed: {error}; node stays cordoned until the rollback")
            outcome[name] = NodeStatus.FAILED
        return outcome

    def _done(self, name: str) -> str:
        """A verified change: uncordon the node, stamp it and record it DONE."""
        self._uncordon(name, changed=True)
        self.ledger.update_node(
            self.rollout_id, name, status=NodeStatus.DONE, detail="changed and verified", now=self.clock.now()
        )
        return NodeStatus.DONE

    def _verified_before_a_crash(self, name: str) -> bool:
        record = self.ledger.node(self.rollout_id, name)
        if record.step not in (VERIFIED, UNCORDONED) or record.snapshot is None:
            return False
        node = self.backend.get_node(name)
        if any(node.labels.get(k) != v for k, v in record.desired.items()):
            return False
        promised = {k: v for k, v in expected_allocatable(node, record.desired, self.catalog).items() if v}
        return _gpu_allocatable(node) == promised

    @staticmethod
    def _snapshot_labels(snapshot: Mapping[str, object] | None) -> dict[str, str | None]:
        labels = (snapshot or {}).get("labels", {})
        return dict(labels) if isinstance(labels, Mapping) else {}

    def _snapshot_and_cordon(self, name: str) -> None:
        node = self.backend.get_node(name)
        record = self.ledger.node(self.rollout_id, name)
        if record.snapshot is None:
            if reason := node.hands_off():  # a plan made before the node changed hands; nothing done yet
                raise NodeFailed(f"not Slicewise's to touch: {reason}")
            if node.mig_config_state in ("pending", "rebooting"):
                raise NodeFailed(f"the MIG manager is busy (state {node.mig_config_state})")
            now = self.clock.now()
            record = self.ledger.record_snapshot(self.rollout_id, name, snapshot_of(node, now), now)
            self._step(name, SNAPSHOT, status=NodeStatus.IN_PROGRESS)
            self._event(name, f"snapshot {self._snapshot_labels(record.snapshot)}")
        if node.held and not record.cordoned_by_us:
            # Slicewise's own cordon of an earlier run, kept while the node's pods finished: this rollout takes it
            # over (nothing is written; the uncordon at the end also drops the hold).
            self._step(name, CORDONED, cordoned_by_us=True)
            self._event(name, "takes over Slicewise's hold (cordoned by an earlier run)")
        elif node.unschedulable and not record.cordoned_by_us:
            raise NodeFailed("cordoned by someone else: not Slicewise's to change")
        if not node.unschedulable:
            self._cordon(name, CORDONED)

    def _cordon(self, name: str, step: str) -> None:
        # Write-ahead: recorded as ours before the write, so a run killed right after it resumes the node
        # instead of reading the cordon as someone else's.
        self._step(name, step + " (intent)", cordoned_by_us=True)
        self.backend.cordon(name)
        self._step(name, step)
        self._event(name, "cordoned")

    def _drain(self, name: str) -> None:
        """Evict the node's GPU pods through the Eviction API until none is left or the deadline passes."""
        deadline = self.clock.now().timestamp() + self.timing.drain_deadline_s
        while True:
            pods = self.backend.list_gpu_pods(name)
            if not pods:
                self._step(name, DRAINED)
                return
            stuck = [f"{p.namespace}/{p.name}: {'; '.join(p.blockers)}" for p in pods if not p.may_drain]
            if stuck:
                raise NodeFailed("non-evictable GPU pods appeared: " + " | ".join(stuck))
            refused = []
            for pod in pods:
                try:
                    self.backend.evict(pod.namespace, pod.name)
                    self._event(name, f"evicted {pod.namespace}/{pod.name} ({pod.owner_kind or 'bare pod'})")
                except EvictionBlocked as exc:
                    refused.append(f"{pod.namespace}/{pod.name}: {exc}")
            if self.clock.now().timestamp() >= deadline:
                raise NodeFailed(
                    f"drain deadline of {self.timing.drain_deadline_s:g} s passed; still refused: "
                    + (" | ".join(refused) or "pods still terminating")
                )
            self.clock.sleep(self.timing.poll_s)

    def _label(
        self, name: str, wanted: Mapping[str, str | None], before: Mapping[str, str | None], step: str
    ) -> None:
        node = self.backend.get_node(name)
        changes = {k: v for k, v in wanted.items() if node.labels.get(k) != v}
        if not changes:  # written before a crash: do not write again
            return
        # Write-ahead: the MIG manager's state before the write. Until it differs, a state read after the write
        # may be the previous change's (a real MIG manager takes a moment to notice the label).
        intent = {"labels": changes, "state_before": node.labels.get(MIG_STATE_LABEL, "")}
        self.ledger.record_intent(self.rollout_id, name, step + " (intent)", intent, self.clock.now())
        try:
            self.backend.set_labels(name, changes, expected={k: before.get(k) for k in changes})
        except LabelsChanged as exc:
            raise NodeFailed(f"labels changed by someone else since the snapshot: {exc}") from None
        self._step(name, step)
        self._event(name, "labels " + ", ".join(f"{k}: {before.get(k)} -> {v}" for k, v in changes.items()))

    def _wait_all(self, names: Sequence[str], *, restore: bool) -> dict[str, str | None]:
        """Poll until each node is verified (None) or failed (the reason); ``pending`` past the timeout fails.

        Verified: ``success`` and the advertised resources of the wanted labels. Failed: ``failed`` once the MIG
        manager has observed the label write — its state differs from the one recorded before the write, now
        or at an earlier poll; the ``failed`` of the change before is not this write's outcome."""
        waiting = {}
        stale: dict[str, str] = {}
        for name in names:
            record = self.ledger.node(self.rollout_id, name)
            wanted = self._snapshot_labels(record.snapshot) if restore else dict(record.desired)
            waiting[name] = wanted
            intent = (record.snapshot or {}).get("intent")
            stale[name] = str(intent.get("state_before", "")) if isinstance(intent, Mapping) else ""
        observed: set[str] = set()
        started = self.clock.now().timestamp()
        result: dict[str, str | None] = {}
        while waiting:
            for name, wanted in list(waiting.items()):
                node = self.backend.get_node(name)
                try:
                    expected = expected_allocatable(node, wanted, self.catalog)
                except NodeFailed as why:
                    result[name] = str(why)
                    del waiting[name]
                    continue
                state = node.labels.get(MIG_STATE_LABEL, "") or _without_mig_manager(node, self.catalog)
                if state != stale[name]:
                    observed.add(name)
                if state == "failed" and name in observed:
                    result[name] = "the MIG manager reported mig.config.state=failed"
                elif state == "success" and _gpu_allocatable(node) == {
                    k: v for k, v in expected.items() if v
                }:
                    result[name] = None
                    self._step(name, ("restore:" if restore else "") + VERIFIED)
                    self._event(name, f"verified: allocatable {expected}")
                else:
                    continue
                del waiting[name]
            if not waiting:
                break
            if self.clock.now().timestamp() - started >= self.timing.mig_timeout_s:
                for name in waiting:
                    node = self.backend.get_node(name)
                    state = node.labels.get(MIG_STATE_LABEL, "") or _without_mig_manager(node, self.catalog)
                    result[name] = (
                        f"still {state or 'unknown'} after {self.timing.mig_timeout_s:g} s"
                        if state != "success"
                        else f"stale success: allocatable {_gpu_allocatable(node)} does not match the wanted layout"
                    )
                break
            self.clock.sleep(self.timing.poll_s)
        return result

    def _uncordon(self, name: str, *, changed: bool) -> None:
        """Uncordon (and stamp a change), only once the node advertises what its labels promise."""
        node = self.backend.get_node(name)
        if broken := promise_broken(node, self.catalog):
            raise NodeFailed(f"left cordoned: {broken}")
        if changed:
            self.backend.set_annotations(name, {LAST_CHANGE_ANNOTATION: self.clock.now().isoformat()})
        if node.unschedulable or HOLD_ANNOTATION in node.annotations:
            self.backend.uncordon(name)
        self._step(name, UNCORDONED, cordoned_by_us=False)
        self._event(name, "uncordoned")

    def _abort(self, name: str, why: str) -> str:
        """Leave a node untouched by this rollout: nothing was labelled yet, so uncordon if we cordoned it."""
        record = self.ledger.node(self.rollout_id, name)
        try:
            if record.cordoned_by_us:
                self._uncordon(name, changed=False)
        except (ClusterError, NodeFailed) as exc:
            why += f"; uncordoning failed too: {exc}"
        self.ledger.update_node(
            self.rollout_id, name, status=NodeStatus.ABORTED, detail=why, now=self.clock.now()
        )
        self._event(name, f"aborted: {why}")
        return NodeStatus.ABORTED

    # -- restore --------------------------------------------------------------------------------------------
    def restore(self, names: Sequence[str]) -> dict[str, str]:
        """Put nodes back to their snapshot labels (in the given order), same drain and verify procedure.
        Returns node -> RESTORED or RESTORE_FAILED (the node keeps the ledger's reason; a person decides)."""
        outcome: dict[str, str] = {}
        for name in names:
            record = self.ledger.node(self.rollout_id, name)
            if record.status in (NodeStatus.RESTORED, NodeStatus.ABORTED, NodeStatus.PENDING):
                outcome[name] = record.status
                continue
            self.ledger.update_node(self.rollout_id, name, status=NodeStatus.RESTORING, now=self.clock.now())
            try:
                outcome[name] = self._restore_one(name)
            except (NodeFailed, ClusterError) as why:
                self.ledger.update_node(
                    self.rollout_id,
                    name,
                    status=NodeStatus.RESTORE_FAILED,
                    detail=str(why),
                    now=self.clock.now(),
                )
                self._event(name, f"restore failed: {why}")
                outcome[name] = NodeStatus.RESTORE_FAILED
        return outcome

    def _at_snapshot(self, node: GpuNode, before: Mapping[str, str | None]) -> bool:
        """Labels at the snapshot, the MIG manager idle and the GPUs advertising that layout: labels alone are
        not enough, a restore written just before a crash is not on the GPUs until the MIG manager applies it."""
        if any(node.labels.get(k) != v for k, v in before.items()):
            return False
        if node.mig_config_state in ("pending", "rebooting"):
            return False
        promised = {k: v for k, v in expected_allocatable(node, before, self.catalog).items() if v}
        return _gpu_allocatable(node) == promised

    def _restore_one(self, name: str) -> str:
        record = self.ledger.node(self.rollout_id, name)
        before = self._snapshot_labels(record.snapshot)
        node = self.backend.get_node(name)
        if self._at_snapshot(node, before):
            # Never changed (or already put back, and the GPUs say so): only the cordon is ours to undo.
            if record.cordoned_by_us:
                self._uncordon(name, changed=False)
        else:
            if not node.unschedulable:
                self._cordon(name, "restore:" + CORDONED)
            self._drain(name)
            self._label(name, before, dict(record.desired), "restore:" + LABELLED)
            error = self._wait_all([name], restore=True).get(name)
            if error is not None:
                raise NodeFailed(error)
            self._uncordon(name, changed=True)
        self.ledger.update_node(
            self.rollout_id,
            name,
            status=NodeStatus.RESTORED,
            detail="back at its snapshot",
            now=self.clock.now(),
        )
        self._event(name, f"restored to {before}")
        return NodeStatus.RESTORED
