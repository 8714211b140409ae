"""Great Expectations Data Docs (static HTML) for validation reports, built into a local folder."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slicewise.validation.report import ValidationReport

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuiteValidationResult

SITE = "slicewise"


def write_data_docs(
    reports: ValidationReport | ExpectationSuiteValidationResult | Iterable[Any], folder: Path
) -> Path:
    """Build GX Data Docs for ``reports`` (a report, a GX suite result, or several of either) into ``folder``
    and return ``folder``: it then holds ``index.html``, a page per suite (with each expectation's "why"
    notes) under ``expectations/``, a page per suite run under ``validations/``, and GX's static assets.

    GX renders the pages from its validation-results store, so the results are put into a fresh in-memory
    context whose only Data Docs site is ``folder`` on the local disk; copying the folder elsewhere (object
    storage, the quarantine) is the caller's job.
    """
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    from slicewise.validation.engine import ephemeral_context

    folder = Path(folder)
    context = ephemeral_context()
    context.add_data_docs_site(
        SITE,
        {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(folder)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    items = [reports] if isinstance(reports, ValidationReport) or hasattr(reports, "suite_name") else reports
    results = [
        result
        for item in items
        for result in (item.results if isinstance(item, ValidationReport) else (item,))
    ]
    for result in results:
        _add_suite(context, result)
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=result.suite_name),
            run_id=result.meta["run_id"],
            batch_identifier=_batch_id(result),
        )
        context.validation_results_store.set(key, result)
    context.build_data_docs(site_names=[SITE])
    return folder


def _add_suite(context: Any, result: Any) -> None:
    """Rebuild the suite from the result's expectations so Data Docs also gets a page per suite: that page
    shows each expectation's notes, i.e. why it exists."""
    import great_expectations as gx

    if any(suite.name == result.suite_name for suite in context.suites.all()):
        return
    expectations = [item.expectation_config for item in result.results if item.expectation_config]
    context.suites.add(gx.ExpectationSuite(name=result.suite_name, expectations=expectations))


def _batch_id(result: Any) -> str:
    """The batch id GX gave the validated dataframe (one per suite here), or the suite's name."""
    for item in result.results:
        if item.expectation_config is not None and item.expectation_config.kwargs.get("batch_id"):
            return str(item.expectation_config.kwargs["batch_id"])
    return str(result.suite_name)
