"""The pages in a real browser: a real ``airflow api-server`` process loads the plugin, a real user logs in,
and headless Chromium opens the pages with the session cookie the Airflow UI itself uses (``_token``).

Chromium is driven over the DevTools protocol (websocket-client, already in the pinned stack): set the cookie,
navigate, read the DOM, take screenshots. Skipped when Chromium is not installed
(``scripts/install-system-deps.sh`` installs Debian's ``chromium``; CI runs this test).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from slicewise.settings import load_settings
from slicewise.stack import airflow as airflow_stack
from slicewise.stack import processes
from slicewise.ui.sources import cluster_identity
from tests.plugins import fleet_data
from tests.plugins.conftest import make_home

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1400, 1000


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    screenshots: Path


@pytest.fixture(scope="module")
def server(migrated_airflow_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
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


class DevTools:
    """A minimal Chrome DevTools Protocol client on one page target: call a method, get its result."""

    def __init__(self, websocket_url: str) -> None:
        import websocket

        self._ws = websocket.create_connection(websocket_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self._ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:  # events arrive in between; only the answer to this call matters here
            answer = json.loads(self._ws.recv())
            if answer.get("id") == message_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression} stayed false for {timeout_s:g} s")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def screenshot(self, path: Path) -> np.ndarray:
        from PIL import Image

        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    def close(self) -> None:
        self._ws.close()


@pytest.fixture()
def browser(server: Server, tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium with the Airflow session cookie set, driven through its DevTools websocket."""
    pytest.importorskip("websocket", reason="websocket-client is needed to drive Chromium")
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    argv = [
        CHROMIUM,
        "--headless",
        # Containers (CI, most dev boxes) lack the user namespaces Chromium's sandbox needs; the browser only
        # opens pages of a server this test started on 127.0.0.1.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        f"--window-size={WIDTH},{HEIGHT}",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    chromium = processes.start("chromium", argv, port=0, url="", run_dir=tmp_path)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
            if not chromium.alive():
                pytest.fail(f"chromium exited:\n{processes.tail(chromium.log)}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page = next(t for t in targets if t["type"] == "page")
        devtools = DevTools(page["webSocketDebuggerUrl"])
        devtools.call("Network.enable")
        # A fixed viewport (the window size includes the headless window's own frame).
        devtools.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        # The cookie the Airflow UI's login sets: httponly, SameSite=Lax, on the server's root path.
        devtools.call(
            "Network.setCookie",
            name="_token",
            value=server.token,
            url=server.url + "/",
            path="/",
            httpOnly=True,
            sameSite="Lax",
        )
        try:
            yield devtools
        finally:
            devtools.close()
    finally:
        processes.stop(chromium, tmp_path)


def _looks_rendered(image: np.ndarray) -> None:
    """A real page, not a blank or uniform one: the viewport's size, ink on a good share of it, many colours."""
    assert image.shape == (HEIGHT, WIDTH, 3), image.shape
    ink = (image < 235).any(axis=2).mean()
    colours = len(np.unique(image.reshape(-1, 3), axis=0))
    assert ink > 0.02, f"only {ink:.1%} of the screenshot is not background"
    assert colours > 64, f"only {colours} colours in the screenshot"
    assert image.std() > 10


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
    _looks_rendered(browser.screenshot(server.screenshots / "cost.png"))

    # The full report itself: both plots decoded by the browser.
    browser.open(f"{server.url}/slicewise/reports/{fleet_data.REPORT_DATE}/report.html")
    images = browser.evaluate("[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert images == [[True, 400, 200], [True, 400, 200]]
    report = browser.screenshot(server.screenshots / "report.png")
    _looks_rendered(report)
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
    _looks_rendered(browser.screenshot(server.screenshots / "airflow-ui.png"))
