"""Check definitions: what is measured after each wave, and how an answer is judged.

The defaults live in ``include/config/analysis.yaml``; more come from the setting ``analysis_extra_checks``
(a JSON list of objects with the same keys). Everything is validated when checks are loaded, so a bad check
fails before a rollout starts, with a message naming the check and the problem.

A query is a PromQL template. Placeholders, replaced by :func:`render` (other braces are PromQL's own):

- ``{node}``: the node name, escaped for a PromQL double-quoted string (node-scoped checks only);
- ``{hostname_re}``: the node name as an escaped RE2 regex, for ``=~`` matchers (node-scoped checks only);
- ``{window}``: the measurement window as a PromQL duration (``5m``, ``90s``).

Conditions may use ``{util_drop}`` and ``{pending_tolerance}``, replaced by the settings
``analysis_util_drop`` and ``analysis_pending_tolerance`` when the checks are loaded.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from slicewise.errors import PermanentError
from slicewise.metrics.promql import quote_regex_alternation
from slicewise.rollout.analysis import Outcome
from slicewise.rollout.conditions import Condition, ConditionError, compile_condition

if TYPE_CHECKING:
    from slicewise.settings import Settings

log = logging.getLogger(__name__)

SCOPES = ("node", "pool")
QUERY_PLACEHOLDERS = ("node", "hostname_re", "window")
NODE_PLACEHOLDERS = ("node", "hostname_re")
CONDITION_PLACEHOLDERS = ("util_drop", "pending_tolerance")
_PLACEHOLDER = re.compile(r"\{(\w*)\}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class CheckError(PermanentError, ValueError):
    """A check definition is invalid; the message names the check and the problem."""


@dataclass(frozen=True)
class Check:
    """One analysis check (an Argo Rollouts metric with a Prometheus provider); validated on construction."""

    name: str
    query: str
    success: str | None
    failure: str | None
    baseline_query: str | None  # evaluated once, at the change's start, same placeholders; gives `baseline`
    on_empty: Outcome  # outcome of an empty answer: explicit per check, never a silent pass
    on_nan: Outcome  # outcome of a NaN answer
    count: int
    interval_s: float
    failure_limit: int = 0
    inconclusive_limit: int = 0
    consecutive_error_limit: int = 4
    dry_run: bool = False
    scope: str = "node"  # "node": measured per changed node; "pool": once per wave (node "*")
    success_condition: Condition | None = field(init=False, repr=False, compare=False)
    failure_condition: Condition | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            self._validate()
        except (CheckError, ConditionError) as exc:
            raise CheckError(f"check {self.name!r}: {exc}") from exc

    def _validate(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise CheckError(
                "a name is 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if self.scope not in SCOPES:
            raise CheckError(f"scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        for label, template in (("query", self.query), ("baseline_query", self.baseline_query)):
            if template is not None or label == "query":
                _validate_template(label, template, self.scope)
        for label in ("on_empty", "on_nan"):
            object.__setattr__(self, label, _outcome(label, getattr(self, label)))
        conditions = []
        for label in ("success", "failure"):
            text = getattr(self, label)
            if text is not None and not isinstance(text, str):
                raise CheckError(f"{label} must be a condition text or null")
            condition = compile_condition(text) if text is not None else None
            object.__setattr__(self, f"{label}_condition", condition)
            conditions.append(condition)
        if self.baseline_query is None and any(c is not None and c.uses_baseline for c in conditions):
            raise CheckError("a condition uses baseline, but the check has no baseline_query")
        _require_int("count", self.count, minimum=1)
        for label in ("failure_limit", "inconclusive_limit", "consecutive_error_limit"):
            _require_int(label, getattr(self, label), minimum=0)
        if isinstance(self.interval_s, bool) or not isinstance(self.interval_s, int | float):
            raise CheckError(f"interval_s must be a number of seconds, got {self.interval_s!r}")
        object.__setattr__(self, "interval_s", float(self.interval_s))
        if self.interval_s < 0 or (self.count > 1 and self.interval_s == 0):
            # Argo: "If count > 1, interval must be specified".
            raise CheckError(f"interval_s must be > 0 when count > 1, got {self.interval_s!r}")
        if not isinstance(self.dry_run, bool):
            raise CheckError(f"dry_run must be true or false, got {self.dry_run!r}")


def _validate_template(label: str, template: Any, scope: str) -> None:
    if not isinstance(template, str) or not template.strip():
        raise CheckError(f"{label} must be a non-empty PromQL text")
    used = set(_PLACEHOLDER.findall(template))
    unknown = sorted(used - set(QUERY_PLACEHOLDERS))
    if unknown:
        raise CheckError(
            f"{label} has unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)} "
            f"(allowed: {', '.join('{' + p + '}' for p in QUERY_PLACEHOLDERS)})"
        )
    if scope == "pool" and used & set(NODE_PLACEHOLDERS):
        raise CheckError(f"{label} of a pool-scoped check cannot use {{node}} or {{hostname_re}}")
    if scope == "node" and not used & set(NODE_PLACEHOLDERS):
        # Otherwise every node would get the same answer: almost certainly a mistake.
        raise CheckError(
            f"{label} of a node-scoped check must select the node with {{node}} or {{hostname_re}}"
        )


def _outcome(label: str, value: Any) -> Outcome:
    if isinstance(value, Outcome):
        return value
    if isinstance(value, str):
        for outcome in Outcome:
            if value.strip().lower() == outcome.value.lower():
                return outcome
    raise CheckError(f"{label} must be one of {', '.join(o.value for o in Outcome)}, got {value!r}")


def _require_int(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CheckError(f"{label} must be a whole number >= {minimum}, got {value!r}")


KEYS = tuple(f.name for f in fields(Check) if f.init)
REQUIRED_KEYS = ("name", "query", "on_empty", "on_nan")


def check_from_mapping(
    raw: Any, *, count: int, interval_s: float, thresholds: Mapping[str, float], where: str
) -> Check:
    """A :class:`Check` from one YAML/JSON object; count and interval default to the given values."""
    if not isinstance(raw, Mapping):
        raise CheckError(f"{where}: a check must be an object, got {type(raw).__name__}")
    name = raw.get("name", "?")
    prefix = f"{where}: check {name!r}"
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise CheckError(
            f"{prefix}: unknown key(s) {', '.join(map(str, unknown))} (allowed: {', '.join(KEYS)})"
        )
    missing = [k for k in REQUIRED_KEYS if raw.get(k) is None]
    if missing:
        raise CheckError(f"{prefix}: missing {', '.join(missing)}")
    values: dict[str, Any] = {
        "success": None,
        "failure": None,
        "baseline_query": None,
        "count": count,
        "interval_s": interval_s,
        **raw,
    }
    try:
        for label in ("success", "failure"):
            if isinstance(values[label], str):
                values[label] = _substitute_thresholds(label, values[label], thresholds)
    except CheckError as exc:
        raise CheckError(f"{prefix}: {exc}") from exc
    try:
        return Check(**values)
    except CheckError as exc:  # already names the check
        raise CheckError(f"{where}: {exc}") from exc


def _substitute_thresholds(label: str, text: str, thresholds: Mapping[str, float]) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in thresholds:
            raise CheckError(
                f"{label} has unknown placeholder {{{key}}} "
                f"(allowed: {', '.join('{' + p + '}' for p in CONDITION_PLACEHOLDERS)})"
            )
        return repr(float(thresholds[key]))

    return _PLACEHOLDER.sub(replace, text)


def load_checks(settings: Settings, path: Path | None = None) -> list[Check]:
    """The default checks (``path``, default ``include/config/analysis.yaml``) plus ``analysis_extra_checks``.

    An extra check named like a default replaces it (e.g. to make it ``dry_run``); names are otherwise unique.
    Raises :class:`CheckError` naming the check and the problem.
    """
    from slicewise.settings import CONFIG_DIR

    thresholds = {
        "util_drop": settings.analysis_util_drop,
        "pending_tolerance": settings.analysis_pending_tolerance,
    }
    if not 0 <= thresholds["util_drop"] < 1:
        raise CheckError(f"analysis_util_drop must be in [0, 1), got {thresholds['util_drop']}")
    if thresholds["pending_tolerance"] < 0:
        raise CheckError(f"analysis_pending_tolerance must be >= 0, got {thresholds['pending_tolerance']}")

    def build(raw: Any, where: str) -> Check:
        return check_from_mapping(
            raw,
            count=settings.analysis_count,
            interval_s=settings.analysis_interval_s,
            thresholds=thresholds,
            where=where,
        )

    path = path or CONFIG_DIR / "analysis.yaml"
    checks = _unique([build(raw, path.name) for raw in _shipped(path)], path.name)

    try:
        extra_raw = json.loads(settings.analysis_extra_checks or "[]")
    except json.JSONDecodeError as exc:
        raise CheckError(f"analysis_extra_checks is not valid JSON: {exc}") from exc
    if not isinstance(extra_raw, list):
        raise CheckError("analysis_extra_checks must be a JSON list of check objects")
    extra = _unique(
        [build(raw, "analysis_extra_checks") for raw in extra_raw],
        "analysis_extra_checks",
    )
    merged = {c.name: c for c in checks}
    for check in extra:
        if check.name in merged:
            log.info("analysis check %s replaced by analysis_extra_checks", check.name)
        merged[check.name] = check
    return list(merged.values())


def dry_run_of(name: str) -> dict[str, Any]:
    """The shipped check ``name`` (``include/config/analysis.yaml``) as a dry run: measured and reported, never
    deciding a wave. Given in ``analysis_extra_checks``, it replaces the shipped one."""
    from slicewise.settings import CONFIG_DIR

    shipped = _shipped(CONFIG_DIR / "analysis.yaml")
    named = [c for c in shipped if c["name"] == name]
    if not named:
        raise CheckError(
            f"no shipped check is named {name!r}; shipped: {', '.join(c['name'] for c in shipped)}"
        )
    return {**named[0], "dry_run": True}


def _shipped(path: Path) -> list[Any]:
    """The raw check mappings of a checks file (``checks:`` list); CheckError when it is not one."""
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, Mapping) or not isinstance(document.get("checks"), list):
        raise CheckError(f"{path}: expected a mapping with a list under `checks`")
    return list(document["checks"])


def _unique(checks: list[Check], where: str) -> list[Check]:
    seen: set[str] = set()
    for check in checks:
        if check.name in seen:
            raise CheckError(f"{where}: check {check.name!r} is defined twice")
        seen.add(check.name)
    return checks


def render(check: Check, node: str, window_s: float, *, baseline: bool = False) -> str:
    """The PromQL of ``check`` (or of its baseline query) for ``node`` over a window of ``window_s``.

    For a pool-scoped check ``node`` is ignored. Raises ValueError for a window under 1 ms, or a baseline
    rendering of a check without a baseline query.
    """
    template = check.baseline_query if baseline else check.query
    if template is None:
        raise ValueError(f"check {check.name!r} has no baseline_query")
    values = {
        "node": node.replace("\\", "\\\\").replace('"', '\\"'),
        "hostname_re": quote_regex_alternation([node]),
        "window": promql_duration(window_s),
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def promql_duration(seconds: float) -> str:
    """``seconds`` as the shortest exact PromQL duration: 300 -> ``5m``, 90 -> ``90s``, 1.5 -> ``1500ms``."""
    ms = round(seconds * 1000)
    if ms < 1:
        raise ValueError(f"a window must be at least 1 ms, got {seconds!r} s")
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
