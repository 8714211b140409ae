"""Retry and error classification of the Prometheus reader, against a scripted HTTP server on loopback."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from slicewise.metrics.prometheus import (
    PermanentQueryError,
    PrometheusEndpoint,
    PrometheusError,
    PrometheusReader,
)
from slicewise.settings import load_settings

START = datetime(2026, 11, 29, 10, tzinfo=UTC)


class Script:
    """Answers queued (status, body) pairs in order, then repeats the last one."""

    def __init__(self, answers: list[tuple[int, Any]], delay_s: float = 0.0) -> None:
        self.answers = answers
        self.delay_s = delay_s
        self.calls = 0


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Script]]:
    script: Script = request.param

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            import time

            status, body = script.answers[min(script.calls, len(script.answers) - 1)]
            script.calls += 1
            time.sleep(script.delay_s)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: a timeout
                self.wfile.write(payload)

        do_GET = _answer
        do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def reader(url: str, **overrides: Any) -> PrometheusReader:
    settings = load_settings(
        {"query_retries": 2, "query_backoff_s": 0.01, "query_timeout_s": 1, **overrides}, environ={}
    )
    return PrometheusReader(PrometheusEndpoint(url), settings)


EMPTY_MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": []}}


@pytest.mark.parametrize(
    "server", [Script([(503, {"error": "busy"}), (503, {}), (200, EMPTY_MATRIX)])], indirect=True
)
def test_transient_errors_are_retried_until_success(server: tuple[str, Script]) -> None:
    url, script = server
    frame = reader(url).demand(START, START + timedelta(hours=1))
    assert frame.empty
    # requests query: 2 failures + success; unschedulable, declared shares, selectors, eviction opt-ins: 1 each
    assert script.calls == 2 + 1 + 1 + 1 + 1 + 1


@pytest.mark.parametrize("server", [Script([(400, {"error": "parse error"})])], indirect=True)
def test_a_rejected_query_fails_at_once(server: tuple[str, Script]) -> None:
    url, script = server
    with pytest.raises(PermanentQueryError, match="rejected GPU requests"):
        reader(url).demand(START, START + timedelta(hours=1))
    assert script.calls == 1


@pytest.mark.parametrize("server", [Script([(200, EMPTY_MATRIX)], delay_s=1.5)], indirect=True)
def test_a_slow_server_times_out_with_a_one_line_reason(server: tuple[str, Script]) -> None:
    url, script = server
    with pytest.raises(PrometheusError, match="unreachable or too slow for GPU requests") as info:
        reader(url, query_retries=1).demand(START, START + timedelta(hours=1))
    assert "\n" not in str(info.value)
    assert script.calls == 2


def test_an_unreachable_server_is_reported_after_the_retries() -> None:
    from slicewise.stack.processes import free_port

    with pytest.raises(PrometheusError, match="unreachable"):
        reader(f"http://127.0.0.1:{free_port()}").gpu_samples(START, START + timedelta(hours=1))


@pytest.mark.parametrize("server", [Script([(200, EMPTY_MATRIX)], delay_s=1.5)], indirect=True)
def test_a_slow_prometheus_makes_the_ingest_pull_fail_having_written_nothing(
    server: tuple[str, Script], tmp_path: Any
) -> None:
    from slicewise import ingest

    url, _ = server
    settings = load_settings(
        {"query_retries": 0, "query_timeout_s": 1, "storage_root": (tmp_path / "store").as_uri()}, environ={}
    )
    with pytest.raises(PrometheusError, match="too slow"):
        ingest.pull(
            PrometheusReader(PrometheusEndpoint(url), settings), START, START + timedelta(hours=1), settings
        )
    assert not (tmp_path / "store").exists()
