"""``slicewise validate PATH``: run the partition suite on one file.

Exit codes: 0 valid (one OK line), 1 invalid (one line per failed expectation on stdout), 2 not a partition or
bad usage (one ``error:`` line on stderr). Never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_VALID, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``validate`` sub-command; its ``func`` takes the parsed args and returns the exit code."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "validate",
        help="validate a metrics partition file (GPU samples or demand) with the Great Expectations suite",
        description="Validate one metrics partition file (GPU samples or demand) with the Great Expectations suite.",
    )
    parser.add_argument(
        "path", help="a partition file: a local path or a storage URL (file://, s3://, gs://)"
    )
    parser.add_argument(
        "--previous",
        metavar="PATH",
        help="the previous hour's GPU partition, to check that its GPUs have not vanished",
    )
    parser.add_argument("--data-docs", metavar="DIR", type=Path, help="also build GX Data Docs HTML into DIR")
    parser.add_argument(
        "--json", metavar="FILE", type=Path, help="also write the GX validation results to FILE"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Validate ``args.path`` and print the verdict; returns the exit code."""
    from slicewise.settings import SettingsError
    from slicewise.validation import PartitionReadError, validate_file, write_data_docs

    try:
        report = validate_file(_url(args.path), previous=_url(args.previous) if args.previous else None)
    except (PartitionReadError, SettingsError) as exc:
        return _error(str(exc))
    except Exception as exc:  # the CLI promises one line, never a traceback, whatever the file holds
        return _error(f"could not validate {args.path}: {type(exc).__name__}: {_first_line(exc)}")
    try:
        if args.json:
            args.json.write_text(json.dumps(report.to_json(), indent=2))
        if args.data_docs:
            index = write_data_docs(report, folder=args.data_docs) / "index.html"
            print(f"data docs: {index}", file=sys.stderr)
    except OSError as exc:
        return _error(f"cannot write output: {_first_line(exc)}")
    stats = report.statistics
    if report.success:
        print(
            f"OK {report.subject}: {stats['rows']:,} rows, {stats['series']:,} series, "
            f"{stats['evaluated_expectations']} expectations passed"
        )
        return EXIT_VALID
    print(
        f"INVALID {report.subject}: {stats['unsuccessful_expectations']} of "
        f"{stats['evaluated_expectations']} expectations failed",
        file=sys.stderr,
    )
    for line in report.failures:
        print(line)
    return EXIT_INVALID


def _url(text: str) -> str:
    """A storage URL as given, or a local path made absolute as a ``file://`` URL."""
    return text if "://" in text else Path(text).expanduser().resolve().as_uri()


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_UNREADABLE


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
