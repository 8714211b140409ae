"""The Prometheus adapter: pull one interval of GPU and demand series with ``prometheus-api-client``.

Transient failures (connection refused, timeouts, HTTP 429/5xx) are retried with exponential backoff;
anything else (a bad query, HTTP 4xx) fails at once. Either way the caller gets a :class:`PrometheusError`
with a one-line explanation, and nothing has been written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slicewise import schema
from slicewise.errors import PermanentError
from slicewise.metrics import frames, promql

if TYPE_CHECKING:
    import pandas as pd
    from prometheus_api_client import PrometheusConnect

    from slicewise.settings import Settings

log = logging.getLogger(__name__)

RETRYABLE_STATUS = (408, 429, 500, 502, 503, 504)


class PrometheusError(RuntimeError):
    """Prometheus could not answer a query; the message says which and why, in one line."""


class PermanentQueryError(PermanentError, PrometheusError):
    """Prometheus rejected the query itself (HTTP 4xx): retrying will not help."""


@dataclass(frozen=True)
class PrometheusEndpoint:
    """Where and how to reach the Prometheus HTTP API."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth: tuple[str, str] | None = None
    verify: bool | str = True


def endpoint_from_connection(
    conn_type: str | None,
    host: str | None,
    port: int | None,
    schema_path: str | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any],
) -> PrometheusEndpoint:
    """Build an endpoint from the fields of an Airflow Connection (type ``http``).

    ``host`` may carry its own scheme (``https://prom.example.com``); otherwise ``extra["scheme"]`` or the
    connection type decides. ``schema`` is a URL path prefix (Prometheus behind a proxy). ``extra`` may hold
    ``bearer_token``, ``headers`` and ``verify`` (bool or a CA bundle path).
    """
    if not host:
        raise PrometheusError("the Prometheus connection has no host")
    if "://" in host:
        base = host.rstrip("/")
    else:
        scheme = extra.get("scheme") or ("https" if conn_type == "https" else "http")
        base = f"{scheme}://{host}" + (f":{port}" if port else "")
    if schema_path:
        base = f"{base}/{schema_path.strip('/')}"
    headers = {str(k): str(v) for k, v in dict(extra.get("headers") or {}).items()}
    if extra.get("bearer_token"):
        headers["Authorization"] = f"Bearer {extra['bearer_token']}"
    verify = extra.get("verify", True)
    if isinstance(verify, str) and verify.lower() in ("true", "false"):
        verify = verify.lower() == "true"
    return PrometheusEndpoint(
        url=base, headers=headers, basic_auth=(login, password or "") if login else None, verify=verify
    )


def connect(endpoint: PrometheusEndpoint, timeout_s: float | None = None) -> PrometheusConnect:
    """A ``prometheus-api-client`` connection with the endpoint's URL, auth, TLS and headers, and no HTTP-level
    retries: callers decide what a failure means (retried by the reader, an Error measurement in analysis)."""
    import requests
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    session = requests.Session()
    session.verify = endpoint.verify  # bool, or the path of a CA bundle
    return PrometheusConnect(
        url=endpoint.url,
        headers=dict(endpoint.headers),
        auth=endpoint.basic_auth,
        retry=Retry(total=0),
        timeout=None if timeout_s is None else int(timeout_s),
        session=session,
    )


class PrometheusReader:
    """Reads Slicewise's series for one interval; one instance per task run."""

    def __init__(self, endpoint: PrometheusEndpoint, settings: Settings) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self._client: PrometheusConnect | None = None

    @property
    def client(self) -> PrometheusConnect:
        if self._client is None:
            # Retries are ours (classified, and visible in the task log), so the HTTP adapter does none.
            self._client = connect(self.endpoint, timeout_s=self.settings.query_timeout_s)
        return self._client

    def _call(self, description: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        from prometheus_api_client.exceptions import PrometheusApiClientException
        from requests import RequestException
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        def attempt() -> Any:
            try:
                return function(*args, **kwargs)
            except PrometheusApiClientException as exc:
                status = _status_of(exc)
                if status is not None and status not in RETRYABLE_STATUS:
                    raise PermanentQueryError(f"Prometheus rejected {description}: {exc}") from exc
                raise PrometheusError(f"Prometheus failed {description}: {exc}") from exc
            except RequestException as exc:
                raise PrometheusError(
                    f"Prometheus at {self.endpoint.url} unreachable or too slow for {description}: "
                    f"{type(exc).__name__}: {_short(exc)}"
                ) from exc

        def before_sleep(state: Any) -> None:
            log.warning(
                "retrying %s (attempt %d failed: %s)",
                description,
                state.attempt_number,
                state.outcome.exception(),
            )

        retrying = Retrying(
            retry=retry_if_exception(_is_transient),
            stop=stop_after_attempt(self.settings.query_retries + 1),
            wait=wait_exponential(multiplier=self.settings.query_backoff_s, max=60),
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(attempt)

    def series_per_host(self, start: datetime, end: datetime) -> dict[str, int]:
        window_s = int((end - start).total_seconds())
        result = self._call(
            "the GPU host inventory",
            self.client.custom_query,
            promql.host_inventory_query(window_s),
            params={"time": end.timestamp()},
        )
        counts: dict[str, int] = {}
        for item in result:
            host = frames.gpu_labels(item.get("metric", {}))["hostname"]
            counts[host] = counts.get(host, 0) + int(float(item["value"][1]))
        return counts

    def _range(self, description: str, query: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
        step_s = self.settings.step_s
        series: list[dict[str, Any]] = []
        for chunk in promql.time_chunks(start, end, step_s, self.settings.max_points_per_query):
            series.extend(
                self._call(
                    f"{description} {chunk.start:%Y-%m-%dT%H:%M}..{chunk.end:%H:%M}",
                    self.client.custom_query_range,
                    query,
                    start_time=chunk.start,
                    end_time=chunk.end,
                    step=f"{step_s}s",
                )
            )
        return series

    def gpu_samples(self, start: datetime, end: datetime) -> pd.DataFrame:
        """Every DCGM field in :data:`schema.GPU_FIELDS` for every GPU and MIG instance in ``[start, end)``."""
        hosts = self.series_per_host(start, end - timedelta(seconds=self.settings.step_s))
        shards = promql.shard_hosts(hosts, self.settings.series_per_shard)
        log.info(
            "pulling %d hosts (%d GPU series) in %d shard(s)", len(hosts), sum(hosts.values()), len(shards)
        )
        # Compact each response as it arrives: at 10,000 GPUs the decoded JSON of all of them would not fit.
        results: dict[str, list[frames.CompactSeries]] = {column: [] for column in schema.GPU_FIELDS}
        for number, shard in enumerate(shards, start=1):
            for column, (metric, _) in schema.GPU_FIELDS.items():
                query = promql.gpu_field_query(metric, shard, self.settings.step_s)
                response = self._range(f"{metric} shard {number}/{len(shards)}", query, start, end)
                results[column].extend(frames.compact(response, frames.gpu_label_tuple))
        return frames.gpu_frame(results, step_s=self.settings.step_s)

    def demand(self, start: datetime, end: datetime) -> pd.DataFrame:
        """GPU requests of every pod container and which pods are unschedulable, in ``[start, end)``."""
        step_s = self.settings.step_s
        requests = frames.compact(
            self._range("GPU requests", promql.demand_requests_query(step_s), start, end),
            frames.demand_label_tuple,
        )
        pending = frames.compact(
            self._range("unschedulable pods", promql.demand_unschedulable_query(step_s), start, end),
            frames.pod_label_tuple,
        )
        shares = frames.compact(
            self._range("declared GPU shares", promql.demand_share_query(step_s), start, end),
            frames.pod_form_shape(schema.SHARE_ANNOTATION_LABEL),
        )
        selectors = self._range("GPU node selectors", promql.demand_selector_query(step_s), start, end)
        by_form = {
            form: frames.compact(selectors, frames.pod_form_shape(label))
            for form, label in schema.SELECTOR_LABELS.items()
        }
        opted_in = frames.compact(
            self._range("pods opted in to evictions", promql.demand_opt_in_query(step_s), start, end),
            frames.pod_form_shape(schema.EVICTABLE_ANNOTATION_LABEL),
        )
        return frames.demand_frame(requests, pending, shares, by_form, opted_in)


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, PrometheusError) and not isinstance(exc, PermanentQueryError)


def _status_of(exc: Exception) -> int | None:
    text = str(exc)
    marker = "HTTP Status Code "
    if marker in text:
        digits = text.split(marker, 1)[1][:3]
        if digits.isdigit():
            return int(digits)
    return None


def _short(exc: Exception, limit: int = 200) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
