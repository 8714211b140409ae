"""Building the Prometheus endpoint from Airflow Connection fields."""

from __future__ import annotations

import pytest

from slicewise.metrics.prometheus import PrometheusError, endpoint_from_connection


def test_plain_http_connection() -> None:
    endpoint = endpoint_from_connection("http", "127.0.0.1", 9090, None, None, None, {})
    assert endpoint.url == "http://127.0.0.1:9090"
    assert endpoint.basic_auth is None and endpoint.verify is True and not endpoint.headers


def test_host_with_scheme_path_prefix_bearer_token_and_no_tls_verify() -> None:
    endpoint = endpoint_from_connection(
        "http",
        "https://prom.example.com",
        None,
        "/monitoring/",
        None,
        None,
        {"bearer_token": "s3cr3t", "verify": "false", "headers": {"X-Scope-OrgID": "gpu"}},
    )
    assert endpoint.url == "https://prom.example.com/monitoring"
    assert endpoint.headers == {"X-Scope-OrgID": "gpu", "Authorization": "Bearer s3cr3t"}
    assert endpoint.verify is False


def test_basic_auth_and_ca_bundle() -> None:
    endpoint = endpoint_from_connection("https", "prom", 443, None, "reader", "pw", {"verify": "/etc/ca.pem"})
    assert endpoint.url == "https://prom:443"
    assert endpoint.basic_auth == ("reader", "pw")
    assert endpoint.verify == "/etc/ca.pem"


def test_connection_without_host_is_a_clear_error() -> None:
    with pytest.raises(PrometheusError, match="no host"):
        endpoint_from_connection("http", "", None, None, None, None, {})
