"""Where the rollout ledger lives: a SQLAlchemy URL from the Airflow Connection ``ledger_conn_id``, if any.

Connection types: ``sqlite`` (the file path in ``host``, as the SQLite provider keeps it, or in ``schema``,
where a URI such as ``sqlite:////var/lib/slicewise/ledger.db`` puts it) and ``postgres`` / ``postgresql``
(``postgresql+psycopg2://``; production installs ``psycopg2``, building the URL does not need it). An
``extra`` key ``sqlalchemy_url`` overrides everything. Without the Connection: ``<SLICEWISE_HOME>/ledger.db``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL, make_url

from slicewise.rollout.ledger.db import LedgerError
from slicewise.settings import slicewise_home

if TYPE_CHECKING:
    from slicewise.settings import Settings

#: Connection extras passed on to libpq as URL query parameters (TLS and client settings).
POSTGRES_EXTRAS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name")
DEFAULT_FILE = "ledger.db"


def url_from_connection(
    conn_type: str | None,
    host: str | None,
    port: int | None,
    schema: str | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any] | None,
) -> str:
    """The SQLAlchemy URL of an Airflow Connection's fields; credentials are URL-quoted. LedgerError when the
    type is not sqlite or postgres, or a field the type needs is missing."""
    extra = extra or {}
    if extra.get("sqlalchemy_url"):
        return str(extra["sqlalchemy_url"])
    kind = (conn_type or "").lower()
    if kind == "sqlite":
        path = host or schema
        if not path:
            raise LedgerError(
                "the sqlite ledger connection names no database file (set its host to the path)"
            )
        return URL.create("sqlite", database=path).render_as_string()
    if kind in ("postgres", "postgresql"):
        if not host:
            raise LedgerError("the postgres ledger connection has no host")
        query = {key: str(extra[key]) for key in POSTGRES_EXTRAS if extra.get(key) not in (None, "")}
        url = URL.create(
            "postgresql+psycopg2",
            username=login or None,
            password=password or None,
            host=host,
            port=port or None,
            database=schema or None,
            query=query,
        )
        return url.render_as_string(hide_password=False)
    raise LedgerError(
        f"ledger connection type {conn_type!r} is not supported: use sqlite or postgres, "
        "or set extra sqlalchemy_url"
    )


def ledger_url(settings: Settings) -> str:
    """Inside a task: the URL of the Connection ``settings.ledger_conn_id`` when it exists, else the SQLite
    file ``<SLICEWISE_HOME>/ledger.db``. The folder of a SQLite file is created."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    url = URL.create("sqlite", database=str(slicewise_home() / DEFAULT_FILE)).render_as_string()
    if settings.ledger_conn_id:  # an empty id means "the default file"
        try:
            conn = Connection.get(settings.ledger_conn_id)
        except AirflowNotFoundException:
            pass
        else:
            url = url_from_connection(
                conn.conn_type,
                conn.host,
                conn.port,
                conn.schema,
                conn.login,
                conn.password,
                conn.extra_dejson,
            )
    _make_sqlite_folder(url)
    return url


def _make_sqlite_folder(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
