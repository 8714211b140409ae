"""Read a pod trace and a node list (the Alibaba ``openb`` format) into plain records.

Pods: ``name, num_gpu, gpu_milli`` and, for the time, ``creation_time, deletion_time`` (seconds from the trace's
start) with an optional ``scheduled_time`` and ``qos``. A pod runs ``deletion - scheduled`` seconds (``deletion -
creation`` when it never got scheduled: its lifetime is the best guess of how long it would have run). Pods
without GPUs (``num_gpu`` 0) are left out. A pod list without time columns (``multigpu20``) takes each pod's
times from a timed list of the same cluster (``--times-from``, by default the ``*_default.csv`` beside it):
by name, else the timed pod in the same row.

An optional ``gpu_spec`` (``V100M16|V100M32``) names the GPU models a pod may run on, in the node list's names;
empty means any.

Nodes: ``sn, gpu, model``; nodes without GPUs are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

TIME_COLUMNS = ("creation_time", "deletion_time")


class TraceError(ValueError):
    """The trace cannot be read as a pod or node list; the message says what is wrong."""


#: Size classes of requests, as the backtest reports waiting per class.
FRACTIONAL, ONE_GPU, MULTI_GPU = "fractional", "1 GPU", "multi-GPU"
SIZE_CLASSES = (FRACTIONAL, ONE_GPU, MULTI_GPU)


@dataclass(frozen=True)
class TracePod:
    name: str
    arrival_s: float
    duration_s: float
    gpus: int  # GPUs requested (num_gpu >= 1)
    share: float  # share of each GPU: gpu_milli / 1000, in (0, 1]; 1 for multi-GPU pods
    qos: str
    models: tuple[str, ...] = ()  # the node list's GPU model names it may run on (gpu_spec); () = any
    # It carried slicewise.io/evictable=true (a cluster's own history; the public traces carry no annotations).
    opted_in: bool = False

    @property
    def size_class(self) -> str:
        if self.share < 1.0:
            return FRACTIONAL
        return ONE_GPU if self.gpus == 1 else MULTI_GPU


@dataclass(frozen=True)
class TraceNode:
    name: str
    gpus: int
    model: str  # the GPU model as the node list names it (slicewise.whatif.gpus maps it to the catalogue)


@dataclass(frozen=True)
class PodTrace:
    pods: tuple[TracePod, ...]
    notes: tuple[str, ...]  # what was left out or borrowed, for the report

    @property
    def end_s(self) -> float:
        return max((p.arrival_s + p.duration_s for p in self.pods), default=0.0)


def _read(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read as CSV: {exc}") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TraceError(f"{path}: missing columns {', '.join(missing)} (has {', '.join(frame.columns)})")
    return frame


def default_times_file(pods_path: Path) -> Path | None:
    """The timed ``*_default.csv`` pod list beside ``pods_path`` (the openb variants share pod names)."""
    stem = pods_path.name.rsplit("_", 1)[0]
    candidate = pods_path.with_name(f"{stem}_default.csv")
    return candidate if candidate.exists() and candidate != pods_path else None


def load_pods(path: Path, times_from: Path | None = None) -> PodTrace:
    frame = _read(path, ("name", "num_gpu", "gpu_milli"))
    notes: list[str] = []
    if not all(c in frame.columns for c in TIME_COLUMNS):
        source = times_from or default_times_file(path)
        if source is None:
            raise TraceError(
                f"{path} has no creation_time/deletion_time columns: give --times-from with a timed pod list "
                "of the same cluster"
            )
        frame = _borrow_times(frame, _read(source, ("name", *TIME_COLUMNS)))
        notes.append(f"no time columns: arrival and lifetime taken from {source.name} (by name, else by row)")
    for column in ("num_gpu", "gpu_milli", *TIME_COLUMNS):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    bad = frame[["num_gpu", "gpu_milli", *TIME_COLUMNS]].isna().any(axis=1)
    bad |= (frame.gpu_milli < 0) | (frame.gpu_milli > 1000) | (frame.num_gpu < 0)
    bad |= frame.deletion_time < frame.creation_time
    if bad.any():
        first = frame[bad].iloc[0]
        raise TraceError(f"{path}: {int(bad.sum())} malformed rows, e.g. {first.to_dict()}")
    gpu_pods = frame[(frame.num_gpu > 0) & (frame.gpu_milli > 0)]
    if len(gpu_pods) < len(frame):
        notes.append(f"{len(frame) - len(gpu_pods)} pods without GPUs left out")
    started = gpu_pods["scheduled_time"] if "scheduled_time" in gpu_pods else gpu_pods["creation_time"]
    started = pd.to_numeric(started, errors="coerce").fillna(gpu_pods["creation_time"])
    durations = (gpu_pods["deletion_time"] - started.clip(lower=gpu_pods["creation_time"])).clip(lower=1.0)
    qos = gpu_pods["qos"].fillna("") if "qos" in gpu_pods else pd.Series("", index=gpu_pods.index)
    specs = gpu_pods["gpu_spec"].fillna("") if "gpu_spec" in gpu_pods else pd.Series("", index=gpu_pods.index)
    pods = tuple(
        TracePod(
            name=str(name),
            arrival_s=float(arrival),
            duration_s=float(duration),
            gpus=int(gpus),
            share=1.0 if gpus > 1 else float(milli) / 1000.0,
            qos=str(q),
            models=gpu_spec_models(str(spec)),
        )
        for name, arrival, duration, gpus, milli, q, spec in zip(
            gpu_pods["name"],
            gpu_pods["creation_time"],
            durations,
            gpu_pods["num_gpu"],
            gpu_pods["gpu_milli"],
            qos,
            specs,
            strict=True,
        )
    )
    constrained = sum(1 for p in pods if p.models)
    if constrained:
        notes.append(f"{constrained} pods name the GPU models they may run on (gpu_spec)")
    if not pods:
        raise TraceError(f"{path}: no pod requests a GPU")
    return PodTrace(tuple(sorted(pods, key=lambda p: (p.arrival_s, p.name))), tuple(notes))


def gpu_spec_models(spec: str) -> tuple[str, ...]:
    """The model names of a ``gpu_spec`` cell (``V100M16|V100M32``), sorted, each once; () for none."""
    return tuple(sorted({part.strip() for part in spec.split("|") if part.strip()}))


def _borrow_times(frame: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in ("creation_time", "deletion_time", "scheduled_time", "qos") if c in timed.columns]
    by_name = timed.set_index("name")[columns]
    by_name = by_name[~by_name.index.duplicated()]
    joined = frame.join(by_name, on="name")
    missing = joined["creation_time"].isna().to_numpy()
    rows = timed[columns].iloc[[i % len(timed) for i in range(len(frame))]].reset_index(drop=True)
    for column in columns:
        joined.loc[missing, column] = rows.loc[missing, column].to_numpy()
    return joined


def load_nodes(path: Path) -> list[TraceNode]:
    frame = _read(path, ("sn", "gpu"))
    frame["gpu"] = pd.to_numeric(frame["gpu"], errors="coerce")
    if frame["gpu"].isna().any() or (frame["gpu"] < 0).any():
        raise TraceError(f"{path}: column gpu must hold GPU counts >= 0")
    models = frame["model"].fillna("") if "model" in frame else pd.Series("", index=frame.index)
    nodes = [
        TraceNode(str(name), int(gpus), str(model))
        for name, gpus, model in zip(frame["sn"], frame["gpu"], models, strict=True)
        if gpus > 0
    ]
    if not nodes:
        raise TraceError(f"{path}: no node has a GPU")
    return sorted(nodes, key=lambda n: n.name)


def hostable(pod: TracePod, nodes: list[TraceNode]) -> bool:
    """Whether some node has enough GPUs for the pod and is of a model its ``gpu_spec`` allows."""
    return any(n.gpus >= pod.gpus and (not pod.models or n.model in pod.models) for n in nodes)


def hostable_on(trace: PodTrace, nodes: list[TraceNode]) -> PodTrace:
    """The pods some node of ``nodes`` could ever host; the others (a ``gpu_spec`` naming only models the fleet
    lacks, more GPUs than its largest node) would wait forever under every policy and say nothing about any,
    so they are left out, and a note says how many."""
    kept = tuple(p for p in trace.pods if hostable(p, nodes))
    if len(kept) == len(trace.pods):
        return trace
    if not kept:
        raise TraceError("no pod of the trace fits a node of this fleet (GPU count or gpu_spec models)")
    note = f"{len(trace.pods) - len(kept)} pods no node of this fleet can host (GPUs or gpu_spec) left out"
    return PodTrace(kept, (*trace.notes, note))


def evenly_picked(index: int, share: float) -> bool:
    """Whether item ``index`` of a list is among an evenly spread ``share`` of it (the running count of picked
    items steps up at it)."""
    return int((index + 1) * share) > int(index * share)


def spread_sample(nodes: list[TraceNode], share: float, offset: int = 0) -> list[TraceNode]:
    """Every ``1 / share``-th node, evenly over the list (so the mix of node sizes is kept); at least one.

    ``offset`` shifts the picks ``offset`` nodes earlier: another sample of the same share, most often of other
    nodes (one per offset below ``sample_offsets(share)``). Which nodes a share holds moves its capacity and
    mix, and a replay's waits with them: one sample is weak evidence (docs/backtest.md)."""
    if not 0 < share <= 1:
        raise TraceError(f"node share must be in (0, 1], got {share}")
    if not 0 <= offset < sample_offsets(share):
        raise TraceError(
            f"node offset must be in [0, {sample_offsets(share) - 1}] for a node share of {share:g}, got {offset}"
        )
    picked = [n for i, n in enumerate(nodes) if evenly_picked(i + offset, share)]
    return picked or nodes[:1]


def sample_offsets(share: float) -> int:
    """How many distinct samples of a node share there are (offsets 0 .. this - 1): its stride, ``1 / share``
    rounded up."""
    return math.ceil(1 / share - 1e-9)


def spread_count(nodes: list[TraceNode], count: int) -> list[TraceNode]:
    """``count`` nodes evenly spread over the list (the ``k``-th pick is where ``k / count`` of it is passed)."""
    if not 1 <= count <= len(nodes):
        raise TraceError(f"cannot pick {count} of {len(nodes)} nodes")
    return [nodes[math.ceil(k * len(nodes) / count) - 1] for k in range(1, count + 1)]
