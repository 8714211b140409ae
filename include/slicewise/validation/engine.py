"""Run suites of :class:`~slicewise.validation.suite.Check` on pandas frames in an ephemeral GX Data Context."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import great_expectations as gx
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)

from slicewise.validation import explain

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core import ExpectationSuiteValidationResult

    from slicewise.validation.suite import Check

#: Row-level suites keep 20 example rows per failed expectation; per-series suites keep every unexpected series
#: (a few thousand at most), so the failure line can name the worst one.
SAMPLE_RESULT_FORMAT: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
SERIES_RESULT_FORMAT: dict[str, Any] = {"result_format": "COMPLETE"}


@dataclass(frozen=True)
class SuiteRun:
    """The GX result of one suite, its failure lines, and how many checks were left out for unusable columns."""

    result: ExpectationSuiteValidationResult
    failures: list[str]
    skipped: int


def ephemeral_context() -> Any:
    """An in-memory Data Context: nothing on disk, no progress bars in task logs, no usage statistics."""
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


class Runner:
    """One Data Context per validation call; each suite gets its own dataframe asset and batch definition."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name
        self.context = ephemeral_context()
        self.source = self.context.data_sources.add_pandas("slicewise")

    def run(
        self,
        name: str,
        frame: pd.DataFrame,
        checks: Sequence[Check],
        *,
        usable: Iterable[str],
        labels: Callable[[], Sequence[str] | None] | None,
        result_format: dict[str, Any],
    ) -> SuiteRun:
        """Validate ``frame`` against the checks whose columns are all ``usable``.

        ``labels()`` returns a name for each row of ``frame`` (row ``i`` -> ``labels()[i]``) for the examples in
        failure lines; it is called only when something failed, so a valid frame costs no label building.
        """
        usable = set(usable)
        runnable = [check for check in checks if check.needs <= usable]
        batch = self.source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = self.context.suites.add(
            gx.ExpectationSuite(name=name, expectations=[check.expectation for check in runnable])
        )
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        # The run name (the interval) groups a partition's suites in Data Docs; the run time stays "now".
        run_id = RunIdentifier(run_name=self.run_name, run_time=datetime.now(UTC))
        result = definition.run(
            batch_parameters={"dataframe": frame}, result_format=result_format, run_id=run_id
        )
        order = {expectation.id: position for position, expectation in enumerate(suite.expectations)}
        failures: list[str] = []
        if not result.success:
            failures = explain.failure_lines(result, order, labels() if labels else None)
        return SuiteRun(result, failures, len(checks) - len(runnable))


def usable_columns(schema_result: ExpectationSuiteValidationResult, present: Iterable[str]) -> set[str]:
    """Present columns whose dtype expectation passed: content checks on the others would only add noise."""
    typed = {
        item.expectation_config.kwargs["column"]: bool(item.success)
        for item in schema_result.results
        if item.expectation_config is not None
        and item.expectation_config.type == "expect_column_values_to_be_of_type"
    }
    return {column for column in present if typed.get(column, False)}
