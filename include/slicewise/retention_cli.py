"""``slicewise store prune [--dry-run] [--days N]``: the ingest DAG's ``prune_store`` by hand.

Removes from the storage root what is older than ``store_retention_days`` before the newest published hour
(:mod:`slicewise.retention`), or with ``--dry-run`` says what it would remove and removes nothing: worth running
before lowering the setting on a store of months. ``--days`` replaces the setting for this run (still never
below what the DAGs read back). Settings are read as the DAG reads them (``SLICEWISE_*`` env, the Variable
``slicewise_settings``). Exit codes: 0 done, 2 bad input (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``store`` (with ``prune``) to the main CLI's sub-parsers."""
    store = subparsers.add_parser("store", help="the storage root: prune what is older than the retention")
    commands = store.add_subparsers(dest="store_command", required=True)
    prune = commands.add_parser(
        "prune", help="remove hours, staging and plan folders older than store_retention_days"
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    prune.add_argument(
        "--days", type=float, default=None, help="retention for this run (default: the setting)"
    )
    prune.set_defaults(func=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from slicewise.connections import task_settings
    from slicewise.errors import PermanentError
    from slicewise.retention import prune_configured_store

    try:
        settings = task_settings()
        if args.days is not None:
            settings = settings.with_overrides({"store_retention_days": args.days})
        pruned = prune_configured_store(settings, dry_run=args.dry_run)
    except (PermanentError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{settings.storage_root}: {pruned.summary()}")
    return 0
