"""One error vocabulary: permanent errors fail a task at once, "not yet" skips it, anything else is retried."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from slicewise.catalog.models import CatalogError
from slicewise.costs import steps as cost_run
from slicewise.costs.pricing import PriceError
from slicewise.costs.window import ReportWindow
from slicewise.errors import NotYet, PermanentError, task_outcome
from slicewise.forecasting.forecasts import NoMetrics
from slicewise.forecasting.steps import NotEnoughHistory
from slicewise.ingest import ValidationFailed
from slicewise.metrics.prometheus import PermanentQueryError, PrometheusError
from slicewise.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (SettingsError, PermanentError),
        (PriceError, PermanentError),
        (CatalogError, PermanentError),
        (ValidationFailed, PermanentError),
        (PermanentQueryError, PermanentError),
        (cost_run.NoValidatedHours, PermanentError),
        (NotEnoughHistory, NotYet),
        (NoMetrics, NotYet),
        (cost_run.NothingToReportYet, NotYet),
    ],
)
def test_each_error_has_its_place_in_the_vocabulary(error: type[Exception], kind: type[Exception]) -> None:
    assert issubclass(error, kind)


def test_a_transient_prometheus_error_is_neither_and_is_retried() -> None:
    assert not issubclass(PrometheusError, (PermanentError, NotYet))


def test_the_task_wrapper_fails_skips_or_lets_retry() -> None:
    @task_outcome()
    def body(error: Exception | None, params: object = None, run_id: str | None = None) -> str:
        if error is not None:
            raise error
        return "done"

    # Airflow reads the signature to pass context: the wrapper keeps the body's.
    assert list(inspect.signature(body).parameters) == ["error", "params", "run_id"]
    assert body.__name__ == "body" and body(None) == "done"
    with pytest.raises(AirflowFailException, match=r"^cost_prices_file: bad$"):
        body(SettingsError("cost_prices_file: bad"))
    with pytest.raises(AirflowSkipException, match=r"^not enough validated history yet: 2 of 6 hours$"):
        body(NotEnoughHistory("2 of 6 hours"))
    with pytest.raises(ConnectionError):  # anything else: Airflow's retries decide
        body(ConnectionError("refused"))


def test_the_cost_report_checks_the_price_file_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  A100_80GB: {price_per_gpu_hour: 3.4, source: typo}\n")
    # A storage root that holds nothing: without the early check the report would say "no hour validated".
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", (tmp_path / "empty").as_uri())
    settings = load_settings({"cost_prices_file": str(prices)})
    start = datetime(2026, 11, 29, tzinfo=UTC)
    day = ReportWindow(start.date(), start, datetime(2026, 11, 30, tzinfo=UTC), False)
    with pytest.raises(PriceError, match=r"models\.A100_80GB names no catalogue GPU model"):
        cost_run.collect(settings, day, "manual", None)
