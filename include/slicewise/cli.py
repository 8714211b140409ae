"""The ``slicewise`` command line: ``validate``, ``simulate``, ``forecast-backtest``, ``catalog``, ``backtest``,
``rollout``, ``store``.

Every sub-command returns an exit code; bad input prints one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from slicewise import retention_cli as store_cli
    from slicewise.catalog import cli as catalog_cli
    from slicewise.forecasting import cli as forecast_cli
    from slicewise.rollout import cli as rollout_cli
    from slicewise.simulator import cli as simulate_cli
    from slicewise.validation import cli as validate_cli
    from slicewise.whatif import cli as backtest_cli

    parser = argparse.ArgumentParser(prog="slicewise", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    validate_cli.register(commands)
    simulate_cli.register(commands)
    forecast_cli.register(commands)
    catalog_cli.register(commands)
    backtest_cli.register(commands)
    rollout_cli.register(commands)
    store_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
