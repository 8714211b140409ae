"""tests.support.browser without a browser: finding the running demo's Airflow login, telling a rendered
screenshot from a blank one. (Chromium itself is driven in tests/plugins/test_browser.py.)"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from slicewise.stack import airflow as airflow_stack
from slicewise.stack import processes
from tests.support.browser import Login, airflow_login, blank_reason

REPO = Path(__file__).resolve().parents[2]


def test_the_login_is_what_the_running_stack_recorded(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    assert airflow_login(home) is None  # nothing started there

    port = processes.free_port()
    airflow_stack.environment(home, REPO, port, connections={})  # writes secrets.json, as `demo up` does
    url = f"http://{processes.LOOPBACK}:{port}"
    # A stand-in for the API server: a live process recorded under its name, as stack.airflow.start records it.
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    service = processes.start("api-server", argv, port=port, url=url, run_dir=home / "run")
    try:
        login = airflow_login(home)
        password = json.loads((home / "secrets.json").read_text())["password"]
        assert login == Login(url, airflow_stack.ADMIN_USER, password)
    finally:
        processes.stop(service, home / "run")
    assert airflow_login(home) is None  # stopped: no stale URL


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(out, format="png")
    return out.getvalue()


def test_blank_and_wrong_sized_screenshots_are_told_apart() -> None:
    white = np.full((90, 140, 3), 255)
    assert "not background" in str(blank_reason(_png(white), 140, 90))
    two_colours = white.copy()
    two_colours[:, :70] = (1, 124, 238)
    assert "colours" in str(blank_reason(_png(two_colours), 140, 90))
    assert blank_reason(_png(white), 140, 100) == "size 140x90, not 140x100"
    page = np.random.default_rng(0).integers(0, 256, size=(90, 140, 3))
    assert blank_reason(_png(page), 140, 90) is None
