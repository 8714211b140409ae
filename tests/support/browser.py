"""Headless Chromium driven over the Chrome DevTools Protocol, signed in to the embedded Airflow like its UI.

Used by ``scripts/screenshot_ui.py`` (the screenshots in docs/demo.md) and ``tests/plugins/test_browser.py``.
Chromium runs with a throw-away profile, DevTools on 127.0.0.1 only (port chosen by Chromium, read from its
``DevToolsActivePort`` file), and is stopped by its recorded pid (``slicewise.stack.processes``), never by name.
The client is websocket-client, already in the pinned stack.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from slicewise.stack import airflow as airflow_stack
from slicewise.stack import processes

#: The Airflow UI keeps its session in this cookie (httponly, SameSite=Lax, path /): a JWT from /auth/token.
TOKEN_COOKIE = "_token"


def chromium_binary() -> str | None:
    """Debian's ``chromium`` (``scripts/install-system-deps.sh`` installs it), or Ubuntu's name for it."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class Login:
    url: str
    username: str
    password: str


def airflow_login(airflow_home: Path) -> Login | None:
    """The URL and admin login of the embedded Airflow running from ``airflow_home`` (``<SLICEWISE_HOME>/airflow``),
    read from what ``slicewise.stack.airflow.start`` recorded: the API server's pid file and ``secrets.json``.
    None when its API server is not running."""
    service = processes.recorded("api-server", airflow_home / "run")
    secrets_file = airflow_home / "secrets.json"
    if service is None or not secrets_file.exists():
        return None
    password = str(json.loads(secrets_file.read_text())["password"])
    return Login(service.url, airflow_stack.ADMIN_USER, password)


def access_token(login: Login, timeout_s: float = 30.0) -> str:
    """A JWT for ``login`` from the API server's ``/auth/token`` (what the UI's login page stores in _token)."""
    answer = requests.post(
        f"{login.url}/auth/token",
        json={"username": login.username, "password": login.password},
        timeout=timeout_s,
    )
    if answer.status_code != 201:
        raise RuntimeError(
            f"login as {login.username} at {login.url} failed: {answer.status_code} {answer.text}"
        )
    return str(answer.json()["access_token"])


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

    def open(self, url: str, timeout_s: float = 30.0) -> None:
        """Navigate to ``url`` and wait until that document has loaded (scripts may still be rendering)."""
        self.call("Page.navigate", url=url)
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'", timeout_s=timeout_s
        )

    def set_token(self, server_url: str, token: str) -> None:
        """Sign the browser in to the Airflow UI at ``server_url``: the cookie its own login page sets."""
        self.call(
            "Network.setCookie",
            name=TOKEN_COOKIE,
            value=token,
            url=server_url + "/",
            path="/",
            httpOnly=True,
            sameSite="Lax",
        )

    def screenshot(self, image_format: str = "png", quality: int | None = None) -> bytes:
        """The viewport as PNG (or JPEG with ``quality``) bytes."""
        params: dict[str, Any] = {"format": image_format}
        if quality is not None:
            params["quality"] = quality
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def close(self) -> None:
        self._ws.close()


@contextmanager
def chromium(run_dir: Path, width: int, height: int, binary: str | None = None) -> Iterator[DevTools]:
    """Headless Chromium with a ``width`` x ``height`` viewport and its profile under ``run_dir``, driven through
    its first page's DevTools websocket; stopped (its process group, by recorded pid) on exit."""
    binary = binary or chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (scripts/install-system-deps.sh installs it)")
    profile = run_dir / "profile"
    argv = [
        binary,
        "--headless",
        # Containers (CI, most dev boxes) lack the user namespaces Chromium's sandbox needs; the browser only
        # opens pages of a server on 127.0.0.1.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",  # Chromium binds a free port and writes it to DevToolsActivePort
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    # Chromium's process-singleton files go to TMPDIR, a folder of their own that leaves with the browser: its
    # socket's path must stay under the 108 bytes of a Unix socket address, which a test's tmp_path under
    # pytest-xdist (.../popen-gw0/<test name>/) can exceed.
    with tempfile.TemporaryDirectory(prefix="chromium-") as singleton:
        yield from _drive(argv, profile, run_dir, singleton, width, height)


def _drive(
    argv: list[str], profile: Path, run_dir: Path, singleton: str, width: int, height: int
) -> Iterator[DevTools]:
    process = processes.start("chromium", argv, port=0, url="", run_dir=run_dir, env={"TMPDIR": singleton})
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if not process.alive():
                raise RuntimeError(f"chromium exited:\n{processes.tail(process.log)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium wrote no DevTools port in 30 s:\n{processes.tail(process.log)}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page = next(t for t in targets if t["type"] == "page")
        devtools = DevTools(page["webSocketDebuggerUrl"])
        try:
            devtools.call("Network.enable")
            # A fixed viewport (the window size includes the headless window's own frame).
            devtools.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield devtools
        finally:
            devtools.close()
    finally:
        processes.stop(process, run_dir)


def blank_reason(image: bytes, width: int, height: int) -> str | None:
    """Why a screenshot does not look like a rendered page (wrong size, mostly background, few colours), or
    None when it does."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(image)).convert("RGB"))
    if pixels.shape != (height, width, 3):
        return f"size {pixels.shape[1]}x{pixels.shape[0]}, not {width}x{height}"
    ink = float((pixels < 235).any(axis=2).mean())
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    if ink <= 0.02:
        return f"only {ink:.1%} of the screenshot is not background"
    if colours <= 64:
        return f"only {colours} colours in the screenshot"
    if float(pixels.std()) <= 10:
        return "the screenshot is almost uniform"
    return None
