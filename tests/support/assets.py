"""What a DAG run published: its Asset events, read back from the Airflow metadata DB."""

from __future__ import annotations

from typing import Any


def asset_events(run_id: str) -> list[dict[str, Any]]:
    """Extras of the Asset events the run emitted, read from the Airflow metadata DB."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.scalars(select(AssetEvent).where(AssetEvent.source_run_id == run_id)).all()
        return [dict(event.extra or {}) for event in events]
