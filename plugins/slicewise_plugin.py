"""The "GPU fleet" section of the Airflow UI: cost report, fleet, plan and rollouts (Slicewise).

Wiring only. The pages are a FastAPI app (``slicewise.ui.app``) that the API server mounts at ``/slicewise``;
the navigation entry embeds it in the UI. Every Airflow component imports this module, so it imports nothing
heavy: the app is built on its first request (``slicewise.ui.mount.LazyApp``).
"""

from __future__ import annotations

import base64

from airflow.plugins_manager import AirflowPlugin

from slicewise.ui.mount import LazyApp

URL_PREFIX = "/slicewise"  # keep equal to slicewise.ui.app.URL_PREFIX (not imported: it is the heavy module)


def _icon(stroke: str) -> str:
    """A GPU chip outline as a data URI (the nav renders it with <img>, so it needs no route of its own)."""
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" '
        f'stroke="{stroke}" stroke-width="1.8"><rect x="5" y="5" width="14" height="14" rx="2"/>'
        '<rect x="9" y="9" width="6" height="6"/>'
        '<path d="M9 2v3M15 2v3M9 19v3M15 19v3M2 9h3M2 15h3M19 9h3M19 15h3"/></svg>'
    )
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


class SlicewisePlugin(AirflowPlugin):
    name = "slicewise"
    fastapi_apps = [
        {
            "app": LazyApp("slicewise.ui.app:create_app"),
            "url_prefix": URL_PREFIX,
            "name": "Slicewise GPU fleet",
        }
    ]
    # A top-level nav entry that shows the app inside the UI (an iframe at /plugin/gpu-fleet). The href is
    # relative: the UI resolves it against its <base href>, so it works under a base_url sub-path too.
    external_views = [
        {
            "name": "GPU fleet",
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": "gpu-fleet",
            "destination": "nav",
            "nav_top_level": True,
            # Mid-tones: the nav shows the icon on a light background, and on a dark one while selected.
            "icon": _icon("#718096"),
            "icon_dark_mode": _icon("#a0aec0"),
        }
    ]
