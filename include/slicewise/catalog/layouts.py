"""Per-GPU MIG layouts: canonical form, validity (an exact placement search) and enumeration.

A layout is a multiset of GPU-instance profiles on one GPU. It is valid when every profile exists on the model,
no profile exceeds its maximum count, at most one ``+me`` instance is present, the compute slices add up to at
most the GPU's, and the instances can be placed on the memory-slot axis without overlap, each at one of its
profile's start slots (MIG User Guide, supported-mig-profiles.html). The placement search is the rule; the sum
checks only give clearer messages. (With the placements NVIDIA ships for the five models, every layout that
passes the sums also places, e.g. ``3x 2g + 1g(2 mem)`` as 2g at slots 0, 2, 4 and the 1g at 6; a model whose
placements are tighter would not, and the search catches that.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from slicewise.catalog.models import GpuModel, MigProfile, profile_sort_key

#: Per-GPU MIG instances as (profile, count) pairs sorted by profile name; ``()`` = MIG on, no instances.
Layout = tuple[tuple[str, int], ...]


def layout(mapping: Mapping[str, int] | Iterable[tuple[str, int]]) -> Layout:
    """The canonical layout of profile counts: sorted by profile name, zero counts dropped, repeats summed."""
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    counts: Counter[str] = Counter()
    for profile, count in items:
        counts[str(profile)] += int(count)
    return tuple(sorted((p, c) for p, c in counts.items() if c != 0))


def layout_problems(model: GpuModel, layout_: Layout) -> list[str]:
    """Human-readable reasons why ``layout_`` cannot be applied to one GPU of ``model``; [] when it can."""
    counts = dict(layout(layout_))
    problems = [
        f"{model.name} has no MIG profile {p!r} (known: {', '.join(model.profiles)})"
        for p in counts
        if p not in model.profiles
    ]
    problems += [f"{c} x {p}: a count must be at least 1" for p, c in counts.items() if c < 0]
    problems += [
        f"{c} x {p}: at most {model.profiles[p].max} per GPU"
        for p, c in counts.items()
        if p in model.profiles and c > model.profiles[p].max
    ]
    if problems:
        return problems
    profiles = {p: model.profiles[p] for p in counts}
    media = sum(c for p, c in counts.items() if profiles[p].media)
    if media > 1:
        problems.append(f"{media} media-extension (+me) instances: at most one per GPU")
    compute = sum(profiles[p].g * c for p, c in counts.items())
    if compute > model.compute_slices:
        problems.append(f"{compute} compute slices: a {model.name} has {model.compute_slices}")
    memory = sum(profiles[p].mem_slices * c for p, c in counts.items())
    if memory > model.memory_slices:
        problems.append(f"{memory} memory slices: a {model.name} has {model.memory_slices}")
    elif place(model, counts) is None:
        problems.append(
            f"the instances cannot be placed without overlap on the {model.memory_slices} memory slots "
            "at their profiles' start slots"
        )
    return problems


def is_valid_layout(model: GpuModel, layout_: Layout) -> bool:
    """Whether ``layout_`` can be applied to one GPU of ``model`` (``layout_problems`` is empty)."""
    return not layout_problems(model, layout_)


def place(model: GpuModel, counts: Mapping[str, int]) -> dict[str, tuple[int, ...]] | None:
    """Start slots of every instance (profile -> sorted starts) in one non-overlapping placement, or None.

    Only the memory-slot axis is searched; counts, compute and ``+me`` limits are ``layout_problems``' job.
    """
    # Largest instances first: they have the fewest placements, so dead ends show early.
    instances = sorted(
        (model.profiles[p] for p, c in counts.items() for _ in range(c)),
        key=lambda q: (-q.mem_slices, len(q.placements), q.name),
    )
    starts: list[int] = []
    if not _search(instances, 0, 0, starts):
        return None
    found: dict[str, list[int]] = {}
    for profile, start in zip(instances, starts, strict=True):
        found.setdefault(profile.name, []).append(start)
    return {p: tuple(sorted(s)) for p, s in found.items()}


def _search(instances: list[MigProfile], index: int, used: int, starts: list[int]) -> bool:
    if index == len(instances):
        return True
    profile = instances[index]
    # Instances of one profile are interchangeable: place them at increasing starts to skip permutations.
    lowest = starts[-1] if index and instances[index - 1] is profile else -1
    for start in profile.placements:
        mask = ((1 << profile.mem_slices) - 1) << start
        if start <= lowest or used & mask:
            continue
        starts.append(start)
        if _search(instances, index + 1, used | mask, starts):
            return True
        starts.pop()
    return False


def valid_layouts(model: GpuModel, *, maximal_only: bool = False) -> list[Layout]:
    """Every valid layout of ``model``, ``()`` included, sorted by their canonical tuples.

    With ``maximal_only``, only those to which no instance of any profile can be added.
    """
    names = sorted(model.profiles)
    found: list[Layout] = []
    _extend(model, names, 0, {}, found)
    found.sort()
    if maximal_only:
        found = [lay for lay in found if is_maximal(model, lay)]
    return found


def _extend(
    model: GpuModel, names: list[str], index: int, counts: dict[str, int], found: list[Layout]
) -> None:
    if index == len(names):
        found.append(layout(counts))
        return
    name = names[index]
    _extend(model, names, index + 1, counts, found)
    for count in range(1, model.profiles[name].max + 1):
        counts[name] = count
        # Validity is monotone (a sub-multiset of a valid layout is valid): stop at the first invalid count.
        if layout_problems(model, layout(counts)):
            break
        _extend(model, names, index + 1, counts, found)
    counts.pop(name, None)


def is_maximal(model: GpuModel, layout_: Layout) -> bool:
    """Whether ``layout_`` is valid and no instance of any of the model's profiles can be added to it."""
    if not is_valid_layout(model, layout_):
        return False
    counts = Counter(dict(layout_))
    return not any(is_valid_layout(model, layout(counts + Counter({p: 1}))) for p in model.profiles)


def describe_layout(layout_: Layout | None) -> str:
    """``1x3g.40gb + 2x1g.10gb`` style text, largest instances first; words for MIG off and MIG on, empty."""
    if layout_ is None:
        return "MIG disabled"
    if not layout_:
        return "MIG enabled, no instances"
    ordered = sorted(layout_, key=lambda item: profile_sort_key(item[0]), reverse=True)
    return " + ".join(f"{c}x{p}" for p, c in ordered)
