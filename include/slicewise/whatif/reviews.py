"""Published what-if reviews under the storage root, ``whatif/<since>_<until>/`` (``gpu_whatif_review`` writes
them): where one goes, which are there, the newest, and what it advises about ``planner_consolidation`` and the
other settings it compared.

The one front door for the review's files: the DAG's step writes through :func:`folder_of`, the GPU fleet pages
and the planner's notes read through :func:`published` and :func:`newest`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

FOLDER = "whatif"
#: A review older than this (by its window's end) advises nothing: the cluster's load may have moved on.
ADVICE_MAX_AGE = timedelta(days=14)


@dataclass(frozen=True)
class Review:
    name: str  # <since>_<until>
    since: datetime
    until: datetime
    summary: dict[str, Any]
    has_html: bool


#: The summary's advice lines, in the order they are shown: what the hourly decisions add beyond the cluster setup
#: (under an autoscaler with the node group shared by MPS), the consolidation mode that waited least, and what the
#: standby, whole-GPU demand and MPS release settings trade (slicewise.whatif.report writes them).
CHOICES = (
    "setup_choice",
    "consolidation_choice",
    "standby_choice",
    "whole_gpu_demand_choice",
    "mps_release_choice",
)


#: ``BacktestConfig.evictable`` in words.
EVICTABLE_WORDS = {
    "all": "Slicewise may evict every pod",
    "best-effort": "Slicewise may evict only the trace's best-effort (qos BE) pods",
    "annotated": "Slicewise may evict only the pods that carried slicewise.io/evictable=true",
}


def evictable_words(model: Mapping[str, Any]) -> str:
    """Which pods a replay let Slicewise evict, from its summary's ``model`` (one written before the setting
    existed replayed every pod as evictable)."""
    rule = str(model.get("evictable", "all"))
    return EVICTABLE_WORDS.get(rule, rule)


def choice_lines(summary: Mapping[str, Any]) -> list[str]:
    """A review's (or a backtest's JSON) advice lines, in order; a summary written before one of them was kept
    lacks it."""
    return [str(line) for key in CHOICES for line in summary.get(key) or ()]


def folder_of(root: Any, since: datetime, until: datetime) -> Any:
    """Where the review of ``[since, until)`` is published (a later review of the same window replaces it)."""
    return root / FOLDER / f"{since:%Y-%m-%dT%H}_{until:%Y-%m-%dT%H}"


def window_of_folder(name: str) -> tuple[datetime, datetime] | None:
    """(since, until) of a review folder's name, or None for a name that is not one."""
    try:
        since, until = (
            datetime.strptime(part, "%Y-%m-%dT%H").replace(tzinfo=UTC) for part in name.split("_")
        )
    except ValueError:
        return None
    return (since, until) if since < until else None


def published(root: Any) -> list[Any]:
    """The published reviews' folders, the latest window end first (then the longest window); a folder whose
    name is not a window, or whose manifest is missing or corrupt, is not a review. Storage errors propagate."""
    from slicewise import store

    folder = root / FOLDER
    found = []
    for path in folder.iterdir() if folder.exists() else []:
        window = window_of_folder(path.name)
        if window is None:
            continue
        try:
            manifest = store.read_manifest(path)
        except ValueError:  # a corrupt manifest: skip that folder, not every review
            continue
        if manifest is not None:
            found.append((window[1], -window[0].timestamp(), path))
    return [path for *_, path in sorted(found, key=lambda item: item[:2], reverse=True)]


def read(path: Any) -> Review:
    """The review in ``path`` (one of :func:`published`); ValueError when its summary is not a JSON object."""
    window = window_of_folder(path.name)
    if window is None:
        raise ValueError(f"{path.name} is not a review folder")
    summary = json.loads((path / "summary.json").read_text())
    if not isinstance(summary, dict):
        raise ValueError(f"the summary of the what-if review {path.name} is not a JSON object")
    return Review(path.name, window[0], window[1], summary, (path / "report.html").exists())


def newest(root: Any) -> Review | None:
    """The review with the latest window end, or None before the first."""
    folders = published(root)
    return read(folders[0]) if folders else None


#: How much better than the setting's row a compared row must be on one figure (and no worse on the other) for
#: the plan to say so: less is noise over a replayed week.
ADVICE_MARGIN = 0.01


def setting_advice(review: Review, current: Mapping[str, object], now: datetime) -> list[str]:
    """Lines for the plan's notes, one per planner setting the review replayed ``packing`` with another value of
    (the standby, whole-GPU demand and MPS release comparisons) where that value did better on this cluster's
    own history on both counts: no longer mean wait, no more GPU-hours (paid ones when the review replayed an
    autoscaler, else node-GPU-hours), no more pods left unserved, and at least :data:`ADVICE_MARGIN` better on
    the wait or the GPU-hours. ``current``: the cluster's settings by name (``planner_standby`` and so on); a
    comparison made against another value than the current one (the setting changed since) advises nothing.
    None of it when the review is older than :data:`ADVICE_MAX_AGE`. A trade (less wait for more GPU-hours)
    is the operator's call: it is on the What-if page, not in the plan."""
    from slicewise.whatif.policies import compared_setting

    if now - review.until > ADVICE_MAX_AGE:
        return []
    model = review.summary.get("model")
    policies = review.summary.get("policies")
    if not isinstance(model, Mapping) or not isinstance(policies, Mapping):
        return []
    replayed = model.get("planner")
    if not isinstance(replayed, Mapping):
        return []
    paid = model.get("scale_down_unneeded_s") is not None
    hours_key, hours_name = (
        ("service_gpu_hours", "paid GPU-hours") if paid else ("node_gpu_hours", "node-GPU-hours")
    )

    def figures_of(row: object) -> tuple[float, float, int] | None:
        """(mean wait, GPU-hours, pods unserved) of a row; None for a summary written before one was kept."""
        if not isinstance(row, Mapping):
            return None
        try:
            return float(row["wait_mean_s"]), float(row[hours_key]), int(row.get("still_waiting") or 0)
        except (KeyError, TypeError, ValueError):
            return None

    ours = figures_of(policies.get("packing") or policies.get(f"packing/{replayed.get('consolidation')}"))
    if ours is None:
        return []
    window = f"{review.since:%Y-%m-%d %H:00} .. {review.until:%Y-%m-%d %H:00} UTC"
    lines = []
    for name, row in policies.items():
        compared = compared_setting(str(name))
        if compared is None:
            continue
        setting, value = compared
        if setting not in current or replayed.get(setting.removeprefix("planner_")) != current[setting]:
            continue  # compared against a value the cluster no longer runs
        theirs = figures_of(row)
        if theirs is None:
            continue
        no_worse = (
            round(theirs[0]) <= round(ours[0]) and round(theirs[1]) <= round(ours[1]) and theirs[2] <= ours[2]
        )
        better = any(t <= (1 - ADVICE_MARGIN) * o for t, o in zip(theirs[:2], ours[:2], strict=True))
        if no_worse and better:
            lines.append(
                f"what-if review of {window}: {setting}={_shown(value)} waited {theirs[0]:,.0f} s and used "
                f"{theirs[1]:,.0f} {hours_name} on this cluster's own history, against {ours[0]:,.0f} s and "
                f"{ours[1]:,.0f} with {_shown(current[setting])}, the setting; see the What-if page before changing it"
            )
    return lines


def _shown(value: object) -> str:
    """A setting's value as settings.yaml writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def consolidation_advice(review: Review, current: str, now: datetime) -> str | None:
    """A line for the plan's notes when the review found another ``planner_consolidation`` waiting less than
    ``current`` on this cluster's own history (among the modes that left the fewest pods unserved); None when
    ``current`` waited least, the review compared fewer than two modes, or it is older than
    :data:`ADVICE_MAX_AGE`."""
    if now - review.until > ADVICE_MAX_AGE:
        return None
    policies = review.summary.get("policies")
    modes: dict[str, Mapping[str, Any]] = {
        name.partition("/")[2]: figures
        for name, figures in (policies.items() if isinstance(policies, Mapping) else ())
        if name.startswith("packing/") and isinstance(figures, Mapping)
    }
    waits = {
        mode: (int(figures.get("still_waiting") or 0), float(figures["wait_mean_s"]))
        for mode, figures in modes.items()
        if isinstance(figures.get("wait_mean_s"), int | float)
    }
    if len(waits) < 2:
        return None
    best = min(waits, key=lambda m: waits[m])
    if (
        current in waits
        and round(waits[current][1]) <= round(waits[best][1])
        and waits[current][0] <= waits[best][0]
    ):
        return None
    window = f"{review.since:%Y-%m-%d %H:00} .. {review.until:%Y-%m-%d %H:00} UTC"
    mine = (
        f"{waits[current][1]:,.0f} s with {current}, the setting"
        if current in waits
        else f"the setting {current} was not replayed"
    )
    return (
        f"what-if review of {window}: planner_consolidation={best} waited least on this cluster's own history "
        f"({waits[best][1]:,.0f} s mean wait; {mine}); see the What-if page before changing it"
    )
