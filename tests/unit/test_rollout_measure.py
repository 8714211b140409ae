"""The analysis' Prometheus adapter against a scripted HTTP server, and the check definitions it renders."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from slicewise.metrics.prometheus import PrometheusEndpoint
from slicewise.rollout.analysis import POOL, Outcome
from slicewise.rollout.checks import Check, CheckError, dry_run_of, load_checks, promql_duration, render
from slicewise.rollout.measure import MeasureError, PrometheusMeasurer, take_baseline, take_measurement
from slicewise.settings import load_settings

NOW = datetime(2026, 11, 29, 10, tzinfo=UTC)


def vector(*values: str, labels: list[dict[str, str]] | None = None) -> dict[str, Any]:
    result = [
        {"metric": (labels or [{}] * len(values))[i], "value": [NOW.timestamp(), v]}
        for i, v in enumerate(values)
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


SCALAR = {"status": "success", "data": {"resultType": "scalar", "result": [NOW.timestamp(), "42"]}}
MATRIX = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[NOW.timestamp(), "1"]]}]},
}
BAD_DATA = {
    "status": "error",
    "errorType": "bad_data",
    "error": 'invalid parameter "query": 1:5: parse error',
}

#: query -> (HTTP status, JSON body, seconds to wait before answering)
ANSWERS: dict[str, tuple[int, Any, float]] = {
    "one": (200, vector("0.25"), 0),
    "empty": (200, vector(), 0),
    "nan": (200, vector("NaN"), 0),
    "inf": (200, vector("+Inf"), 0),
    "scalar": (200, SCALAR, 0),
    "two": (200, vector("1", "2", labels=[{"gpu": "0"}, {"gpu": "1"}]), 0),
    "matrix": (200, MATRIX, 0),
    "bad": (400, BAD_DATA, 0),
    "busy": (503, {"status": "error", "errorType": "unavailable", "error": "too many queries"}, 0),
    "slow": (200, vector("1"), 1.5),
    "proxy": (502, "<html>Bad Gateway</html>", 0),
    "not-api": (200, {"hello": "world"}, 0),
    "login-page": (200, "<html>Sign in</html>", 0),
}


@dataclass
class Scripted:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def prometheus() -> Iterator[Scripted]:
    """A Prometheus HTTP API on loopback that answers /api/v1/query from :data:`ANSWERS` by query text."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            seen.append({"path": url.path, "params": params, "headers": dict(self.headers)})
            query = params.get("query", "")
            status, body, delay = ANSWERS.get(query, (200, vector("7"), 0.0))
            if url.path != "/api/v1/query":
                status, body, delay = 404, {"status": "error", "error": "not found"}, 0.0
            time.sleep(delay)
            payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: a timeout
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield Scripted(f"http://127.0.0.1:{httpd.server_address[1]}", seen)
    httpd.shutdown()
    httpd.server_close()


def measurer(url: str, timeout_s: float = 5, **endpoint: Any) -> PrometheusMeasurer:
    return PrometheusMeasurer(PrometheusEndpoint(url, **endpoint), timeout_s=timeout_s)


# --- instant(): one number or a MeasureError -------------------------------------------------------------


def test_a_one_element_vector_is_its_value(prometheus: Scripted) -> None:
    assert measurer(prometheus.url).instant("one") == 0.25


def test_an_empty_vector_is_none(prometheus: Scripted) -> None:
    assert measurer(prometheus.url).instant("empty") is None


def test_nan_and_infinity_come_back_as_floats(prometheus: Scripted) -> None:
    assert math.isnan(measurer(prometheus.url).instant("nan") or 0.0)
    assert measurer(prometheus.url).instant("inf") == math.inf


def test_a_scalar_is_its_value(prometheus: Scripted) -> None:
    assert measurer(prometheus.url).instant("scalar") == 42.0


def test_more_than_one_element_is_an_error_because_a_check_must_aggregate(prometheus: Scripted) -> None:
    with pytest.raises(MeasureError, match=r'2 series \(\{gpu="0"\}, \{gpu="1"\}\); a check must aggregate'):
        measurer(prometheus.url).instant("two")


def test_a_range_vector_is_an_error(prometheus: Scripted) -> None:
    with pytest.raises(MeasureError, match="range vector"):
        measurer(prometheus.url).instant("matrix")


def test_a_rejected_query_says_what_prometheus_said(prometheus: Scripted) -> None:
    with pytest.raises(MeasureError, match='answered HTTP 400: invalid parameter "query": 1:5: parse error'):
        measurer(prometheus.url).instant("bad")
    assert len(prometheus.requests) == 1  # no retries: an error is a measurement outcome


def test_a_server_error_is_a_measure_error_without_retries(prometheus: Scripted) -> None:
    with pytest.raises(MeasureError, match="HTTP 503: too many queries"):
        measurer(prometheus.url).instant("busy")
    assert len(prometheus.requests) == 1


def test_answers_that_are_not_prometheus_are_measure_errors(prometheus: Scripted) -> None:
    with pytest.raises(MeasureError, match=r"answered HTTP 502: .*Bad Gateway"):
        measurer(prometheus.url).instant("proxy")
    with pytest.raises(MeasureError, match="unexpected answer from Prometheus"):
        measurer(prometheus.url).instant("not-api")
    with pytest.raises(MeasureError, match="not JSON"):
        measurer(prometheus.url).instant("login-page")


def test_a_slow_answer_times_out_with_a_one_line_reason(prometheus: Scripted) -> None:
    started = time.monotonic()
    with pytest.raises(MeasureError, match="unreachable or too slow") as info:
        measurer(prometheus.url, timeout_s=0.3).instant("slow")
    assert time.monotonic() - started < 1.4
    assert "\n" not in str(info.value)
    assert prometheus.requests[0]["params"]["timeout"] == "0.3"  # Prometheus gets the same limit


def test_an_unreachable_prometheus_is_a_measure_error() -> None:
    from slicewise.stack.processes import free_port

    with pytest.raises(MeasureError, match="unreachable"):
        measurer(f"http://127.0.0.1:{free_port()}", timeout_s=1).instant("one")


def test_the_time_auth_and_headers_reach_prometheus(prometheus: Scripted) -> None:
    m = measurer(prometheus.url, headers={"X-Scope-OrgID": "gpu"}, basic_auth=("user", "secret"))
    m.instant("one", at=NOW)
    request = prometheus.requests[0]
    assert float(request["params"]["time"]) == NOW.timestamp()
    assert request["headers"]["X-Scope-OrgID"] == "gpu"
    assert request["headers"]["Authorization"] == "Basic " + base64.b64encode(b"user:secret").decode()


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        measurer("http://127.0.0.1:1").instant("one", at=datetime(2026, 1, 1))


# --- take_baseline() / take_measurement(): the glue never raises MeasureError -----------------------------


def glue_check(query: str, baseline_query: str | None = None, **kw: Any) -> Check:
    values: dict[str, Any] = {
        "name": "glue",
        "query": query,
        "success": "result >= baseline" if baseline_query else "result > 0",
        "failure": None,
        "baseline_query": baseline_query,
        "on_empty": Outcome.INCONCLUSIVE,
        "on_nan": Outcome.ERROR,
        "count": 1,
        "interval_s": 60,
        "scope": "pool",
        **kw,
    }
    return Check(**values)


def test_a_measurement_is_judged_against_the_baseline(prometheus: Scripted) -> None:
    c = glue_check("scalar", baseline_query="one")
    baseline = take_baseline(measurer(prometheus.url), c, POOL, 300, at=NOW)
    assert baseline == 0.25
    result = take_measurement(measurer(prometheus.url), c, POOL, 300, baseline, now=NOW)
    assert (result.check, result.node, result.outcome, result.value) == (
        "glue",
        POOL,
        Outcome.SUCCESSFUL,
        42.0,
    )


def test_query_errors_become_error_measurements(prometheus: Scripted) -> None:
    result = take_measurement(measurer(prometheus.url), glue_check("busy"), POOL, 300, None, now=NOW)
    assert result.outcome is Outcome.ERROR
    assert "HTTP 503" in result.detail


def test_a_failed_baseline_is_returned_and_makes_measurements_errors(prometheus: Scripted) -> None:
    c = glue_check("one", baseline_query="bad")
    baseline = take_baseline(measurer(prometheus.url), c, POOL, 300, at=NOW)
    assert isinstance(baseline, MeasureError)
    result = take_measurement(measurer(prometheus.url), c, POOL, 300, baseline, now=NOW)
    assert result.outcome is Outcome.ERROR
    assert "no baseline" in result.detail and "HTTP 400" in result.detail


def test_a_check_without_baseline_query_has_no_baseline() -> None:
    assert take_baseline(measurer("http://127.0.0.1:1"), glue_check("one"), POOL, 300, at=NOW) is None


def test_the_node_and_window_are_rendered_into_the_query(prometheus: Scripted) -> None:
    c = glue_check('x{Hostname="{node}"}[{window}]', scope="node")
    take_measurement(measurer(prometheus.url), c, "gpu-node-7", 300, None, now=NOW)
    assert prometheus.requests[0]["params"]["query"] == 'x{Hostname="gpu-node-7"}[5m]'


# --- the default checks -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def defaults() -> dict[str, Check]:
    return {c.name: c for c in load_checks(load_settings(environ={}))}


def test_default_checks_and_their_empty_and_nan_choices(defaults: dict[str, Check]) -> None:
    assert list(defaults) == ["utilisation-drop", "xid-errors", "pending-gpu-pods", "gpu-engine-alive"]
    choices = {name: (c.on_empty, c.on_nan, c.scope, c.dry_run) for name, c in defaults.items()}
    assert choices == {
        "utilisation-drop": (Outcome.INCONCLUSIVE, Outcome.INCONCLUSIVE, "node", False),
        "xid-errors": (Outcome.SUCCESSFUL, Outcome.ERROR, "node", False),
        "pending-gpu-pods": (Outcome.SUCCESSFUL, Outcome.ERROR, "pool", False),
        "gpu-engine-alive": (Outcome.FAILED, Outcome.INCONCLUSIVE, "node", False),
    }
    settings = load_settings(environ={})
    assert all(c.count == settings.analysis_count for c in defaults.values())
    assert all(c.interval_s == settings.analysis_interval_s for c in defaults.values())
    assert defaults["utilisation-drop"].failure == "result < baseline * (1 - 0.1)"
    assert defaults["pending-gpu-pods"].success == "result <= baseline + 2.0"


def test_default_checks_render_to_the_expected_promql(defaults: dict[str, Check]) -> None:
    assert render(defaults["utilisation-drop"], "node-a", 300) == (
        'avg(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname="node-a"}[5m])'
        ' or avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="node-a"}[5m]))'
    )
    assert render(defaults["utilisation-drop"], "node-a", 300, baseline=True) == render(
        defaults["utilisation-drop"], "node-a", 300
    )
    assert render(defaults["gpu-engine-alive"], "node-a", 90) == (
        'avg(max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname="node-a"}[90s])'
        ' or max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{hostname="node-a"}[90s]))'
    )
    assert render(defaults["xid-errors"], "node-a", 600) == (
        'count( count_values by (gpu, UUID) ("xid",'
        ' max_over_time(DCGM_FI_DEV_XID_ERRORS{Hostname="node-a"}[10m]) > 0'
        ' or max_over_time(DCGM_FI_DEV_XID_ERRORS{hostname="node-a"}[10m]) > 0)'
        " unless on (gpu, UUID, xid)"
        ' count_values by (gpu, UUID) ("xid",'
        ' max_over_time(DCGM_FI_DEV_XID_ERRORS{Hostname="node-a"}[1d] offset 10m)'
        ' or max_over_time(DCGM_FI_DEV_XID_ERRORS{hostname="node-a"}[1d] offset 10m)) )'
    )
    pending = (
        'sum(kube_pod_container_resource_requests{resource=~"nvidia_com_(gpu.*|mig_.*)"}'
        " * on (namespace, pod) group_left ()"
        " max by (namespace, pod) (kube_pod_status_unschedulable == 1))"
    )
    assert render(defaults["pending-gpu-pods"], POOL, 300) == pending
    assert render(defaults["pending-gpu-pods"], POOL, 300, baseline=True) == pending + " or vector(0)"


PROMTOOL_TEST = """
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # node-a speaks the old dialect (Hostname), node-b the new one (hostname).
      - {series: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-0",Hostname="node-a"}', values: '0.5x40'}
      - {series: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-1",Hostname="node-a"}', values: '0.3x40'}
      - {series: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-9",hostname="node-b"}', values: '0.8x40'}
      # GPU-0: "no error" until 20m, then XID 79 (a new series: the code is a label).
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0",Hostname="node-a",err_code="0",pod="p1"}',
         values: '0x20'}
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0",Hostname="node-a",err_code="79",pod="p1"}',
         values: '_x21 79x19'}
      # GPU-1: an old XID 13 whose pod label changes at 20m (the drain moved the pod): not a new XID.
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-1",Hostname="node-a",err_code="13",pod="p1"}',
         values: '13x20'}
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-1",Hostname="node-a",err_code="13",pod="p2"}',
         values: '_x21 13x19'}
      - {series: 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-9",hostname="node-b",err_code="48"}',
         values: '_x21 48x19'}
      - {series: 'kube_pod_container_resource_requests{namespace="a",pod="p1",resource="nvidia_com_gpu"}',
         values: '2x40'}
      - {series: 'kube_pod_container_resource_requests{namespace="a",pod="p2",resource="nvidia_com_mig_1g_10gb"}',
         values: '1x40'}
      - {series: 'kube_pod_container_resource_requests{namespace="a",pod="p3",resource="nvidia_com_gpu_shared"}',
         values: '3x40'}
      - {series: 'kube_pod_container_resource_requests{namespace="a",pod="p4",resource="cpu"}', values: '8x40'}
      # p1 is unschedulable, seen by two kube-state-metrics replicas; p3 from 21m on.
      - {series: 'kube_pod_status_unschedulable{namespace="a",pod="p1",uid="u1",instance="ksm-0"}', values: '1x40'}
      - {series: 'kube_pod_status_unschedulable{namespace="a",pod="p1",uid="u1",instance="ksm-1"}', values: '1x40'}
      - {series: 'kube_pod_status_unschedulable{namespace="a",pod="p3",uid="u3"}', values: '_x21 1x19'}
    promql_expr_test:
      - {expr: 'util_a', eval_time: 10m, exp_samples: [{labels: 'util_a', value: 0.4}]}
      - {expr: 'util_b', eval_time: 10m, exp_samples: [{labels: 'util_b', value: 0.8}]}
      - {expr: 'alive_a', eval_time: 10m, exp_samples: [{labels: 'alive_a', value: 0.4}]}
      - {expr: 'alive_c', eval_time: 10m, exp_samples: []}
      - {expr: 'xid_a', eval_time: 15m, exp_samples: []}
      - {expr: 'xid_a', eval_time: 25m, exp_samples: [{labels: 'xid_a', value: 1}]}
      - {expr: 'xid_b', eval_time: 25m, exp_samples: [{labels: 'xid_b', value: 1}]}
      - {expr: 'pending', eval_time: 10m, exp_samples: [{labels: 'pending', value: 2}]}
      - {expr: 'pending', eval_time: 30m, exp_samples: [{labels: 'pending', value: 5}]}
"""


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed"
)
def test_default_queries_mean_what_the_checks_say_in_prometheus(
    defaults: dict[str, Check], tmp_path: Path
) -> None:
    """Prometheus itself (promtool's rule unit tests) evaluates the rendered defaults on known series."""
    rules = {
        "util_a": render(defaults["utilisation-drop"], "node-a", 300),
        "util_b": render(defaults["utilisation-drop"], "node-b", 300),
        "alive_a": render(defaults["gpu-engine-alive"], "node-a", 300),
        "alive_c": render(defaults["gpu-engine-alive"], "node-c", 300),
        "xid_a": render(defaults["xid-errors"], "node-a", 300),
        "xid_b": render(defaults["xid-errors"], "node-b", 300),
        "pending": render(defaults["pending-gpu-pods"], POOL, 300),
    }
    groups = {"groups": [{"name": "checks", "rules": [{"record": k, "expr": v} for k, v in rules.items()]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups))
    (tmp_path / "test.yml").write_text(PROMTOOL_TEST)
    done = subprocess.run(
        ["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- rendering and loading --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"), [(300, "5m"), (90, "90s"), (7200, "2h"), (1.5, "1500ms"), (60.0, "1m")]
)
def test_windows_render_as_exact_promql_durations(seconds: float, text: str) -> None:
    assert promql_duration(seconds) == text


def test_a_window_under_a_millisecond_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 ms"):
        promql_duration(0)


def test_node_names_are_escaped_for_strings_and_regexes() -> None:
    c = glue_check('x{a="{node}",b=~"{hostname_re}"}', scope="node")
    assert render(c, 'we"ird.node', 60) == r'x{a="we\"ird.node",b=~"we\"ird\\.node"}'


def settings_with(**overrides: Any) -> Any:
    return load_settings({k: v for k, v in overrides.items()}, environ={})


def extra(*checks: dict[str, Any]) -> Any:
    return settings_with(analysis_extra_checks=json.dumps(list(checks)))


GOOD = {
    "name": "power",
    "query": 'sum(DCGM_FI_DEV_POWER_USAGE{Hostname="{node}"})',
    "failure": "result > 700",
}
GOOD = {**GOOD, "on_empty": "Inconclusive", "on_nan": "Error"}


def test_extra_checks_are_added_with_the_settings_defaults_or_their_own() -> None:
    checks = {
        c.name: c for c in load_checks(extra(GOOD, {**GOOD, "name": "power-2", "count": 7, "interval_s": 5}))
    }
    assert checks["power"].count == load_settings(environ={}).analysis_count
    assert (checks["power-2"].count, checks["power-2"].interval_s) == (7, 5)
    assert checks["power"].on_empty is Outcome.INCONCLUSIVE


def test_an_extra_check_with_a_default_name_replaces_it() -> None:
    replaced = {**GOOD, "name": "xid-errors", "dry_run": True}
    checks = {c.name: c for c in load_checks(extra(replaced))}
    assert checks["xid-errors"].dry_run
    assert len(checks) == 4


def test_a_shipped_check_as_a_dry_run_replaces_it_and_changes_nothing_else() -> None:
    shipped = {c.name: c for c in load_checks(extra())}
    checks = {c.name: c for c in load_checks(extra(dry_run_of("utilisation-drop")))}

    assert checks["utilisation-drop"] == dataclasses.replace(shipped["utilisation-drop"], dry_run=True)
    assert {n: c for n, c in checks.items() if n != "utilisation-drop"} == {
        n: c for n, c in shipped.items() if n != "utilisation-drop"
    }
    with pytest.raises(
        CheckError, match=r"no shipped check is named 'no-such-check'; shipped: .*utilisation-drop"
    ):
        dry_run_of("no-such-check")


def test_thresholds_come_from_the_settings() -> None:
    checks = {
        c.name: c for c in load_checks(settings_with(analysis_util_drop=0.2, analysis_pending_tolerance=0))
    }
    assert checks["utilisation-drop"].success == "result >= baseline * (1 - 0.2)"
    assert checks["pending-gpu-pods"].failure == "result > baseline + 0.0"


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({**GOOD, "treshold": 1}, r"check 'power': unknown key\(s\) treshold"),
        ({**GOOD, "failure": "result > __import__('os')"}, r"check 'power': condition .* only the functions"),
        ({**GOOD, "failure": "result >"}, "check 'power': condition .* not a valid expression"),
        ({k: v for k, v in GOOD.items() if k != "query"}, "check 'power': missing query"),
        ({**GOOD, "on_empty": "Fine"}, "check 'power': on_empty must be one of Successful, Failed"),
        ({k: v for k, v in GOOD.items() if k != "on_nan"}, "check 'power': missing on_nan"),
        ({**GOOD, "count": 0}, "check 'power': count must be a whole number >= 1"),
        ({**GOOD, "count": "3"}, "check 'power': count must be a whole number"),
        ({**GOOD, "failure_limit": -1}, "check 'power': failure_limit must be a whole number >= 0"),
        ({**GOOD, "interval_s": 0}, "check 'power': interval_s must be > 0 when count > 1"),
        ({**GOOD, "dry_run": "yes"}, "check 'power': dry_run must be true or false"),
        ({**GOOD, "scope": "cluster"}, "check 'power': scope must be one of node, pool"),
        ({**GOOD, "scope": "pool"}, "check 'power': query of a pool-scoped check cannot use"),
        ({**GOOD, "query": "sum(up)"}, "check 'power': query of a node-scoped check must select the node"),
        ({**GOOD, "query": 'x{a="{nod}"}'}, r"check 'power': query has unknown placeholder\(s\) \{nod\}"),
        (
            {**GOOD, "failure": "result > baseline"},
            "check 'power': a condition uses baseline, .* no baseline_query",
        ),
        ({**GOOD, "failure": "result > {tolerance}"}, r"check 'power'.*unknown placeholder \{tolerance\}"),
        ({**GOOD, "name": "bad name!"}, "check 'bad name!': a name is"),
        ("power", "a check must be an object"),
    ],
)
def test_invalid_extra_checks_are_refused_naming_the_check_and_the_problem(bad: Any, problem: str) -> None:
    with pytest.raises(CheckError, match=f"analysis_extra_checks: {problem}"):
        load_checks(extra(bad))


def test_malformed_extra_checks_setting_is_refused() -> None:
    with pytest.raises(CheckError, match="not valid JSON"):
        load_checks(settings_with(analysis_extra_checks="[{"))
    with pytest.raises(CheckError, match="must be a JSON list"):
        load_checks(settings_with(analysis_extra_checks='{"name": "x"}'))
    with pytest.raises(CheckError, match="'power' is defined twice"):
        load_checks(extra(GOOD, GOOD))


def test_out_of_range_thresholds_are_refused() -> None:
    with pytest.raises(CheckError, match="analysis_util_drop must be in"):
        load_checks(settings_with(analysis_util_drop=1.5))
    with pytest.raises(CheckError, match="analysis_pending_tolerance must be >= 0"):
        load_checks(settings_with(analysis_pending_tolerance=-1))


def test_a_custom_checks_file_is_validated_too(tmp_path: Path) -> None:
    path = tmp_path / "analysis.yaml"
    path.write_text(yaml.safe_dump({"checks": [{**GOOD, "on_nan": "Maybe"}]}))
    with pytest.raises(CheckError, match=r"analysis\.yaml: check 'power': on_nan must be one of"):
        load_checks(load_settings(environ={}), path)
    path.write_text("checks: nope")
    with pytest.raises(CheckError, match="expected a mapping with a list under `checks`"):
        load_checks(load_settings(environ={}), path)
