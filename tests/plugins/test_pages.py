"""The "GPU fleet" pages through the real Airflow API server app: Airflow's login is enforced on every route,
and the pages render the report, fleet, plan and rollouts, or say clearly why they cannot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slicewise.ui.app import URL_PREFIX
from tests.plugins import fleet_data
from tests.plugins.conftest import Api, Home

PAGES = ["/slicewise/", "/slicewise/fleet", "/slicewise/plan", "/slicewise/rollouts/1", "/slicewise/whatif"]
FILES = [
    f"/slicewise/reports/{fleet_data.REPORT_DATE}",
    f"/slicewise/reports/{fleet_data.REPORT_DATE}/report.html",
    f"/slicewise/reports/{fleet_data.REPORT_DATE}/summary.json",
    "/slicewise/plan.html",
    f"/slicewise/whatif/{fleet_data.REVIEW_FOLDER}/report.html",
]
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def _cells(html: str, table_id: str) -> list[list[str]]:
    """The text of each body row of the table with ``table_id``."""
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert match, f"no table {table_id}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1).split("<tbody>")[1], re.S)
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows
    ]


def _row(html: str, table_id: str, first: str) -> list[str]:
    return next(r for r in _cells(html, table_id) if r[0] == first)


# -- authentication ---------------------------------------------------------------------------------------------


def test_the_plugin_mounts_the_app_and_adds_a_nav_entry(api: Api) -> None:
    answer = api.get("/api/v2/plugins", user="admin")
    assert answer.status_code == 200, answer.text
    plugin = next(p for p in answer.json()["plugins"] if p["name"] == "slicewise")
    assert plugin["fastapi_apps"][0]["url_prefix"] == URL_PREFIX == "/slicewise"
    view = plugin["external_views"][0]
    assert (view["name"], view["href"], view["url_route"], view["destination"]) == (
        "GPU fleet",
        "slicewise/",
        "gpu-fleet",
        "nav",
    )


def test_an_anonymous_request_is_refused(api: Api, full_home: Home) -> None:
    for path in PAGES + FILES:
        answer = api.get(path, user=None)
        assert answer.status_code == 401, path
        assert answer.json() == {"detail": "Not authenticated"}


def test_an_anonymous_browser_is_sent_to_the_airflow_login(api: Api, full_home: Home) -> None:
    for path in PAGES + FILES:
        answer = api.get(path, user=None, headers=BROWSER)
        assert answer.status_code == 303, path
        login, _, query = answer.headers["location"].partition("?")
        assert login == "/auth/login"
        assert query.startswith("next=http%3A%2F%2Ftestserver%2Fslicewise%2F")
        assert not answer.content


def test_a_forged_token_is_refused(api: Api, full_home: Home) -> None:
    header, payload, _ = api.tokens["admin"].split(".")
    forged = {"Authorization": f"Bearer {header}.{payload}.forged"}
    answer = api.get("/slicewise/", user=None, headers=forged)
    assert answer.status_code == 403 and answer.json() == {"detail": "Invalid JWT token"}
    in_browser = api.get("/slicewise/", user=None, headers={**forged, **BROWSER})
    assert in_browser.status_code == 303 and in_browser.headers["location"].startswith("/auth/login?next=")


def test_a_user_whose_role_may_not_use_the_ui_is_refused(
    api: Api, full_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authorisation, not only authentication: the auth manager is asked about the Website view."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    asked = []

    def refuse(self: object, *, access_view: object, user: object) -> bool:
        asked.append(str(access_view))
        return False

    monkeypatch.setattr(SimpleAuthManager, "is_authorized_view", refuse)
    answer = api.get("/slicewise/fleet")
    assert answer.status_code == 403 and answer.json() == {"detail": "Forbidden"}
    page = api.get("/slicewise/fleet", headers=BROWSER)
    assert page.status_code == 403
    assert "your role may not view the Airflow UI" in page.text and "sim-h100-0" not in page.text
    assert asked == ["AccessView.WEBSITE"] * 2


def test_the_ui_session_cookie_is_accepted(api: Api, full_home: Home) -> None:
    """The Airflow UI authenticates with the httponly ``_token`` cookie; an iframe sends it along."""
    api.client.cookies.set("_token", api.tokens["viewer"])
    try:
        answer = api.get("/slicewise/fleet", user=None)
    finally:
        api.client.cookies.clear()
    assert answer.status_code == 200
    assert "sim-h100-0" in answer.text


def test_a_viewer_may_read_every_page(api: Api, full_home: Home) -> None:
    for path in PAGES + FILES:
        answer = api.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
    page = api.get("/slicewise/").text
    assert '<base href="/slicewise/">' in page
    assert '<span class="user">viewer</span>' in page


# -- the cost report --------------------------------------------------------------------------------------------


def test_the_cost_page_shows_the_latest_report_as_tables(api: Api, full_home: Home) -> None:
    page = api.get("/slicewise/").text
    assert f"GPU cost report: {fleet_data.REPORT_DATE}" in page
    assert _cells(page, "totals") == [
        ["GPU-hours", "576.00"],
        ["used GPU-hours", "301.25"],
        ["idle GPU-hours", "274.75"],
        ["unmeasured GPU-hours (no activity metric)", "0.00"],
        ["GPU-hours no workload held (__idle__)", "96.00"],
        ["allocated GPU-hours", "480.00"],
        ["allocated but idle GPU-hours", "178.75"],
        ["capacity (GPUs x hours)", "576.00"],
        ["GPU efficiency", "62.8%"],
        ["GPU cost", "456.00 USD"],
        ["idle cost", "261.01 USD"],
        ["allocated idle cost", "169.81 USD"],
        ["cost of capacity no workload held (__idle__)", "91.20 USD"],
    ]
    assert _cells(page, "namespaces") == [
        ["team-vision", "288.00", "273.60 USD", "61.56 USD", "77.5%"],
        ["team-nlp", "192.00", "182.40 USD", "108.25 USD", "40.6%"],
    ]
    assert "2026-11-28T00:00:00+00:00 to 2026-11-29T00:00:00+00:00" in page
    assert "23 of 24 validated; missing: 2026-11-28T13:00:00+00:00" in page
    for heading in ("By team", "Idle time by namespace, with its evidence", "Forecast accuracy", "Prices"):
        assert f"<h2>{heading}</h2>" in page
    assert "Savings attributed to the control loop (estimate)" in page and "11.88 USD" in page
    assert "DRAM active 0.81 while engine active 0.12" in page
    assert "default 0.95 USD per GPU-hour" in page
    assert f'<iframe class="report" src="reports/{fleet_data.REPORT_DATE}/report.html"' in page
    assert f'<a href="reports/{fleet_data.OLDER_REPORT_DATE}">{fleet_data.OLDER_REPORT_DATE}</a>' in page


def test_an_older_report_is_shown_by_date_and_a_missing_one_is_404(api: Api, full_home: Home) -> None:
    older = api.get(f"/slicewise/reports/{fleet_data.OLDER_REPORT_DATE}")
    assert older.status_code == 200
    assert f"GPU cost report: {fleet_data.OLDER_REPORT_DATE}" in older.text
    missing = api.get("/slicewise/reports/2020-01-01")
    assert missing.status_code == 404
    assert "The report of 2020-01-01 has no summary.json" in missing.text


def test_the_report_files_are_served_and_the_html_is_sandboxed(api: Api, full_home: Home) -> None:
    base = f"/slicewise/reports/{fleet_data.REPORT_DATE}"
    html = api.get(f"{base}/report.html")
    assert html.headers["content-type"].startswith("text/html")
    # Its scripts run with an opaque origin: they cannot use the Airflow session.
    assert html.headers["content-security-policy"].startswith("sandbox allow-scripts")
    assert html.text.count("<img") == 2 and "data:image/png;base64," in html.text
    assert json.loads(api.get(f"{base}/summary.json").text)["totals"]["gpuCost"] == 456.0
    assert api.get(f"{base}/allocation.csv").text.startswith("window,namespace")


@pytest.mark.parametrize(
    "path",
    [
        "/slicewise/reports/2026-11-28/secrets.txt",
        "/slicewise/reports/..%2F..%2Fcluster/summary.json",
        "/slicewise/reports/2026-11-28%2F..%2F..%2Fcluster/state.json",
    ],
)
def test_nothing_but_the_report_files_is_served(api: Api, full_home: Home, path: str) -> None:
    answer = api.get(path, headers=BROWSER)
    assert answer.status_code == 404
    assert "sim-a100" not in answer.text


def test_a_corrupt_summary_is_named_not_a_500(api: Api, full_home: Home) -> None:
    (full_home.store / "reports" / fleet_data.REPORT_DATE / "summary.json").write_text("{not json")
    answer = api.get("/slicewise/")
    assert answer.status_code == 200
    assert "is not valid JSON" in answer.text and "Traceback" not in answer.text


# -- the fleet --------------------------------------------------------------------------------------------------


def test_the_fleet_page_shows_nodes_layouts_last_changes_and_dwell(api: Api, full_home: Home) -> None:
    page = api.get("/slicewise/fleet").text
    assert "6 managed node(s) on the <strong>simulated</strong> backend" in page
    assert _cells(page, "models") == [
        ["NVIDIA-A100-SXM4-40GB", "1", "4"],
        ["NVIDIA-A100-SXM4-80GB", "2", "8"],
        ["NVIDIA-H100-80GB-HBM3", "2", "8"],
        ["NVIDIA-H200", "1", "4"],
    ]
    nodes = _cells(page, "fleet")
    assert [n[0] for n in nodes] == [
        "sim-a100-40-0",
        "sim-a100-80-0",
        "sim-a100-80-1",
        "sim-h100-0",
        "sim-h100-1",
        "sim-h200-0",
    ]
    changed = _row(page, "fleet", fleet_data.CHANGED_NODE)
    assert changed[1:6] == ["4 x NVIDIA-A100-SXM4-80GB", "all-balanced", "success", "default", "open"]
    assert changed[7] == "2026-11-29 07:04 UTC"  # the ledger: the promoted rollout finished the node then
    assert re.fullmatch(r"(39|40) min left \(until .* UTC\)", changed[8]), changed[8]
    untouched = _row(page, "fleet", "sim-h100-1")
    assert untouched[4] == "mps-4"
    assert untouched[6:] == ["-", "-", "free (never changed)", "plans it"]


def test_the_airflow_variable_overrides_the_settings(
    api: Api, full_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_SLICEWISE_SETTINGS", json.dumps({"planner_dwell_hours": 2}))
    page = api.get("/slicewise/fleet").text
    assert "planner dwell: 2 h" in page
    assert re.fullmatch(r"1 h (39|40) min left .*", _row(page, "fleet", fleet_data.CHANGED_NODE)[8])


def test_an_invalid_variable_is_named_and_ignored(
    api: Api, full_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_SLICEWISE_SETTINGS", json.dumps({"no_such_setting": 1}))
    answer = api.get("/slicewise/fleet")
    assert answer.status_code == 200
    assert (
        "Airflow Variable slicewise_settings is invalid (unknown setting(s): no_such_setting" in answer.text
    )
    assert "sim-h100-0" in answer.text


def test_an_unreachable_kubernetes_api_is_reported_on_the_page(
    api: Api, full_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
        "current-context": "gone",
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    connection = {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeconfig)}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("SLICEWISE_CLUSTER_BACKEND", "kubernetes")
    answer = api.get("/slicewise/fleet")
    assert answer.status_code == 200
    assert "The kubernetes cluster backend failed: ClusterError" in answer.text
    assert "cannot reach the Kubernetes API server at http://127.0.0.1:1" in answer.text
    assert "Traceback" not in answer.text


# -- plan and rollouts ------------------------------------------------------------------------------------------


def test_the_plan_page_shows_the_latest_plan_and_the_rollouts(api: Api, full_home: Home) -> None:
    page = api.get("/slicewise/plan").text
    assert fleet_data.PLAN_RUN in page
    assert "policy packing, forecaster champion v7 (trusted), horizon 60 min: 1 change, 1 keep" in page
    change = _row(page, "plan", "sim-h100-0")
    assert change[2:4] == ["mig.config all-disabled -&gt; all-1g.10gb", "change"]
    assert '<tr class="change">' in page
    assert '<a href="plan.html">plan.html</a>' in page
    rollouts = _cells(page, "rollouts")
    assert [r[:3] for r in rollouts] == [
        ["#2", "ROLLED_BACK", "restored the snapshot"],
        ["#1", "PROMOTED", "every wave passed"],
    ]
    assert '<a href="rollouts/2">#2</a>' in page
    ((_, kind, what, _, run),) = _cells(page, "marks")  # told though no rollout followed
    assert (kind, what, run) == ("standby", fleet_data.STANDBY_MARK, "gpu_partition_rollout/run-3")


def test_the_plans_own_page_is_served(api: Api, full_home: Home) -> None:
    answer = api.get("/slicewise/plan.html")
    assert answer.headers["content-security-policy"].startswith("sandbox")
    assert "<h1>GPU partition plan</h1>" in answer.text


def test_the_whatif_page_shows_the_newest_review_and_serves_its_report(api: Api, full_home: Home) -> None:
    page = api.get("/slicewise/whatif").text
    assert "166 (2 missing or quarantined, 0 unreadable)" in page and "812, 6" in page
    assert "packing: least wait with planner_consolidation=whole-gpus (41 s)" in page
    assert "-88.3% against static-shared (350 s: the node group shared by MPS without a planner" in page
    assert "packing with standby on (the setting): 41 s mean wait" in page
    assert "whole GPUs for pending-now: 37 s (-9.8%)" in page
    assert "paid GPU-hours 3,950 with the setting, 3,921 (-0.7%)" in page  # under an autoscaler
    assert _row(page, "whatif", "packing/nodes") == [
        "packing/nodes",
        "77",
        "-92%",
        "3,310",
        "-18%",
        "3,402",
        "350",
        "40",
        "0",
    ]
    assert "removes nodes empty for 600 s; with a node group shared by MPS" in page
    assert _row(page, "whatif", "static")[5:7] == ["-", "-"]  # a summary without paid hours or their split
    assert f'<a href="whatif/{fleet_data.REVIEW_FOLDER}/report.html">report.html</a>' in page
    assert _row(page, "whatif", "static")[2] == "0%"
    html = api.get(f"/slicewise/whatif/{fleet_data.REVIEW_FOLDER}/report.html")
    assert html.headers["content-security-policy"].startswith("sandbox allow-scripts")
    assert "What-if backtest" in html.text


def test_a_newer_review_is_shown_and_a_broken_one_is_named_not_a_500(api: Api, full_home: Home) -> None:
    older = full_home.store / "whatif" / fleet_data.REVIEW_FOLDER
    # A later window (a shorter one starting earlier sorts lower by name, not by its end).
    newer = full_home.store / "whatif" / "2026-11-22T00_2026-11-23T12"
    newer.mkdir(parents=True)
    for name in ("_MANIFEST.json", "report.html"):
        (newer / name).write_text((older / name).read_text())
    (newer / "summary.json").write_text(json.dumps({**fleet_data.REVIEW, "policies": {"static": None}}))
    page = api.get("/slicewise/whatif").text
    assert "2026-11-22T00_2026-11-23T12" in page and _cells(page, "whatif") == []
    (newer / "summary.json").write_text(json.dumps({**fleet_data.REVIEW, "hours": "all of them"}))
    assert "- (- missing or quarantined, 0 unreadable)" in api.get("/slicewise/whatif").text
    (newer / "summary.json").write_text(json.dumps(["not", "a", "summary"]))
    answer = api.get("/slicewise/whatif")
    assert answer.status_code == 200 and "is not a JSON object" in answer.text
    for name in ("..", "..%2F..%2Fcluster", "2026-11-22T00_2026-11-21T00"):
        assert api.get(f"/slicewise/whatif/{name}/report.html", headers=BROWSER).status_code == 404


def test_a_rollout_page_tells_its_story(api: Api, full_home: Home) -> None:
    page = api.get("/slicewise/rollouts/2").text
    assert "ROLLED_BACK (restored the snapshot)" in page
    assert _cells(page, "waves")[0][:3] == ["canary", "PENDING", "sim-h100-0"]
    assert _cells(page, "measurements")[0][2:6] == ["pending-gpu-requests", "cluster", "Failed", "NaN"]
    assert "Rollout #2 on simulated:" in page  # the ledger's own story
    assert "rollout ROLLING_BACK -&gt; ROLLED_BACK: restored the snapshot" in page


def test_an_unknown_rollout_is_404(api: Api, full_home: Home) -> None:
    answer = api.get("/slicewise/rollouts/99")
    assert answer.status_code == 404
    assert "The ledger has no rollout #99" in answer.text
    assert api.get("/slicewise/rollouts/latest", headers=BROWSER).status_code == 404


def test_a_broken_ledger_connection_is_named(
    api: Api, full_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN_LEDGER", json.dumps({"conn_type": "http", "host": "example.org"}))
    monkeypatch.setenv("SLICEWISE_LEDGER_CONN_ID", "broken_ledger")
    page = api.get("/slicewise/plan")
    assert page.status_code == 200
    assert (
        "The rollout ledger failed: LedgerError: ledger connection type &#39;http&#39; is not supported"
        in page.text
    )
    assert _cells(page.text, "plan")  # the plan still shows
    fleet = api.get("/slicewise/fleet").text
    assert "Last changes from the ledger are not shown" in fleet
    assert _row(fleet, "fleet", fleet_data.CHANGED_NODE)[7] == "?"


# -- empty states and broken settings ---------------------------------------------------------------------------


def test_before_anything_ran_every_page_says_what_is_missing(api: Api, empty_home: Home) -> None:
    expected = {
        "/slicewise/": "No cost report yet: gpu_cost_report publishes one each day",
        "/slicewise/fleet": "The simulated cluster has no state file at",
        "/slicewise/plan": "No plan yet: gpu_partition_rollout publishes one",
        "/slicewise/whatif": "No what-if review yet: gpu_whatif_review replays the week",
    }
    for path, text in expected.items():
        answer = api.get(path)
        assert answer.status_code == 200, path
        assert text in answer.text, (path, answer.text)
        assert "<table" not in answer.text
    no_ledger = api.get("/slicewise/plan").text
    assert no_ledger.count("No rollout ledger yet at") == 1  # said once, for the rollouts and the marks
    assert "Unavailable, as the rollouts above." in no_ledger
    assert api.get("/slicewise/rollouts/1").status_code == 404
    assert api.get("/slicewise/plan.html").status_code == 404
    assert api.get(f"/slicewise/whatif/{fleet_data.REVIEW_FOLDER}/report.html").status_code == 404
    # Reading never creates what it did not find.
    assert not empty_home.ledger.exists() and not empty_home.state.exists() and not empty_home.store.exists()


def test_a_fleet_without_a_ledger_shows_the_nodes(api: Api, empty_home: Home) -> None:
    from datetime import UTC, datetime

    fleet_data.write_cluster(empty_home.state, datetime(2026, 1, 1, tzinfo=UTC))
    page = api.get("/slicewise/fleet").text
    assert "Last changes from the ledger are not shown: no rollout ledger yet" in page
    assert _row(page, "fleet", fleet_data.CHANGED_NODE)[6:] == [
        "2026-01-01 00:00 UTC",
        "-",
        "free",
        "plans it",
    ]


def test_a_storage_root_that_cannot_be_opened_is_named(
    api: Api, empty_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLICEWISE_STORAGE_ROOT", "nosuchfs://bucket/slicewise")
    for path in ("/slicewise/", "/slicewise/plan"):
        answer = api.get(path)
        assert answer.status_code == 200, path
        assert "The storage root nosuchfs://bucket/slicewise could not be read" in answer.text
    assert api.get("/slicewise/plan.html").status_code == 503


def test_invalid_settings_give_a_page_not_a_trace(
    api: Api, empty_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLICEWISE_PLANNER_DWELL_HOURS", "soon")
    answer = api.get("/slicewise/fleet", headers=BROWSER)
    assert answer.status_code == 500
    assert "The Slicewise settings of the API server are invalid: setting planner_dwell_hours=" in answer.text
    assert "Traceback" not in answer.text


def test_the_templates_are_found_next_to_the_module() -> None:
    from slicewise.ui import pages

    assert {p.name for p in Path(pages.TEMPLATES).glob("*.html")} >= {"base.html", "cost.html", "fleet.html"}
