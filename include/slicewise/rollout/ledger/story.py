"""The rollout ledger told as text: one readable account of a rollout for task logs (pure formatting)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from slicewise.rollout.ledger.tables import EventRecord, MeasurementRecord, NodeRecord, Rollout, Wave


def render_story(
    rollout: Rollout,
    waves: Sequence[Wave],
    nodes: Sequence[NodeRecord],
    measurements: Sequence[MeasurementRecord],
    events: Sequence[EventRecord],
) -> str:
    """Rollout header, waves, each node's labels before -> after with its status, measurements, events."""
    lines = [
        f"Rollout #{rollout.id} on {rollout.cluster}: {rollout.status} ({rollout.reason})",
        f"  run {rollout.run_id}, plan {rollout.plan_path}",
        f"  started {_at(rollout.created_at)}, last update {_at(rollout.updated_at)}",
        "Waves:",
    ]
    for wave in waves:
        name = "canary" if wave.index == 0 else f"wave {wave.index}"
        lines.append(f"  {name}: {wave.status} [{', '.join(wave.nodes)}]")
    lines.append("Nodes:")
    for node in nodes:
        cordon = ", cordoned by us" if node.cordoned_by_us else ""
        lines.append(f"  {node.node} (wave {node.wave}): {node.status}, step {node.step or '-'}{cordon}")
        for label, after in sorted(node.desired.items()):
            before = _before(node.snapshot, label)
            lines.append(f"    {label}: {before} -> {_label(after)}")
        if node.detail:
            lines.append(f"    detail: {node.detail}")
    lines.append("Measurements:" if measurements else "Measurements: none")
    for m in measurements:
        detail = f" ({m.detail})" if m.detail else ""
        lines.append(
            f"  {_at(m.taken_at)} wave {m.wave} {m.check} on {m.node or 'cluster'}: "
            f"{m.outcome}, value {_value(m.value)}{detail}"
        )
    lines.append("Events:")
    for e in events:
        where = "".join(
            (f" wave {e.wave}" if e.wave is not None else "", f" node {e.node}" if e.node else "")
        )
        lines.append(f"  {_at(e.at)}{where}: {e.message}")
    return "\n".join(lines)


def _at(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _label(value: Any) -> str:
    return "(absent)" if value is None else repr(value) if value == "" else str(value)


def _before(snapshot: Mapping[str, Any] | None, label: str) -> str:
    if snapshot is None:
        return "(no snapshot yet)"
    # Labels may sit at the top of the snapshot or under "labels" (next to allocatable and the like).
    labels = snapshot.get("labels")
    if label not in snapshot and isinstance(labels, Mapping):
        return _label(labels.get(label))
    return _label(snapshot.get(label))


def _value(value: float | None) -> str:
    if value is None:
        return "none"
    return str(value) if not math.isfinite(value) else f"{value:.4g}"
