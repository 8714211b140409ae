"""The pages in a real browser: a real ``airflow api-server`` process loads the plugin, a real user logs in,
and headless Chromium opens the pages with the session cookie the Airflow UI itself uses (``_token``).

Chromium is driven over the DevTools protocol by ``tests.support.browser`` (websocket-client): set the cookie,
navigate, read the DOM, take screenshots. Skipped when Chromium is not installed
(``scripts/install-system-deps.sh`` installs Debian's ``chromium``; CI runs this test).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

from slicewise.settings import load_settings
from slicewise.stack import airflow as airflow_stack
from slicewise.stack import processes
from slicewise.ui.sources import cluster_identity
from tests.plugins import fleet_data
from tests.plugins.conftest import make_home
from tests.support.browser import DevTools, blank_reason, chromium, chromium_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = chromium_binary()
WIDTH, HEIGHT = 1400, 1000


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    screenshots: Path


@pytest.fixture(scope="module")
def server(airflow_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``airflow api-server`` on 127.0.0.1 with the plugin, over a SLICEWISE_HOME holding a report, a plan,
    a ledger and the simulated cluster; logged in as the embedded stack's admin."""
    if CHROMIUM is None:
        pytest.skip(
            "chromium is not installed (scripts/install-system-deps.sh installs it; CI runs this test)"
        )
    folder = tmp_path_factory.mktemp("browser")
    home = make_home(folder / "slicewise")
    fleet_data.write_report(home.store)
    fleet_data.write_plan(home.store)
    fleet_data.write_cluster(home.state, fleet_data.NOW)
    fleet_data.write_ledger(f"sqlite:///{home.ledger}", cluster_identity(load_settings(environ=home.env())))

    port = processes.free_port()
    env = airflow_stack.environment(
        folder / "airflow",
        REPO,
        port,
        connections={},
        extra={
            **home.env(),
            # The session's metadata DB, already migrated; the session's all-admins switch is off here.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        },
    )
    run_dir = folder / "run"
    argv = [airflow_stack.airflow_binary(), "api-server", "--host", processes.LOOPBACK, "--port", str(port)]
    url = f"http://{processes.LOOPBACK}:{port}"
    service = processes.start(
        "api-server", [*argv, "--workers", "1"], port=port, url=url, run_dir=run_dir, env=env
    )
    try:
        processes.wait_http(f"{service.url}/api/v2/monitor/health", service, timeout_s=120)
        password = json.loads((folder / "airflow" / "secrets.json").read_text())["password"]
        login = requests.post(
            f"{service.url}/auth/token",
            json={"username": airflow_stack.ADMIN_USER, "password": password},
            timeout=30,
        )
        assert login.status_code == 201, login.text
        anonymous = requests.get(f"{service.url}/slicewise/", timeout=30, allow_redirects=False)
        assert anonymous.status_code == 401, "the real API server serves the pages without a login"
        yield Server(service.url, login.json()["access_token"], folder / "screenshots")
    finally:
        processes.stop(service, run_dir)


@pytest.fixture()
def browser(server: Server, tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium with the Airflow session cookie set, driven through its DevTools websocket."""
    pytest.importorskip("websocket", reason="websocket-client is needed to drive Chromium")
    assert CHROMIUM is not None
    with chromium(tmp_path, WIDTH, HEIGHT, CHROMIUM) as devtools:
        # The cookie the Airflow UI's login sets: httponly, SameSite=Lax, on the server's root path.
        devtools.set_token(server.url, server.token)
        yield devtools


def _rendered_screenshot(browser: DevTools, path: Path) -> np.ndarray:
    """The viewport, saved to ``path``, checked to be a real page (not blank or uniform: the viewport's size,
    ink on a good share of it, many colours); its pixels."""
    from PIL import Image

    png = browser.screenshot()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    problem = blank_reason(png, WIDTH, HEIGHT)
    assert problem is None, f"{path.name}: {problem}"
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def test_the_pages_render_in_a_real_browser(server: Server, browser: DevTools) -> None:
    # The cost page: its tables, and the full report (with its plots) in a sandboxed frame.
    browser.open(f"{server.url}/slicewise/")
    page = browser.evaluate(
        """({
            title: document.querySelector('h1').textContent,
            tables: document.querySelectorAll('table').length,
            totals: [...document.querySelectorAll('#totals tbody tr')].map(r => r.innerText),
            namespaces: document.querySelectorAll('#namespaces tbody tr').length,
            frame: document.querySelector('iframe.report')?.getBoundingClientRect().height ?? 0,
        })"""
    )
    assert page["title"] == f"GPU cost report: {fleet_data.REPORT_DATE}"
    assert page["tables"] >= 4 and page["namespaces"] == 2
    assert "GPU cost\t456.00 USD" in page["totals"]
    assert page["frame"] > 300
    _rendered_screenshot(browser, server.screenshots / "cost.png")

    # The full report itself: both plots decoded by the browser.
    browser.open(f"{server.url}/slicewise/reports/{fleet_data.REPORT_DATE}/report.html")
    images = browser.evaluate("[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert images == [[True, 400, 200], [True, 400, 200]]
    report = _rendered_screenshot(browser, server.screenshots / "report.png")
    # The plots were painted: the bars' colour (#017cee in fleet_data's charts) covers a visible area.
    bars = (np.abs(report.astype(int) - (0x01, 0x7C, 0xEE)).sum(axis=2) < 30).sum()
    assert bars > 2000, f"{bars} pixels of the plots' bar colour"

    # The fleet and the plan.
    browser.open(f"{server.url}/slicewise/fleet")
    assert browser.evaluate("document.querySelectorAll('#fleet tbody tr').length") == 6
    browser.open(f"{server.url}/slicewise/plan")
    counts = browser.evaluate(
        "['plan', 'rollouts'].map(id => document.querySelectorAll(`#${id} tbody tr`).length)"
    )
    assert counts == [2, 2]


NAV_LINK = json.dumps("a[aria-label='GPU fleet'], a[title='GPU fleet']")
IN_FRAME = "document.querySelector(`iframe[title='GPU fleet']`)?.contentDocument"


def test_the_airflow_ui_nav_opens_the_pages_inside_the_ui(server: Server, browser: DevTools) -> None:
    """The Airflow UI's navigation has a "GPU fleet" entry; clicking it shows the pages inside the UI (an iframe
    at /plugin/gpu-fleet), authenticated by the same session cookie."""
    browser.open(f"{server.url}/")
    href = browser.wait_for(f"document.querySelector({NAV_LINK})?.getAttribute('href')", timeout_s=45)
    assert href.endswith("plugin/gpu-fleet")
    browser.evaluate(f"document.querySelector({NAV_LINK}).click()")
    tables = browser.wait_for(
        f"{IN_FRAME}?.readyState === 'complete' && {IN_FRAME}.querySelectorAll('table').length", timeout_s=45
    )
    assert tables >= 4
    assert browser.evaluate("location.pathname").startswith("/plugin/gpu-fleet")
    title = browser.evaluate(f"{IN_FRAME}.querySelector('h1').textContent")
    assert title == f"GPU cost report: {fleet_data.REPORT_DATE}"
    _rendered_screenshot(browser, server.screenshots / "airflow-ui.png")
