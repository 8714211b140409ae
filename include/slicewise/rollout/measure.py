"""The Prometheus adapter of the analysis: one instant query per measurement, one number per answer.

No retries here, unlike the ingest reader: a failed query is a measurement outcome (Error), and Argo's
``consecutive_error_limit`` decides when errors are too many.
"""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from slicewise.rollout.analysis import Measurement, Outcome, measure
from slicewise.rollout.checks import Check, render

if TYPE_CHECKING:
    from prometheus_api_client import PrometheusConnect

    from slicewise.metrics.prometheus import PrometheusEndpoint


class MeasureError(RuntimeError):
    """A query gave no usable number: Prometheus error, unreachable, timeout, or more than one element."""


class Measurer(Protocol):
    """What the analysis measures with: one instant query, one number (the seam tests fill with a stand-in)."""

    def instant(self, query: str, at: datetime | None = None) -> float | None:
        """The value of ``query`` at ``at``; None for no data; MeasureError when no usable answer came."""
        ...


class PrometheusMeasurer:
    """The one real :class:`Measurer`: instant queries against one Prometheus, built like the ingest reader's
    client (auth, TLS, headers)."""

    def __init__(self, endpoint: PrometheusEndpoint, timeout_s: float = 30) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._client: PrometheusConnect | None = None

    @property
    def client(self) -> PrometheusConnect:
        if self._client is None:
            from slicewise.metrics.prometheus import connect

            # No timeout on the connection: instant() passes its own to each request.
            self._client = connect(self.endpoint)
        return self._client

    def instant(self, query: str, at: datetime | None = None) -> float | None:
        """The value of ``query`` at ``at`` (Prometheus' now when None).

        None for an empty vector; a float (maybe NaN or infinite) for a one-element vector or a scalar.
        Raises :class:`MeasureError` for a Prometheus error, a connection failure, a timeout, or any other
        answer (a vector of more than one element: a check must aggregate).
        """
        from prometheus_api_client.exceptions import PrometheusApiClientException
        from requests import RequestException
        from requests.exceptions import InvalidJSONError

        params: dict[str, Any] = {}
        if at is not None:
            if at.tzinfo is None:
                raise ValueError("`at` must be timezone-aware")
            params["time"] = at.timestamp()
        try:
            # The timeout goes to requests per call (seconds, float) and to Prometheus as its query timeout.
            result = self.client.custom_query(
                query, params={**params, "timeout": f"{self.timeout_s:g}"}, timeout=self.timeout_s
            )
        except PrometheusApiClientException as exc:  # any HTTP status but 200
            raise MeasureError(f"Prometheus answered {_api_error(exc)}") from exc
        except InvalidJSONError as exc:  # a 200 that is not JSON: a proxy's page, not Prometheus
            raise MeasureError(f"Prometheus answered something that is not JSON: {_short(exc)}") from exc
        except RequestException as exc:
            raise MeasureError(
                f"Prometheus at {self.endpoint.url} unreachable or too slow "
                f"({type(exc).__name__}: {_short(exc)})"
            ) from exc
        except (KeyError, TypeError) as exc:  # JSON, but not the API's envelope
            raise MeasureError(f"unexpected answer from Prometheus: {_short(repr(exc))}") from exc
        return _one_number(result)


def _one_number(result: Any) -> float | None:
    try:
        if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
            return float(result[1])  # a scalar: [timestamp, "value"]
        if isinstance(result, list) and all(isinstance(item, dict) for item in result):
            if not result:
                return None
            if len(result) > 1:
                labels = ", ".join(_labels(item.get("metric", {})) for item in result[:3])
                raise MeasureError(
                    f"the query returned {len(result)} series ({labels}{', ...' if len(result) > 3 else ''}); "
                    "a check must aggregate to one number"
                )
            if "value" not in result[0]:
                raise MeasureError("the query returned a range vector; a check must return an instant value")
            return float(result[0]["value"][1])
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise MeasureError(f"unexpected answer from Prometheus: {_short(exc)}") from exc
    raise MeasureError(f"unexpected answer from Prometheus: {str(result)[:200]}")


def take_baseline(
    measurer: Measurer, check: Check, node: str, window_s: float, at: datetime
) -> float | MeasureError | None:
    """The baseline of ``check`` for ``node`` at ``at`` (the change's start), or the error that prevented it.

    None when the check has no baseline query or the answer was empty. The error is returned, not raised, so
    the caller can record it; every measurement judged against it is then an Error that says why. Retaking a
    failed baseline later is safe: it is a query at a fixed past time.
    """
    if check.baseline_query is None:
        return None
    try:
        return measurer.instant(render(check, node, window_s, baseline=True), at=at)
    except MeasureError as exc:
        return exc


def take_measurement(
    measurer: Measurer,
    check: Check,
    node: str,
    window_s: float,
    baseline: float | MeasureError | None,
    now: datetime,
) -> Measurement:
    """Query ``check`` for ``node`` at ``now`` over ``window_s`` and judge the answer (never raises MeasureError)."""
    if isinstance(baseline, MeasureError):
        # Not queried at all: without its baseline the check cannot be judged (Argo: an evaluation error).
        return Measurement(check.name, node, Outcome.ERROR, None, f"no baseline: {_short(baseline)}")
    try:
        value: float | MeasureError | None = measurer.instant(render(check, node, window_s), at=now)
    except MeasureError as exc:
        value = exc
    return measure(check, value, baseline, node)


def _labels(metric: dict[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def _api_error(exc: BaseException) -> str:
    """``HTTP Status Code 400 (b'{"status":"error",...,"error":"parse error ..."}')`` -> ``HTTP 400: parse ...``."""
    text = str(exc)
    found = re.fullmatch(r"HTTP Status Code (\d{3}) \((b'.*'|b\".*\")\)", text, flags=re.DOTALL)
    if not found:  # another client version's wording: keep it whole
        return _short(text)
    status, body = found.groups()
    try:
        raw = ast.literal_eval(body)  # the client quotes the body as a bytes literal
        error = json.loads(raw)["error"]
    except (ValueError, SyntaxError, TypeError, KeyError):  # not Prometheus' JSON (a proxy's page)
        return f"HTTP {status}: {_short(body)}"
    return f"HTTP {status}: {_short(str(error))}"


def _short(exc: BaseException | str, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."
