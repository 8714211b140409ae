"""One demand model: a pending request, every form that can host it, and the pool the planner hands out.

A request is one pod's ask, counted once whichever form ends up hosting it:

- a **declared share** ``size`` < 1 (the pod's ``slicewise.io/gpu-share`` annotation, or a trace request, which is
  a size and not a resource name): any MIG instance with at least that share of a GPU's compute, any MPS tenant
  of at least that share (1 / replicas), or a whole GPU;
- a **named MIG resource** (``nvidia.com/mig-3g.40gb``): an instance of that profile only;
- a **GPU** (``nvidia.com/gpu: 1`` without a declared share): a whole GPU or an MPS tenant of any share — what
  the device plugin hands it, since its request does not say;
- **whole GPUs** (``gpus`` > 1, or a declared share of 1): that many whole GPUs (MIG disabled, no MPS) on one
  node; the device plugin refuses a multi-GPU request under MPS.

``models`` (catalogue names) narrows where any of them may run (a ``gpu_spec``, or a node selector on
``nvidia.com/gpu.product``); ``selector`` narrows it by node labels: GPU feature discovery's product, sharing
strategy and replicas as a pod's nodeSelector names them (matched with the labels a plan gives the node,
``packing.labels_under``), or the backtest's pin to a node-list model, which one catalogue model cannot tell
apart. :class:`Pool` holds the forecast number of each kind still to host.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from slicewise.catalog import Catalog
from slicewise.catalog.resources import GPU_RESOURCE, MIG_RESOURCE_PREFIX, WHOLE_GPUS
from slicewise.cluster.base import selector_allows

#: Pending demand that only whole GPUs can host (pods asking for more than one ``nvidia.com/gpu``). Not a
#: Kubernetes resource: the name of that kind of request in the demand forecast and in plans.
EPS = 1e-9
#: A node selector as a hashable value: (label, allowed values) pairs, sorted.
Selector = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Request:
    """A kind of pending request (see the module docstring)."""

    resource: str  # GPU_RESOURCE, a MIG resource, or WHOLE_GPUS
    size: float | None = None  # declared share of each GPU; None when the request does not say
    gpus: int = 1
    models: tuple[str, ...] = ()
    selector: Selector = ()

    @property
    def whole(self) -> bool:
        """Needs whole GPUs: more than one, or a declared share of a whole one."""
        return (
            self.resource == WHOLE_GPUS or self.gpus > 1 or (self.size is not None and self.size >= 1 - EPS)
        )

    def fits(self, resource: str, share: float) -> bool:
        """Whether one slot (an extended resource unit of ``share`` of a GPU) can host one GPU of this request."""
        if self.whole:
            return resource == GPU_RESOURCE and share >= 1 - EPS
        if self.size is not None:
            return share >= self.size - EPS
        return resource == self.resource

    def allows(self, model: str, labels: Mapping[str, str] | None = None) -> bool:
        """Whether a node of catalogue ``model`` with ``labels`` may host it (labels None: not checked)."""
        if self.models and model not in self.models:
            return False
        return labels is None or selector_allows(self.selector, labels)

    @property
    def label(self) -> str:
        """How plans name it: the resource, or the declared share, and where it may run."""
        where = f" on {'|'.join(self.models)}" if self.models else ""
        where += "".join(f" where {key} in {'|'.join(values)}" for key, values in self.selector)
        if self.whole and self.resource == WHOLE_GPUS:
            return WHOLE_GPUS + where
        if self.size is None:
            return self.resource + where
        return f"{self.gpus} x {self.size:g} GPU{where}"


def request_for(
    resource: str,
    size: float | None = None,
    gpus: int = 1,
    models: Iterable[str] = (),
    selector: Selector = (),
) -> Request:
    """The request of a pod asking ``resource`` (``gpus`` of it), with its declared share if it has one."""
    models = tuple(sorted(set(models)))
    selector = tuple(sorted(selector))
    if resource == WHOLE_GPUS or gpus > 1 or (size is not None and size >= 1 - EPS):
        return Request(WHOLE_GPUS, 1.0, gpus, models, selector)
    if size is not None:  # a declared share: any form at least that big, whatever resource it asked for
        return Request(GPU_RESOURCE, size, 1, models, selector)
    return Request(resource, None, 1, models, selector)


def share_of(resource: str, catalog: Catalog) -> float | None:
    """The share of a GPU a MIG resource stands for, on the first catalogue model that has the profile."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    for model in catalog.models.values():
        for name, spec in model.profiles.items():
            if name.replace("+", ".") == profile:
                return spec.g / model.compute_slices
    return None


class Pool:
    """The forecast number of pending requests of each kind still to host; the planner hands it out node by
    node, so no request is prepared twice."""

    def __init__(self, counts: Iterable[tuple[Request, float]] = ()):
        self._counts: dict[Request, float] = {}
        for request, count in counts:
            if count > 0:
                self._counts[request] = self._counts.get(request, 0.0) + float(count)

    def __iter__(self) -> Iterator[tuple[Request, float]]:
        """Largest requests first (whole GPUs, then by declared share), so they are placed before small ones."""
        return iter(sorted(self._counts.items(), key=lambda item: _order(item[0])))

    def __bool__(self) -> bool:
        return any(count > EPS for count in self._counts.values())

    def count(self, request: Request) -> float:
        return self._counts.get(request, 0.0)

    def take(self, served: dict[Request, float]) -> None:
        for request, count in served.items():
            left = self._counts.get(request, 0.0) - count
            if left > EPS:
                self._counts[request] = left
            else:
                self._counts.pop(request, None)

    def key(self) -> tuple[tuple[Request, float], ...]:
        """A hashable snapshot (proposals of idle nodes alike are shared while it is the same)."""
        return tuple((r, round(c, 9)) for r, c in self)

    def selected_labels(self) -> list[str]:
        """The node labels some request's selector names (what tells otherwise alike nodes apart)."""
        return sorted({key for request in self._counts for key, _ in request.selector})

    def describe(self) -> str:
        return ", ".join(f"{r.label} {c:.1f}" for r, c in self if c > EPS) or "none"


def _order(request: Request) -> tuple[int, float, str, tuple[str, ...], Selector]:
    size = 1.0 if request.whole else (request.size if request.size is not None else 0.0)
    return (-request.gpus, -size, request.resource, request.models, request.selector)
