"""Post-wave analysis with Argo Rollouts semantics, as pure functions over plain data (no I/O).

A *measurement* is one query answer judged by a check's conditions; a *metric* is the sequence of
measurements of one (check, node) pair; a wave's *verdict* is the worst metric outcome. The rules follow Argo
Rollouts' code (``utils/evaluate/evaluate.go``, ``analysis/analysis.go``):

- measurement: only a success condition -> Failed unless it holds; only a failure condition -> Successful
  unless it holds; both -> Failed if the failure holds, else Successful if the success holds, else
  Inconclusive; neither -> Successful. A query error or an unevaluable condition -> Error. Unlike Argo, an
  empty answer and NaN never reach the conditions: each check names their outcome explicitly.
- metric: Failed once ``failed > failure_limit``, Inconclusive once ``inconclusive > inconclusive_limit``,
  Error once ``consecutive errors > consecutive_error_limit`` (any other outcome resets the streak), checked
  in that order after every measurement; the first limit exceeded ends the metric (Argo terminates the run).
  Errors do not count towards ``count``; after ``count`` non-error measurements the metric is Successful.
- verdict: worst of the metrics in the order Successful < Inconclusive < Error < Failed; dry-run checks are
  reported but never change it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from slicewise.rollout.conditions import Condition, ConditionError

if TYPE_CHECKING:
    from slicewise.rollout.checks import Check

POOL = "*"  # the node of a pool-scoped check's measurements


class Outcome(StrEnum):
    """Phase of a measurement, a metric or a wave (Argo's AnalysisPhase, completed phases only)."""

    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


#: Best to worst, as Argo's ``utils/analysis/helpers.go`` (Running and Pending are not needed here).
PHASE_ORDER: tuple[Outcome, ...] = (Outcome.SUCCESSFUL, Outcome.INCONCLUSIVE, Outcome.ERROR, Outcome.FAILED)


@dataclass(frozen=True)
class Measurement:
    """One judged query answer: ``value`` is the number Prometheus returned (None when empty or an error)."""

    check: str
    node: str
    outcome: Outcome
    value: float | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-friendly form (NaN stays a float; ``json.dumps`` writes it as ``NaN``)."""
        return {
            "check": self.check,
            "node": self.node,
            "outcome": str(self.outcome),
            "value": self.value,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        value = data.get("value")
        return cls(
            check=str(data["check"]),
            node=str(data["node"]),
            outcome=Outcome(data["outcome"]),
            value=None if value is None else float(value),
            detail=str(data.get("detail", "")),
        )


def measure(
    check: Check, result: float | BaseException | None, baseline: float | None, node: str = POOL
) -> Measurement:
    """Judge one query answer of ``check`` for ``node``.

    ``result`` is None for an empty vector, a float (possibly NaN) otherwise, or the exception the query
    raised. An exception is Error; empty is ``check.on_empty``; NaN is ``check.on_nan``; otherwise the
    conditions decide as in Argo. A condition that cannot be evaluated (it uses ``baseline`` and there is
    none) is Error with the reason.
    """
    if isinstance(result, BaseException):
        return Measurement(check.name, node, Outcome.ERROR, None, f"query failed: {_one_line(result)}")
    if result is None:
        return Measurement(check.name, node, check.on_empty, None, f"empty result -> {check.on_empty}")
    if math.isnan(result):
        return Measurement(check.name, node, check.on_nan, result, f"result is NaN -> {check.on_nan}")
    try:
        outcome, why = _evaluate(check.success_condition, check.failure_condition, result, baseline)
    except ConditionError as exc:
        return Measurement(check.name, node, Outcome.ERROR, result, f"result {_fmt(result)}: {exc}")
    seen = f"result {_fmt(result)}" + ("" if baseline is None else f", baseline {_fmt(baseline)}")
    return Measurement(check.name, node, outcome, result, f"{seen}: {why}")


def _evaluate(
    success: Condition | None, failure: Condition | None, result: float, baseline: float | None
) -> tuple[Outcome, str]:
    """Argo's ``EvaluateResult``: both conditions are evaluated first, so either one's error is an Error."""
    succeeded = success.evaluate(result, baseline) if success else False
    failed = failure.evaluate(result, baseline) if failure else False
    if success is None and failure is None:
        return Outcome.SUCCESSFUL, "no conditions (Argo counts that as Successful)"
    if failure is None:
        assert success is not None
        return (
            (Outcome.SUCCESSFUL, f"success condition `{success.text}` holds")
            if succeeded
            else (Outcome.FAILED, f"success condition `{success.text}` does not hold")
        )
    if failed:
        return Outcome.FAILED, f"failure condition `{failure.text}` holds"
    if success is None:
        return Outcome.SUCCESSFUL, f"failure condition `{failure.text}` does not hold"
    if succeeded:
        return Outcome.SUCCESSFUL, f"success condition `{success.text}` holds"
    return Outcome.INCONCLUSIVE, f"neither `{success.text}` nor `{failure.text}` holds"


@dataclass(frozen=True)
class MetricTally:
    """Counters of one metric as Argo keeps them, and the outcome once it is decided."""

    outcome: Outcome | None  # None: still running
    used: int  # measurements consumed until the outcome was decided (later ones are ignored)
    count: int  # non-error measurements
    failed: int
    inconclusive: int
    errors: int
    consecutive_errors: int
    why: str


def tally(check: Check, outcomes: Sequence[Outcome]) -> MetricTally:
    """Replay ``outcomes`` in order as Argo assesses a metric after each measurement."""
    count = failed = inconclusive = errors = streak = 0
    used = 0
    for used, outcome in enumerate(outcomes, start=1):
        if outcome is Outcome.ERROR:
            errors += 1
            streak += 1
        else:
            count += 1
            streak = 0
            failed += outcome is Outcome.FAILED
            inconclusive += outcome is Outcome.INCONCLUSIVE
        decided = _assess(check, count, failed, inconclusive, streak)
        if decided is not None:
            outcome_, why = decided
            return MetricTally(outcome_, used, count, failed, inconclusive, errors, streak, why)
    why = f"running: {count} of {check.count} measurement(s)" + (f", {errors} error(s)" if errors else "")
    return MetricTally(None, used, count, failed, inconclusive, errors, streak, why)


def _assess(
    check: Check, count: int, failed: int, inconclusive: int, streak: int
) -> tuple[Outcome, str] | None:
    # Same order and strict comparisons as Argo's assessMetricStatus.
    if failed > check.failure_limit:
        return Outcome.FAILED, f"{failed} failed > failure_limit {check.failure_limit}"
    if inconclusive > check.inconclusive_limit:
        limit = check.inconclusive_limit
        return Outcome.INCONCLUSIVE, f"{inconclusive} inconclusive > inconclusive_limit {limit}"
    if streak > check.consecutive_error_limit:
        limit = check.consecutive_error_limit
        return Outcome.ERROR, f"{streak} consecutive errors > consecutive_error_limit {limit}"
    if count >= check.count:
        return Outcome.SUCCESSFUL, f"count {check.count} reached"
    return None


def metric_outcome(check: Check, outcomes: Sequence[Outcome]) -> Outcome | None:
    """Outcome of one (check, node) metric, or None while it is still running.

    Still running means fewer than ``check.count`` non-error measurements and no limit exceeded. Measurements
    after the one that decided the outcome are ignored (Argo would not have taken them).
    """
    return tally(check, outcomes).outcome


def worst(outcomes: Iterable[Outcome]) -> Outcome:
    """The worst outcome in :data:`PHASE_ORDER`; Successful when there is none (nothing objected)."""
    return max(outcomes, key=PHASE_ORDER.index, default=Outcome.SUCCESSFUL)


@dataclass(frozen=True)
class Verdict:
    """A wave's analysis: its outcome, one readable reason per non-successful metric, and each metric."""

    outcome: Outcome
    reasons: tuple[str, ...]
    per_metric: Mapping[tuple[str, str], Outcome]  # (check, node) -> outcome, dry-run checks excluded
    dry_run: Mapping[tuple[str, str], Outcome] = field(default_factory=dict)  # reported, never counted
    dry_run_reasons: tuple[str, ...] = ()


def verdict(
    checks: Sequence[Check], measurements: Sequence[Measurement], nodes: Iterable[str] | None = None
) -> Verdict:
    """The wave's verdict from its measurements (in the order they were taken).

    Measurements are grouped by (check, node). A metric still running at the end counts as Inconclusive
    (it needs a person), and says so. When ``nodes`` is given, every node-scoped check is expected for each
    of them and every pool-scoped check once (node ``*``): a metric without any measurement is Inconclusive,
    never a silent pass. Without ``nodes``, only a check with no measurement at all is reported so.
    Raises ValueError for a measurement of a check not in ``checks``.
    """
    by_name = {c.name: c for c in checks}
    grouped: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        if m.check not in by_name:
            raise ValueError(f"measurement of unknown check {m.check!r} (known: {', '.join(by_name)})")
        grouped.setdefault((m.check, m.node), []).append(m)
    expected = _expected_metrics(checks, nodes, {name for name, _ in grouped})
    for key in expected:
        grouped.setdefault(key, [])

    counted: dict[tuple[str, str], Outcome] = {}
    dry: dict[tuple[str, str], Outcome] = {}
    reasons: list[str] = []
    dry_reasons: list[str] = []
    for key in sorted(grouped):
        check = by_name[key[0]]
        outcome, reason = _metric_verdict(check, key[1], grouped[key])
        (dry if check.dry_run else counted)[key] = outcome
        if reason is not None:
            (dry_reasons if check.dry_run else reasons).append(reason)
    return Verdict(worst(counted.values()), tuple(reasons), counted, dry, tuple(dry_reasons))


def _expected_metrics(
    checks: Sequence[Check], nodes: Iterable[str] | None, measured_checks: set[str]
) -> list[tuple[str, str]]:
    if nodes is None:
        return [(c.name, POOL) for c in checks if c.name not in measured_checks]
    node_list = list(nodes)
    return [(c.name, n) for c in checks for n in (node_list if c.scope == "node" else [POOL])]


def _metric_verdict(check: Check, node: str, measured: Sequence[Measurement]) -> tuple[Outcome, str | None]:
    where = f"{check.name} on {node}" if node != POOL else f"{check.name} (pool)"
    if not measured:
        return Outcome.INCONCLUSIVE, f"{where}: Inconclusive: no measurement was taken"
    t = tally(check, [m.outcome for m in measured])
    if t.outcome is None:
        last = measured[t.used - 1]
        return Outcome.INCONCLUSIVE, (
            f"{where}: Inconclusive: analysis ended before count was reached ({t.why}); last: {last.detail}"
        )
    if t.outcome is Outcome.SUCCESSFUL:
        return t.outcome, None
    # Quote the last measurement of the kind that decided the metric: that is what a person needs to see.
    deciding = next(m for m in reversed(measured[: t.used]) if m.outcome is t.outcome)
    return t.outcome, f"{where}: {t.outcome} ({t.why}); last: {deciding.detail}"


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."
