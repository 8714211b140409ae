"""The embedded Airflow's SQLite lock waits: long for the background components, the default for the API server."""

from __future__ import annotations

import importlib

from slicewise.stack import airflow as airflow_stack


def test_only_the_background_components_wait_long_for_the_sqlite_write_lock() -> None:
    key = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"
    for component in ("scheduler", "dag-processor", "triggerer"):
        assert airflow_stack._patience(component) == {key: "slicewise.stack.airflow.SQLITE_CONNECT_ARGS"}
    # The API server keeps Python's 5 s: a long wait on its event loop deadlocks until the wait ends.
    assert airflow_stack._patience("api-server") == {}
    # The path resolves, as Airflow's conf.getimport resolves it, to sqlite3.connect's keyword arguments.
    (path,) = airflow_stack._patience("scheduler").values()
    module, name = path.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) == {"timeout": 60}
