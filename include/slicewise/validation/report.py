"""The verdict on a partition: pass/fail, one readable line per failed expectation, counts, and the GX results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slicewise.validation.engine import SuiteRun

#: Keys of :attr:`ValidationReport.statistics`, all integers.
STATISTICS = (
    "evaluated_expectations",
    "successful_expectations",
    "unsuccessful_expectations",
    "skipped_expectations",
    "rows",
    "series",
)


@dataclass(frozen=True)
class ValidationReport:
    """What validating one or more frames found.

    ``failures`` has one line per failed expectation (see :mod:`.explain`); ``statistics`` counts
    expectations (evaluated / successful / unsuccessful / skipped because their columns were missing or
    mistyped) and the data (rows, series); ``results`` holds the GX ``ExpectationSuiteValidationResult`` s.
    """

    success: bool
    failures: list[str]
    statistics: dict[str, int]
    subject: str = "partition"
    results: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The verdict, lines and counts plus every GX validation result, as strictly JSON-able values."""
        return {
            "subject": self.subject,
            "success": self.success,
            "failures": list(self.failures),
            "statistics": dict(self.statistics),
            "results": [_json_safe(result.to_json_dict()) for result in self.results],
        }

    def summary(self) -> str:
        """A few lines for a task log or ``report.txt``: the verdict with counts, then each failure."""
        stats = self.statistics
        verdict = "valid" if self.success else "INVALID"
        head = (
            f"{self.subject}: {verdict} - {stats.get('unsuccessful_expectations', 0)} of "
            f"{stats.get('evaluated_expectations', 0)} expectations failed "
            f"({stats.get('rows', 0):,} rows, {stats.get('series', 0):,} series)"
        )
        skipped = stats.get("skipped_expectations", 0)
        if skipped:
            head += f"; {skipped} checks not run because their columns are missing or mistyped"
        return "\n".join([head, *(f"  - {line}" for line in self.failures)])


def from_runs(
    subject: str, runs: Sequence[SuiteRun], *, rows: int, series: int, skipped: int = 0
) -> ValidationReport:
    """One report over the suites run on one frame; ``skipped`` counts checks of suites that could not run."""
    counts = dict.fromkeys(STATISTICS, 0)
    counts["skipped_expectations"] = skipped
    for run in runs:
        for key in ("evaluated_expectations", "successful_expectations", "unsuccessful_expectations"):
            counts[key] += int(run.result.statistics.get(key, 0))
        counts["skipped_expectations"] += run.skipped
    counts["rows"], counts["series"] = rows, series
    return ValidationReport(
        success=all(bool(run.result.success) for run in runs),
        failures=[line for run in runs for line in run.failures],
        statistics=counts,
        subject=subject,
        results=tuple(run.result for run in runs),
    )


def combine(*reports: ValidationReport) -> ValidationReport:
    """One report over several frames (e.g. the GPU and demand frames of an hour): valid only if all are."""
    if not reports:
        raise ValueError("combine() needs at least one report")
    counts = dict.fromkeys(STATISTICS, 0)
    for report in reports:
        for key, value in report.statistics.items():
            counts[key] = counts.get(key, 0) + value
    return ValidationReport(
        success=all(report.success for report in reports),
        failures=[line for report in reports for line in report.failures],
        statistics=counts,
        subject=" + ".join(report.subject for report in reports),
        results=tuple(result for report in reports for result in report.results),
    )


def _json_safe(value: Any) -> Any:
    """NaN and infinities (GX reports them as observed values) become None; unknown objects become text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return str(value)
