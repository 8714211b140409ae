"""``slicewise rollout marks``: the cluster's newest changes outside the waves, from the ledger, newest first;
another cluster's are not shown."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slicewise.rollout import cli
from slicewise.rollout.ledger import Ledger
from slicewise.rollout.ledger.url import ledger_url
from slicewise.rollout.wiring import cluster_identity
from slicewise.settings import load_settings

AT = datetime(2026, 12, 7, 5, tzinfo=UTC)


def test_marks_prints_this_clusters_newest_first_and_says_when_there_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    settings = load_settings()
    cluster = cluster_identity(settings)
    url = ledger_url(settings)  # imports airflow.sdk, which may log its configuration to stdout once
    capsys.readouterr()

    assert cli._marks(settings, argparse.Namespace(limit=20)) == cli.EXIT_DONE
    assert capsys.readouterr().out == f"no change outside the waves on {cluster} yet\n"

    with Ledger.open(url) as ledger:
        ledger.add_marks(cluster, "gpu_partition_rollout/r1", [("standby", "tainted n1")], AT)
        ledger.add_marks("kubernetes:other", "gpu_partition_rollout/r9", [("holds", "held n9")], AT)
        ledger.add_marks(cluster, "slicewise-cli/r2", [("pod moves", "evicted a/p")], AT + timedelta(hours=1))

    assert cli._marks(settings, argparse.Namespace(limit=20)) == cli.EXIT_DONE
    assert capsys.readouterr().out.splitlines() == [
        "2026-12-07T06:00:00+00:00 slicewise-cli/r2 pod moves: evicted a/p",
        "2026-12-07T05:00:00+00:00 gpu_partition_rollout/r1 standby: tainted n1",
    ]
    cli._marks(settings, argparse.Namespace(limit=1))
    assert len(capsys.readouterr().out.splitlines()) == 1
