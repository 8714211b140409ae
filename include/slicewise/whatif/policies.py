"""The policies a backtest compares, and the fleet each starts from.

============  =======================  ==========================================================================
policy        starts from              each hour
============  =======================  ==========================================================================
static        whole GPUs, no sharing   nothing
static-mig    the mixed fleet          nothing (one fixed layout: NVIDIA's ``all-balanced``, 3g + 2g + 2 x 1g)
static-shared as static                nothing; the autoscaler adds nodes for fractional pods from the node group
                                       shared by MPS, as for ``packing`` (``BacktestConfig.shared_node_group``)
reactive      as static                Slicewise's ``packing`` planner on what is pending *now* and current load
thresholds    as static                Slicewise's ``thresholds`` planner on the forecaster's predictions
packing       as static                Slicewise's ``packing`` planner on the forecaster's predictions
oracle        as static                ``packing`` fed the true next hour (arrivals and load): perfect foresight
ideal         every GPU shared         no planner: any request on any GPU with room, repacked for free: the bound
============  =======================  ==========================================================================

Every planner policy starts from the same fleet as ``static`` and switches MIG on or off itself where demand
calls for it. Nodes whose GPUs have no MIG (T4, V100, ...) are whole GPUs under every policy; the planner may
share them by MPS. ``ideal`` (:mod:`slicewise.whatif.ideal`) is not a planner policy but the bound.
``static-shared`` is ``packing``'s cluster setup without its hourly decisions: what ``packing`` gains beyond it is
what the planner's decisions are worth (on a fleet without the replay's autoscaler it is ``static``).

The mixed fleet of ``static-mig`` (a fixed layout cannot host whole-GPU pods, so some nodes must stay whole):
the share of MIG-capable nodes with MIG disabled is the share of whole-GPU requests (in GPU-equivalents) among
all the pods of the replayed window — hindsight no operator has, which favours ``static-mig`` —; the other
nodes run ``all-balanced``. Both kinds are spread evenly over the node list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from slicewise.planning.config import WHOLE_GPU_DEMAND
from slicewise.whatif.trace import TracePod, evenly_picked

NOW, FORECAST, FUTURE = "now", "forecast", "future"
IDEAL = "ideal"
SHARING = "sharing"
SHARING_FORMS = "sharing-forms"
SHARING_MODES = "sharing-modes"
IDEAL_MODES = "ideal-modes"
#: ``static`` in ``packing``'s cluster setup: what the setup alone is worth, without the planner's decisions.
STATIC_SHARED = "static-shared"
MIG_OFF, BALANCED, NO_SHARING = "all-disabled", "all-balanced", "default"


@dataclass(frozen=True)
class Policy:
    name: str
    mixed_fleet: bool  # False: every GPU whole, MIG disabled
    planner: str | None  # planner policy run every hour; None: the layout never changes
    view: str = FORECAST  # what the planner is fed: now | forecast | future
    consolidation: str | None = None  # planner_consolidation for this policy; None: the backtest's
    standby: bool | None = None  # planner_standby for this policy; None: the backtest's
    whole_gpu_demand: str | None = None  # planner_whole_gpu_demand for this policy; None: the backtest's
    mps_release_below: float | None = None  # planner_mps_release_below for this policy; None: the backtest's
    # Without a planner, the cluster setup of the policies that share GPUs all the same (static-shared).
    shared_setup: bool = False

    @property
    def shares_gpus(self) -> bool:
        """Whether its cluster has the setup for sharing GPUs (the node group shared by MPS): every planner policy,
        and ``static-shared``."""
        return self.planner is not None or self.shared_setup


def per_consolidation(policies: Sequence[Policy], modes: Sequence[str]) -> list[Policy]:
    """With more than one consolidation mode to compare, each policy of the ``packing`` planner (reactive,
    packing, oracle) once per mode, named ``packing/nodes`` and so on (the others once: no other planner
    consolidates); with one, the policies as they are."""
    if len(modes) < 2:
        return list(policies)
    return [
        replace(p, name=f"{p.name}/{mode}", consolidation=mode) if p.planner == "packing" else p
        for p in policies
        for mode in (modes if p.planner == "packing" else modes[:1])
    ]


def standby_flipped_name(standby: bool) -> str:
    """The name of ``packing`` replayed with ``planner_standby`` = ``standby``, the other way round from the
    backtest's setting (no ``/``: it is not one of the consolidation modes)."""
    return f"packing, standby {'on' if standby else 'off'}"


def with_standby_flipped(policies: Sequence[Policy], standby: bool, consolidation: str) -> list[Policy]:
    """``policies`` and, where ``packing`` is among them, ``packing`` once more after its last row with
    ``planner_standby`` the other way round from ``standby`` (the setting), in the ``consolidation`` mode given
    (the setting's): the pair :func:`slicewise.whatif.report.standby_choice` compares."""
    flipped = replace(
        POLICIES["packing"],
        name=standby_flipped_name(not standby),
        consolidation=consolidation,
        standby=not standby,
    )
    return _after_packing(policies, flipped)


def other_whole_gpu_demand(rule: str) -> str:
    """The other ``planner_whole_gpu_demand`` rule: ``median`` <-> ``pending-now``."""
    return "pending-now" if rule == "median" else "median"


def whole_demand_flipped_name(rule: str) -> str:
    """The name of ``packing`` replayed with ``planner_whole_gpu_demand`` = ``rule``, the other one than the
    backtest's setting."""
    return f"packing, whole GPUs for {rule}"


def with_whole_demand_flipped(policies: Sequence[Policy], rule: str, consolidation: str) -> list[Policy]:
    """``policies`` and, where ``packing`` is among them, ``packing`` once more after its last row with the other
    ``planner_whole_gpu_demand`` than ``rule`` (the setting), in the ``consolidation`` mode given (the setting's):
    the pair :func:`slicewise.whatif.report.whole_demand_choice` compares."""
    other = other_whole_gpu_demand(rule)
    flipped = replace(
        POLICIES["packing"],
        name=whole_demand_flipped_name(other),
        consolidation=consolidation,
        whole_gpu_demand=other,
    )
    return _after_packing(policies, flipped)


MPS_RELEASE_PREFIX = "packing, MPS release below "


def mps_release_name(value: float) -> str:
    """The name of ``packing`` replayed with ``planner_mps_release_below`` = ``value``, another than the
    backtest's setting."""
    return f"{MPS_RELEASE_PREFIX}{value:g}"


def with_mps_release_compared(
    policies: Sequence[Policy], values: Sequence[float], setting: float, consolidation: str
) -> list[Policy]:
    """``policies`` and, where ``packing`` is among them, ``packing`` once more per value of ``values`` other
    than ``setting`` (``planner_mps_release_below``), after its last row, in the ``consolidation`` mode given
    (the setting's): the rows :func:`slicewise.whatif.report.mps_release_choice` compares."""
    # One row per name: values the name shows alike (0.1234567, 0.12345671) are one comparison.
    by_name = {
        mps_release_name(v): v for v in sorted(values) if mps_release_name(v) != mps_release_name(setting)
    }
    compared = list(policies)
    for name, value in reversed(by_name.items()):
        other = replace(POLICIES["packing"], name=name, consolidation=consolidation, mps_release_below=value)
        compared = _after_packing(compared, other)
    return compared


def compared_setting(name: str) -> tuple[str, bool | str | float] | None:
    """The planner setting and value the row ``name`` replays ``packing`` with, when it is one of the rows
    :func:`with_standby_flipped`, :func:`with_whole_demand_flipped` or :func:`with_mps_release_compared` add;
    None for any other row."""
    for standby in (True, False):
        if name == standby_flipped_name(standby):
            return "planner_standby", standby
    for rule in WHOLE_GPU_DEMAND:
        if name == whole_demand_flipped_name(rule):
            return "planner_whole_gpu_demand", rule
    if name.startswith(MPS_RELEASE_PREFIX):
        try:
            return "planner_mps_release_below", float(name.removeprefix(MPS_RELEASE_PREFIX))
        except ValueError:
            return None
    return None


def _after_packing(policies: Sequence[Policy], extra: Policy) -> list[Policy]:
    """``policies`` with ``extra`` after the last ``packing`` row (``packing`` or ``packing/<mode>``); as they
    are without one."""
    rows = [i for i, p in enumerate(policies) if p.name == "packing" or p.name.startswith("packing/")]
    if not rows:
        return list(policies)
    return [*policies[: rows[-1] + 1], extra, *policies[rows[-1] + 1 :]]


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("static", False, None),
        Policy("static-mig", True, None),
        Policy(STATIC_SHARED, False, None, shared_setup=True),
        Policy("reactive", False, "packing", NOW),
        Policy("thresholds", False, "thresholds", FORECAST),
        Policy("packing", False, "packing", FORECAST),
        Policy("oracle", False, "packing", FUTURE),
        Policy(IDEAL, False, None),
        Policy(SHARING, False, None),
        Policy(SHARING_FORMS, False, None),
        Policy(SHARING_MODES, False, None),
        Policy(IDEAL_MODES, False, None),
    )
}


def parse_policies(raw: str) -> list[Policy]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ValueError(f"unknown policies {unknown or raw!r}; known: {', '.join(POLICIES)}")
    return [POLICIES[n] for n in dict.fromkeys(names)]


def whole_gpu_share(pods: tuple[TracePod, ...], start_s: float, end_s: float) -> float:
    """Share of the window's requested GPU-seconds that are whole-GPU requests (0.5 with no pods)."""
    inside = [p for p in pods if start_s <= p.arrival_s < end_s]
    total = sum(p.gpus * p.share * p.duration_s for p in inside)
    if total <= 0:
        return 0.5
    return sum(p.gpus * p.share * p.duration_s for p in inside if p.share >= 1.0) / total


def initial_configs(policy: Policy, mig: Sequence[bool], whole_share: float) -> list[tuple[str, str]]:
    """(mig.config, device-plugin config) per node, in node order; ``mig``: whether each node's GPUs have MIG
    (a node without MIG is whole GPUs under every policy)."""
    if not policy.mixed_fleet:
        return [(MIG_OFF, NO_SHARING)] * len(mig)
    return [
        (MIG_OFF if not capable or evenly_picked(i, whole_share) else BALANCED, NO_SHARING)
        for i, capable in enumerate(mig)
    ]
