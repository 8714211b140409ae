"""Screenshots of the Airflow UI for docs/demo.md, taken in headless Chromium from the running demo stack.

    make demo        # or: .venv/bin/python -m slicewise.demo up (it leaves the services running)
    .venv/bin/python scripts/screenshot_ui.py [--out docs/images] [--home DIR]

Finds the stack's URL and admin login where ``demo up`` recorded them (``<SLICEWISE_HOME>/airflow``: the API
server's pid file and ``secrets.json``), signs a headless Chromium in with the UI's own session cookie and saves:

  airflow-rollout-grid.png   the grid view of the newest ``gpu_partition_rollout`` run that rolled out
  airflow-gpu-fleet.png      the UI's "GPU fleet" entry (the Slicewise pages inside the UI) on its Fleet page

Chromium gets a temporary profile and DevTools on 127.0.0.1, and is stopped by its pid when done. The DevTools
client is the browser test's (``tests/support/browser.py``): test tooling, not part of the runtime package.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slicewise.settings import slicewise_home
from slicewise.stack.airflow_api import AirflowApi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository root for tests/
from tests.support.browser import DevTools, access_token, airflow_login, blank_reason, chromium

REPO = Path(__file__).resolve().parents[1]
ROLLOUT_DAG = "gpu_partition_rollout"
WIDTH, HEIGHT = 1400, 900
SETTLE_S = 3.0  # after the content is there: fonts, icons and the grid's bars finish painting
MAX_BYTES = 400_000
IN_FRAME = "document.querySelector(`iframe[title='GPU fleet']`)?.contentDocument"


def say(message: str) -> None:
    print(f"[screenshot] {message}", flush=True)


def newest_rollout_run(api: AirflowApi) -> str:
    """The newest ``gpu_partition_rollout`` run that started a rollout (its ``start_rollout`` task ran), else
    the newest run: a quiet hourly run that planned no change shows little but skipped tasks."""
    runs = api.dag_runs(ROLLOUT_DAG, limit=20)  # newest first
    if not runs:
        raise RuntimeError(f"{ROLLOUT_DAG} has no run yet: let `demo up` finish its cycle first")
    for run in runs:
        states = {ti["task_id"]: ti.get("state") for ti in api.task_instances(ROLLOUT_DAG, run["dag_run_id"])}
        if states.get("start_rollout") in ("success", "failed"):
            return str(run["dag_run_id"])
    return str(runs[0]["dag_run_id"])


def rollout_grid(browser: DevTools, url: str, api: AirflowApi) -> str:
    """The DAG's grid view with that run selected (its task instances beside the grid); the page's path."""
    run_id = newest_rollout_run(api)
    # Tasks outside task groups: the grid lists them by name (groups start collapsed).
    tasks = sorted(
        {ti["task_id"] for ti in api.task_instances(ROLLOUT_DAG, run_id) if "." not in ti["task_id"]}
    )
    path = f"/dags/{ROLLOUT_DAG}/runs/{run_id}"
    browser.open(url + path)
    # The grid has rendered when its task names are on the page.
    browser.wait_for(f"{json.dumps(tasks)}.every(t => document.body.innerText.includes(t))", timeout_s=60)
    return path


def gpu_fleet(browser: DevTools, url: str) -> str:
    """The UI's "GPU fleet" navigation entry (the Slicewise pages in their frame), on its Fleet page: nodes,
    MIG layouts, device-plugin configs, dwell. The page's path."""
    browser.open(url + "/plugin/gpu-fleet")
    browser.wait_for(
        f"{IN_FRAME}?.readyState === 'complete' && {IN_FRAME}.querySelectorAll('table').length", 60
    )
    browser.evaluate(
        f"[...{IN_FRAME}.querySelectorAll('a')].find(a => a.textContent.trim() === 'Fleet').click()"
    )
    browser.wait_for(
        f"{IN_FRAME}?.readyState === 'complete' && {IN_FRAME}.querySelectorAll('#fleet tbody tr').length", 60
    )
    return str(browser.evaluate("location.pathname"))


def save(browser: DevTools, path: Path) -> int:
    """Screenshot the viewport to ``path`` (PNG); refuse a login page or a blank one. Its size in bytes."""
    if browser.evaluate("location.pathname").startswith("/auth/login"):
        raise RuntimeError(f"{path.name}: the browser landed on the login page")
    time.sleep(SETTLE_S)
    png = browser.screenshot()
    problem = blank_reason(png, WIDTH, HEIGHT)
    if problem is not None:
        raise RuntimeError(f"{path.name}: the page did not render ({problem})")
    if len(png) > MAX_BYTES:  # a 256-colour palette keeps UI screenshots sharp at a fraction of the size
        from PIL import Image

        out = io.BytesIO()
        Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256).save(out, format="png", optimize=True)
        png = out.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return len(png)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="folder (docs/images)")
    parser.add_argument("--home", type=Path, default=None, help="SLICEWISE_HOME of the running demo")
    args = parser.parse_args(argv)
    home: Path = args.home or slicewise_home()
    login = airflow_login(home / "airflow")
    if login is None:
        say(f"error: no running Airflow of the demo under {home}; start it with `make demo` (or pass --home)")
        return 1
    say(f"Airflow UI at {login.url}")
    api = AirflowApi(login.url, login.username, login.password)
    pages: dict[str, Callable[[DevTools], str]] = {
        "airflow-rollout-grid.png": lambda browser: rollout_grid(browser, login.url, api),
        "airflow-gpu-fleet.png": lambda browser: gpu_fleet(browser, login.url),
    }
    try:
        with (
            tempfile.TemporaryDirectory(prefix="slicewise-chromium-") as tmp,
            chromium(Path(tmp), WIDTH, HEIGHT) as browser,
        ):
            browser.set_token(login.url, access_token(login))
            for name, show in pages.items():
                page = show(browser)
                size = save(browser, args.out / name)
                say(f"{args.out / name}: {page} ({size / 1000:.0f} kB)")
    except (RuntimeError, TimeoutError, FileNotFoundError, OSError) as exc:
        say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
