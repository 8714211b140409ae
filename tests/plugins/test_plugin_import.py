"""Every Airflow component imports plugins/ (the scheduler, the DAG processor and each task too): the plugin
must load through Airflow's own loader, fast, without importing the pages' stack or touching the network."""

from __future__ import annotations

from tests.support.isolated_import import isolated_import

#: What the pages need and nothing else should pay for: imported on the first request to the app only.
DEFERRED = [
    "fastapi",
    "starlette",
    "jinja2",
    "pandas",
    "numpy",
    "pyarrow",
    "kubernetes",
    "matplotlib",
    "slicewise.ui.app",
    "slicewise.ui.sources",
    "slicewise.cluster",
    "slicewise.rollout",
    "slicewise.planning",
]


def test_airflow_loads_the_plugin_fast_and_light() -> None:
    result = isolated_import(
        "from airflow import plugins_manager",
        "plugins, errors = plugins_manager._get_plugins()\n"
        "extra = {'plugins': [p.name for p in plugins], 'errors': errors}",
    )
    assert result["errors"] == {}
    assert "slicewise" in result["plugins"]
    assert result["touched"] == []
    heavy = [m for m in result["new_modules"] if any(m == d or m.startswith(d + ".") for d in DEFERRED)]
    assert heavy == [], f"loading the plugin imported {heavy}"
    # The whole plugins folder (this plugin and Airflow's loader) in well under a DAG file's parse budget.
    assert result["elapsed"] < 1.0, result["elapsed"]
