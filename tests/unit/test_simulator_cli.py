"""``slicewise simulate backfill|serve`` as registered into an argparse CLI."""

from __future__ import annotations

import argparse
import re
import shutil
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

import slicewise.simulator.cli as cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slicewise")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_backfill_arguments_and_defaults(tmp_path: Path) -> None:
    args = _parser().parse_args(["simulate", "backfill", "--data-dir", str(tmp_path)])
    assert (args.days, args.step, args.end, args.hostname_label) == (7.0, 60, "now", "Hostname")
    assert args.func is cli.run_backfill
    serve = _parser().parse_args(["simulate", "serve", "--port", "9555", "--hostname-label", "hostname"])
    assert (serve.port, serve.host, serve.hostname_label, serve.func) == (
        9555,
        "127.0.0.1",
        "hostname",
        cli.run_serve,
    )


def test_data_dir_is_required() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["simulate", "backfill"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", 1_704_715_200),
        ("1704715230", 1_704_715_200),
        ("2024-01-08T12:00:59", 1_704_715_200),
        ("2024-01-08T13:00:59+01:00", 1_704_715_200),
    ],
)
def test_end_is_parsed_as_utc_and_rounded_down_to_the_step(text: str, expected: int) -> None:
    assert cli.parse_end(text, 60, now=1_704_715_259.5) == expected
    assert datetime.fromtimestamp(expected, tz=UTC).hour == 12


def test_bad_backfill_input_is_one_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["simulate", "backfill", "--days", "0", "--data-dir", str(tmp_path)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--days" in err


def test_backfill_writes_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not shutil.which("promtool"):
        pytest.skip("promtool not found on PATH (Debian package `prometheus`; `make system-deps`)")
    # given a 20-minute history ending on a fixed instant
    data = tmp_path / "prometheus" / "data"
    argv = ["simulate", "backfill", "--days", str(20 / 1440), "--end", "1704715200", "--data-dir", str(data)]
    args = _parser().parse_args(argv)

    # when run
    code = args.func(args)

    # then blocks exist and the temporary OpenMetrics text is gone
    assert code == 0
    blocks = [p for p in data.iterdir() if (p / "meta.json").exists()]
    assert len(blocks) == 1
    assert not any(p.name.startswith(".slicewise-openmetrics-") for p in data.parent.iterdir())
    assert "1 blocks" in capsys.readouterr().out


def test_serve_serves_until_interrupted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scraped: list[str] = []

    def scrape_then_interrupt() -> None:
        # while the command waits, its printed URL serves the fleet's metrics
        url = re.search(r"http://\S+/metrics", capsys.readouterr().out)
        assert url
        with urllib.request.urlopen(url.group(0), timeout=30) as response:
            scraped.append(response.read().decode())
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_block_until_interrupted", scrape_then_interrupt)
    args = _parser().parse_args(["simulate", "serve", "--port", "0"])
    assert args.func(args) == 0
    assert scraped and "DCGM_FI_DEV_FB_USED{" in scraped[0]


def test_serve_refuses_a_public_address(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["simulate", "serve", "--host", "0.0.0.0", "--port", "0"])
    assert args.func(args) == 2
    assert "loopback" in capsys.readouterr().err
