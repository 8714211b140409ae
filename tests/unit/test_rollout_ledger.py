"""The durable rollout ledger on real database files: records, transitions, the lock, several processes.

Every test runs on a fresh SQLite file. Set ``LEDGER_TEST_POSTGRES_URL`` (a ``postgresql+psycopg2://`` URL of a
scratch database whose ``slicewise_*`` tables may be dropped) to run the same tests on Postgres as well.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from slicewise.rollout import ledger as L
from slicewise.rollout.ledger import Ledger, LedgerError
from slicewise.rollout.ledger.tables import Base
from slicewise.rollout.ledger.url import ledger_url, url_from_connection
from slicewise.settings import load_settings

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CLUSTER = L.cluster_key("simulated", "fleet-a")
MIG = "nvidia.com/mig.config"
PLUGIN = "nvidia.com/device-plugin.config"
WAVES = [["gpu-0"], ["gpu-1", "gpu-2"], ["gpu-3"]]
DESIRED: dict[str, dict[str, str | None]] = {
    "gpu-0": {MIG: "all-1g.10gb", PLUGIN: "default"},
    "gpu-1": {MIG: "all-balanced", PLUGIN: None},
    "gpu-2": {MIG: "all-balanced", PLUGIN: None},
    "gpu-3": {MIG: "all-disabled", PLUGIN: "mps-4"},
}
POSTGRES_URL = os.environ.get("LEDGER_TEST_POSTGRES_URL", "")


def _sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'ledger.db'}"


@pytest.fixture(params=["sqlite", *(["postgres"] if POSTGRES_URL else [])])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return _sqlite_url(tmp_path)
    engine = create_engine(POSTGRES_URL)
    Base.metadata.drop_all(engine)
    engine.dispose()
    return POSTGRES_URL


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    with Ledger.open(db_url) as opened:
        yield opened


def start(ledger: Ledger, cluster: str = CLUSTER, at: datetime = T0) -> L.Rollout:
    return ledger.start_rollout(
        cluster, "scheduled__2025-03-01T12:00:00+00:00", "/plans/p.json", WAVES, DESIRED, at
    )


# -- starting a rollout ------------------------------------------------------------------------------------


def test_start_rollout_records_waves_and_nodes(ledger: Ledger) -> None:
    rollout = start(ledger)

    assert (rollout.cluster, rollout.status, rollout.created_at) == (CLUSTER, L.RolloutStatus.RUNNING, T0)
    assert ledger.rollout(rollout.id) == rollout
    assert [(w.index, w.nodes, w.status) for w in ledger.waves(rollout.id)] == [
        (0, ("gpu-0",), L.WaveStatus.PENDING),
        (1, ("gpu-1", "gpu-2"), L.WaveStatus.PENDING),
        (2, ("gpu-3",), L.WaveStatus.PENDING),
    ]
    nodes = ledger.nodes(rollout.id)
    assert [(n.node, n.wave, n.status, n.snapshot, n.step) for n in nodes] == [
        ("gpu-0", 0, L.NodeStatus.PENDING, None, ""),
        ("gpu-1", 1, L.NodeStatus.PENDING, None, ""),
        ("gpu-2", 1, L.NodeStatus.PENDING, None, ""),
        ("gpu-3", 2, L.NodeStatus.PENDING, None, ""),
    ]
    assert ledger.node(rollout.id, "gpu-1").desired == {MIG: "all-balanced", PLUGIN: None}
    assert [n.node for n in ledger.nodes(rollout.id, wave=1)] == ["gpu-1", "gpu-2"]
    assert not any(n.cordoned_by_us for n in nodes)
    assert ledger.unfinished_rollout(CLUSTER) == rollout


def test_start_rollout_is_one_transaction(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    real_node_row = L.NodeRow
    made: list[str] = []

    def failing_node_row(**fields: object) -> object:
        made.append(str(fields["node"]))
        if len(made) == 3:
            raise RuntimeError("crash while writing the third node")
        return real_node_row(**fields)

    monkeypatch.setattr(L, "NodeRow", failing_node_row)
    with pytest.raises(RuntimeError, match="third node"):
        start(ledger)
    monkeypatch.setattr(L, "NodeRow", real_node_row)

    assert ledger.unfinished_rollout(CLUSTER) is None
    assert ledger.recent_rollouts() == []
    assert start(ledger).status == L.RolloutStatus.RUNNING  # nothing half-written is in the way


@pytest.mark.parametrize(
    ("waves", "desired", "why"),
    [
        ([], {}, "at least one wave"),
        ([["a"], []], {"a": {}}, "no wave may be empty"),
        ([["a"], ["a"]], {"a": {}}, "more than one wave"),
        ([["a", "b"]], {"a": {}}, "missing"),
        ([["a"]], {"a": {}, "b": {}}, "extra"),
    ],
)
def test_start_rollout_refuses_inconsistent_plans(
    ledger: Ledger, waves: list[list[str]], desired: dict[str, dict[str, str | None]], why: str
) -> None:
    with pytest.raises(LedgerError, match=why):
        ledger.start_rollout(CLUSTER, "run", "/p", waves, desired, T0)
    assert ledger.recent_rollouts() == []


@pytest.mark.parametrize("unfinished", [[], [L.RolloutStatus.PAUSED], [L.RolloutStatus.ROLLING_BACK]])
def test_second_start_refused_while_unfinished(ledger: Ledger, unfinished: list[str]) -> None:
    first = start(ledger)
    for status in unfinished:
        ledger.set_rollout_status(first.id, status, "test", T0)

    with pytest.raises(LedgerError, match=f"unfinished rollout #{first.id}"):
        start(ledger)
    assert start(ledger, cluster=L.cluster_key("simulated", "fleet-b")).status == L.RolloutStatus.RUNNING


@pytest.mark.parametrize(
    "path",
    [
        [L.RolloutStatus.PROMOTED],
        [L.RolloutStatus.ROLLING_BACK, L.RolloutStatus.ROLLED_BACK],
        [L.RolloutStatus.PAUSED, L.RolloutStatus.ROLLING_BACK, L.RolloutStatus.FAILED],
    ],
)
def test_start_allowed_after_a_terminal_status(ledger: Ledger, path: list[str]) -> None:
    first = start(ledger)
    for status in path:
        ledger.set_rollout_status(first.id, status, "test", T0)

    second = start(ledger, at=T0 + timedelta(hours=1))

    assert second.id != first.id
    assert ledger.unfinished_rollout(CLUSTER) == second
    assert [r.id for r in ledger.recent_rollouts(CLUSTER)] == [second.id, first.id]


# -- rollout status ----------------------------------------------------------------------------------------


def test_legal_transitions_are_recorded_with_reasons(ledger: Ledger) -> None:
    rollout = start(ledger)
    steps = [
        (L.RolloutStatus.PAUSED, "canary inconclusive"),
        (L.RolloutStatus.RUNNING, "approved by alice"),
        (L.RolloutStatus.ROLLING_BACK, "wave 1 failed"),
        (L.RolloutStatus.ROLLED_BACK, "all restored"),
    ]
    for i, (status, reason) in enumerate(steps, start=1):
        updated = ledger.set_rollout_status(rollout.id, status, reason, T0 + timedelta(minutes=i))
        assert (updated.status, updated.reason, updated.updated_at) == (
            status,
            reason,
            T0 + timedelta(minutes=i),
        )

    assert ledger.rollout(rollout.id).finished
    messages = [e.message for e in ledger.events(rollout.id)]
    assert "rollout RUNNING -> PAUSED: canary inconclusive" in messages
    assert "rollout ROLLING_BACK -> ROLLED_BACK: all restored" in messages


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([L.RolloutStatus.PROMOTED], L.RolloutStatus.RUNNING),
        ([L.RolloutStatus.PROMOTED], L.RolloutStatus.ROLLING_BACK),
        ([L.RolloutStatus.ROLLING_BACK, L.RolloutStatus.ROLLED_BACK], L.RolloutStatus.ROLLING_BACK),
        ([L.RolloutStatus.ROLLING_BACK, L.RolloutStatus.FAILED], L.RolloutStatus.RUNNING),
        ([], L.RolloutStatus.ROLLED_BACK),
        ([], L.RolloutStatus.FAILED),
        ([L.RolloutStatus.PAUSED], L.RolloutStatus.PROMOTED),
        ([L.RolloutStatus.ROLLING_BACK], L.RolloutStatus.RUNNING),
        ([L.RolloutStatus.ROLLING_BACK], L.RolloutStatus.PAUSED),
    ],
)
def test_illegal_transitions_are_refused(ledger: Ledger, path: list[str], illegal: str) -> None:
    rollout = start(ledger)
    for status in path:
        ledger.set_rollout_status(rollout.id, status, "test", T0)
    before = ledger.rollout(rollout.id)

    with pytest.raises(LedgerError, match=f"cannot go from {before.status} to {illegal}"):
        ledger.set_rollout_status(rollout.id, illegal, "test", T0 + timedelta(minutes=1))
    assert ledger.rollout(rollout.id) == before


def test_repeating_a_status_is_idempotent(ledger: Ledger) -> None:
    rollout = start(ledger)
    assert ledger.set_rollout_status(
        rollout.id, L.RolloutStatus.RUNNING, "resumed after a crash", T0
    ).reason == ("resumed after a crash")
    promoted = ledger.set_rollout_status(rollout.id, L.RolloutStatus.PROMOTED, "all waves passed", T0)
    again = ledger.set_rollout_status(
        rollout.id, L.RolloutStatus.PROMOTED, "retried task", T0 + timedelta(minutes=5)
    )
    assert again == promoted


def test_unknown_rollout_and_status_are_refused(ledger: Ledger) -> None:
    rollout = start(ledger)
    with pytest.raises(LedgerError, match="unknown rollout status"):
        ledger.set_rollout_status(rollout.id, "DONE", "x", T0)
    with pytest.raises(LedgerError, match="no rollout #999"):
        ledger.rollout(999)
    with pytest.raises(LedgerError, match="naive datetime"):
        ledger.set_rollout_status(rollout.id, L.RolloutStatus.PAUSED, "x", datetime(2025, 3, 1, 12, 0))


def test_times_come_back_as_utc(ledger: Ledger) -> None:
    cest = timezone(timedelta(hours=2))
    rollout = start(ledger, at=datetime(2025, 3, 1, 14, 0, tzinfo=cest))
    assert ledger.rollout(rollout.id).created_at == T0
    assert ledger.rollout(rollout.id).created_at.tzinfo == UTC


# -- waves, nodes, snapshots -------------------------------------------------------------------------------


def test_wave_status(ledger: Ledger) -> None:
    rollout = start(ledger)
    ledger.set_wave_status(rollout.id, 0, L.WaveStatus.APPLYING, T0)
    ledger.set_wave_status(rollout.id, 0, L.WaveStatus.ANALYSING, T0 + timedelta(minutes=1))

    assert [w.status for w in ledger.waves(rollout.id)] == [
        L.WaveStatus.ANALYSING,
        L.WaveStatus.PENDING,
        L.WaveStatus.PENDING,
    ]
    assert "wave status APPLYING -> ANALYSING" in [e.message for e in ledger.events(rollout.id)]
    with pytest.raises(LedgerError, match="no wave 7"):
        ledger.set_wave_status(rollout.id, 7, L.WaveStatus.PASSED, T0)
    with pytest.raises(LedgerError, match="unknown wave status"):
        ledger.set_wave_status(rollout.id, 0, L.NodeStatus.DONE, T0)


def test_first_snapshot_wins(ledger: Ledger) -> None:
    rollout = start(ledger)
    before = {MIG: "all-disabled", PLUGIN: "default", "allocatable": {"nvidia.com/gpu": 8}}

    kept = ledger.record_snapshot(rollout.id, "gpu-0", before, T0)
    half_changed = {MIG: "all-1g.10gb", PLUGIN: "default", "allocatable": {}}
    again = ledger.record_snapshot(rollout.id, "gpu-0", half_changed, T0 + timedelta(minutes=3))

    assert kept.snapshot == before
    assert again.snapshot == before
    assert ledger.node(rollout.id, "gpu-0").snapshot == before
    with pytest.raises(LedgerError, match="has no node gpu-9"):
        ledger.record_snapshot(rollout.id, "gpu-9", before, T0)
    with pytest.raises(LedgerError, match="not JSON"):
        ledger.record_snapshot(rollout.id, "gpu-1", {"when": T0}, T0)


def test_update_node_changes_only_given_fields(ledger: Ledger) -> None:
    rollout = start(ledger)
    t1, t2 = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)

    first = ledger.update_node(
        rollout.id, "gpu-1", step="cordoned", status=L.NodeStatus.IN_PROGRESS, cordoned_by_us=True, now=t1
    )
    second = ledger.update_node(rollout.id, "gpu-1", detail="waiting for the MIG manager", now=t2)

    assert (first.step, first.status, first.cordoned_by_us, first.updated_at) == (
        "cordoned",
        L.NodeStatus.IN_PROGRESS,
        True,
        t1,
    )
    assert (second.step, second.status, second.cordoned_by_us, second.detail, second.updated_at) == (
        "cordoned",
        L.NodeStatus.IN_PROGRESS,
        True,
        "waiting for the MIG manager",
        t2,
    )
    assert second.changed_at is None
    assert ledger.node(rollout.id, "gpu-1") == second
    with pytest.raises(LedgerError, match="unknown node status"):
        ledger.update_node(rollout.id, "gpu-1", status=L.WaveStatus.PASSED, now=t2)
    with pytest.raises(LedgerError, match="has no node"):
        ledger.update_node(rollout.id, "gpu-7", step="x", now=t2)


def test_last_change_counts_done_and_restored(ledger: Ledger) -> None:
    assert ledger.last_change("gpu-0") is None
    first = start(ledger)
    ledger.update_node(first.id, "gpu-0", status=L.NodeStatus.IN_PROGRESS, now=T0)
    assert ledger.last_change("gpu-0") is None

    ledger.update_node(first.id, "gpu-0", status=L.NodeStatus.DONE, now=T0 + timedelta(minutes=5))
    ledger.update_node(first.id, "gpu-0", detail="noted later", now=T0 + timedelta(minutes=30))
    assert ledger.last_change("gpu-0") == T0 + timedelta(minutes=5)

    ledger.update_node(first.id, "gpu-0", status=L.NodeStatus.RESTORING, now=T0 + timedelta(minutes=40))
    assert ledger.last_change("gpu-0") == T0 + timedelta(minutes=5)  # still changed, whatever comes next
    ledger.update_node(first.id, "gpu-0", status=L.NodeStatus.RESTORED, now=T0 + timedelta(minutes=45))
    ledger.set_rollout_status(
        first.id, L.RolloutStatus.ROLLING_BACK, "wave failed", T0 + timedelta(minutes=40)
    )
    ledger.set_rollout_status(first.id, L.RolloutStatus.ROLLED_BACK, "restored", T0 + timedelta(minutes=46))
    assert ledger.last_change("gpu-0") == T0 + timedelta(minutes=45)

    other = L.cluster_key("simulated", "fleet-b")
    second = start(ledger, cluster=other, at=T0 + timedelta(hours=2))
    ledger.update_node(second.id, "gpu-0", status=L.NodeStatus.DONE, now=T0 + timedelta(hours=3))
    assert ledger.last_change("gpu-0") == T0 + timedelta(hours=3)
    assert ledger.last_change("gpu-0", cluster=CLUSTER) == T0 + timedelta(minutes=45)
    assert ledger.last_change("gpu-1") is None


# -- measurements, events, story ---------------------------------------------------------------------------


def test_measurements_keep_nan_none_and_infinity(ledger: Ledger) -> None:
    rollout = start(ledger)
    ledger.add_measurement(rollout.id, 0, "gpu_util", "gpu-0", "Successful", 0.82, "", T0)
    ledger.add_measurement(rollout.id, 0, "gpu_util", "gpu-0", "Inconclusive", math.nan, "no samples", T0)
    ledger.add_measurement(rollout.id, 0, "pending", "", "Error", None, "query failed", T0)
    ledger.add_measurement(rollout.id, 1, "gpu_util", "gpu-1", "Failed", -math.inf, "", T0)

    got = ledger.measurements(rollout.id)
    assert [(m.check, m.node, m.outcome, m.detail) for m in got] == [
        ("gpu_util", "gpu-0", "Successful", ""),
        ("gpu_util", "gpu-0", "Inconclusive", "no samples"),
        ("pending", "", "Error", "query failed"),
        ("gpu_util", "gpu-1", "Failed", ""),
    ]
    assert got[0].value == pytest.approx(0.82)
    assert got[1].value is not None and math.isnan(got[1].value)
    assert got[2].value is None
    assert got[3].value == -math.inf
    assert [m.wave for m in ledger.measurements(rollout.id, wave=1)] == [1]
    with pytest.raises(LedgerError, match="unknown outcome"):
        ledger.add_measurement(rollout.id, 0, "gpu_util", "gpu-0", "Passed", 1.0, "", T0)
    with pytest.raises(LedgerError, match="no wave 5"):
        ledger.add_measurement(rollout.id, 5, "gpu_util", "gpu-0", "Successful", 1.0, "", T0)


def test_events_and_story_tell_the_rollout(ledger: Ledger) -> None:
    rollout = start(ledger)
    ledger.record_snapshot(rollout.id, "gpu-0", {"labels": {MIG: "all-disabled", PLUGIN: None}}, T0)
    ledger.update_node(
        rollout.id, "gpu-0", step="verified", status=L.NodeStatus.DONE, now=T0 + timedelta(minutes=4)
    )
    ledger.record_snapshot(rollout.id, "gpu-1", {MIG: "all-7g.80gb", PLUGIN: "default"}, T0)
    ledger.update_node(
        rollout.id, "gpu-1", step="cordoned", status=L.NodeStatus.IN_PROGRESS, cordoned_by_us=True, now=T0
    )
    ledger.add_event(rollout.id, "cordoned gpu-1 to drain its pods", T0, node="gpu-1", wave=1)
    ledger.set_wave_status(rollout.id, 0, L.WaveStatus.PASSED, T0 + timedelta(minutes=10))
    ledger.add_measurement(rollout.id, 0, "gpu_util", "gpu-0", "Inconclusive", math.nan, "no samples", T0)
    ledger.set_rollout_status(
        rollout.id, L.RolloutStatus.PAUSED, "canary inconclusive", T0 + timedelta(minutes=11)
    )

    events = ledger.events(rollout.id)
    assert events[0].message.startswith("rollout started")
    cordon = next(e for e in events if e.node == "gpu-1")
    assert (cordon.wave, cordon.message, cordon.at) == (1, "cordoned gpu-1 to drain its pods", T0)
    assert [e.at for e in events] == sorted(e.at for e in events)

    story = ledger.story(rollout.id)
    print(story)
    for expected in [
        f"Rollout #{rollout.id} on {CLUSTER}: PAUSED (canary inconclusive)",
        "canary: PASSED [gpu-0]",
        "wave 1: PENDING [gpu-1, gpu-2]",
        "gpu-0 (wave 0): DONE, step verified",
        f"{MIG}: all-disabled -> all-1g.10gb",
        f"{PLUGIN}: (absent) -> default",
        "gpu-1 (wave 1): IN_PROGRESS, step cordoned, cordoned by us",
        f"{MIG}: all-7g.80gb -> all-balanced",
        f"{PLUGIN}: default -> (absent)",
        f"{MIG}: (no snapshot yet) -> all-disabled",
        "gpu_util on gpu-0: Inconclusive, value nan (no samples)",
        "wave 1 node gpu-1: cordoned gpu-1 to drain its pods",
        "rollout RUNNING -> PAUSED: canary inconclusive",
    ]:
        assert expected in story
    with pytest.raises(LedgerError):
        ledger.add_event(999, "nobody", T0)


def test_marks_are_kept_per_cluster_without_a_rollout_newest_first(ledger: Ledger) -> None:
    other = L.cluster_key("simulated", "fleet-b")
    ledger.add_marks(CLUSTER, "run-1", [("standby", "tainted gpu-0"), ("pod moves", "evicted a/p")], T0)
    ledger.add_marks(other, "run-9", [("holds", "held gpu-7")], T0 + timedelta(minutes=30))
    ledger.add_marks(CLUSTER, "run-2", [("node groups", "ranked")], T0 + timedelta(hours=1))
    ledger.add_marks(CLUSTER, "run-3", [], T0 + timedelta(hours=2))  # nothing said: nothing kept

    assert ledger.recent_rollouts() == []
    ours = ledger.recent_marks(CLUSTER)
    assert [(m.run_id, m.kind, m.message) for m in ours] == [
        ("run-2", "node groups", "ranked"),
        ("run-1", "pod moves", "evicted a/p"),  # same time: the later write first
        ("run-1", "standby", "tainted gpu-0"),
    ]
    assert ours[0].at == T0 + timedelta(hours=1) and ours[0].at.tzinfo is not None
    assert [m.cluster for m in ledger.recent_marks()] == [CLUSTER, other, CLUSTER, CLUSTER]
    assert [m.message for m in ledger.recent_marks(limit=1)] == ["ranked"]
    assert [m.message for m in ledger.recent_marks(run_id="run-1")] == ["evicted a/p", "tainted gpu-0"]
    with pytest.raises(LedgerError, match="unknown mark kinds \\['taints'\\]"):
        ledger.add_marks(CLUSTER, "run-4", [("standby", "x"), ("taints", "y")], T0)
    assert len(ledger.recent_marks()) == 4  # nothing of the refused call is kept
    with pytest.raises(LedgerError, match="naive"):
        ledger.add_marks(CLUSTER, "run-4", [("holds", "x")], datetime(2025, 3, 1))


def test_a_step_is_open_from_its_begin_to_its_end_and_one_left_open_becomes_a_mark(ledger: Ledger) -> None:
    other = L.cluster_key("simulated", "fleet-b")
    done = ledger.begin_step(CLUSTER, "run-1", "standby", "taint gpu-0", T0)
    assert [(s.run_id, s.kind, s.intent) for s in ledger.open_steps()] == [
        ("run-1", "standby", "taint gpu-0")
    ]
    assert ledger.recent_marks() == []  # begun is not done
    ledger.end_step(done, ["tainted gpu-0", "untainted gpu-1"], T0 + timedelta(seconds=5))
    assert ledger.open_steps() == []
    assert [(m.run_id, m.kind, m.message) for m in ledger.recent_marks()] == [
        ("run-1", "standby", "untainted gpu-1"),
        ("run-1", "standby", "tainted gpu-0"),
    ]
    quiet = ledger.begin_step(CLUSTER, "run-1", "scale-down", "annotate nothing", T0)
    ledger.end_step(quiet, [], T0)  # nothing changed: nothing told, and the step is closed
    assert len(ledger.recent_marks()) == 2 and ledger.open_steps() == []

    # A process killed inside two steps, on two clusters: each cluster's next run settles only its own.
    ledger.begin_step(CLUSTER, "run-2", "pod moves", "evict a/p from gpu-3", T0 + timedelta(hours=1))
    ledger.begin_step(other, "run-9", "holds", "hold gpu-7", T0 + timedelta(hours=1))
    (settled,) = ledger.settle_abandoned_steps(CLUSTER, "run-3", T0 + timedelta(hours=2))
    assert (settled.run_id, settled.kind) == ("run-2", "pod moves")  # told as the run that began it
    assert settled.message.startswith("ended inside this step (begun 2025-03-01T13:00:00+00:00)")
    assert "it was to evict a/p from gpu-3. Found by run run-3" in settled.message
    assert ledger.recent_marks(CLUSTER, limit=1) == [settled]
    assert [s.cluster for s in ledger.open_steps()] == [other]
    assert ledger.settle_abandoned_steps(CLUSTER, "run-4", T0 + timedelta(hours=3)) == []

    # A slow step whose lock expired: another run settled it, and its own lines are still kept when it ends.
    slow = ledger.begin_step(CLUSTER, "run-6", "holds", "hold gpu-5", T0 + timedelta(hours=4))
    ledger.settle_abandoned_steps(CLUSTER, "run-7", T0 + timedelta(hours=5))
    ledger.end_step(slow, ["held gpu-5"], T0 + timedelta(hours=5, minutes=1))
    told = [m.message for m in ledger.recent_marks(CLUSTER, run_id="run-6")]
    assert told[0] == "held gpu-5" and told[1].startswith("ended inside this step")
    assert [s.cluster for s in ledger.open_steps()] == [other]

    with pytest.raises(LedgerError, match="unknown mark kinds \\['taints'\\]"):
        ledger.begin_step(CLUSTER, "run-5", "taints", "x", T0)
    assert [s.cluster for s in ledger.open_steps()] == [other]


def _rows(db_url: str, table: str) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return int(connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())
    finally:
        engine.dispose()


def test_prune_deletes_ended_history_before_the_cutoff_and_nothing_a_crash_needs(
    ledger: Ledger, db_url: str
) -> None:
    other = L.cluster_key("simulated", "fleet-b")
    old = start(ledger)  # ended long ago: goes, with its waves, nodes, measurements and events
    ledger.record_snapshot(old.id, "gpu-0", {"labels": {MIG: "all-disabled"}}, T0)
    ledger.add_measurement(old.id, 0, "gpu_util", "gpu-0", "Successful", 0.8, "", T0)
    ledger.add_event(old.id, "cordoned gpu-0", T0, node="gpu-0", wave=0)
    ledger.set_rollout_status(old.id, L.RolloutStatus.PROMOTED, "done", T0 + timedelta(minutes=30))
    elsewhere = start(ledger, cluster=other)  # as old, on another cluster: stays
    ledger.set_rollout_status(elsewhere.id, L.RolloutStatus.PROMOTED, "done", T0)
    recent = start(ledger, at=T0 + timedelta(days=2))  # ended after the cutoff: stays
    ledger.set_rollout_status(recent.id, L.RolloutStatus.ROLLING_BACK, "x", T0 + timedelta(days=2))
    ledger.set_rollout_status(recent.id, L.RolloutStatus.ROLLED_BACK, "x", T0 + timedelta(days=2))
    ledger.add_marks(CLUSTER, "run-1", [("standby", "tainted gpu-0"), ("holds", "held gpu-1")], T0)
    ledger.add_marks(CLUSTER, "run-2", [("standby", "tainted gpu-2")], T0 + timedelta(days=2))
    ledger.add_marks(other, "run-9", [("holds", "held gpu-7")], T0)
    ledger.begin_step(CLUSTER, "run-1", "pod moves", "evict a/p", T0)  # a crash's step: never pruned
    assert ledger.acquire_lock(CLUSTER, "run-3", 3600, T0)
    assert _rows(db_url, "slicewise_measurements") == 1 and _rows(db_url, "slicewise_nodes") == 3 * 4

    pruned = ledger.prune(CLUSTER, T0 + timedelta(days=1))

    assert pruned == L.Pruned(rollouts=1, marks=2)
    assert [r.id for r in ledger.recent_rollouts()] == [recent.id, elsewhere.id]
    assert _rows(db_url, "slicewise_measurements") == 0
    assert _rows(db_url, "slicewise_nodes") == 4 + 4 and _rows(db_url, "slicewise_waves") == 3 + 3
    assert all(e.rollout_id != old.id for e in ledger.events(recent.id) + ledger.events(elsewhere.id))
    assert _rows(db_url, "slicewise_events") == len(ledger.events(recent.id)) + len(
        ledger.events(elsewhere.id)
    )
    assert [(m.cluster, m.message) for m in ledger.recent_marks()] == [
        (CLUSTER, "tainted gpu-2"),
        (other, "held gpu-7"),
    ]
    assert [s.intent for s in ledger.open_steps()] == ["evict a/p"]
    assert ledger.lock_holder(CLUSTER, T0) == "run-3"

    # An unfinished rollout is what a crash resumes from, however old: never pruned.
    stuck = start(ledger, at=T0 + timedelta(days=3))
    assert ledger.prune(CLUSTER, T0 + timedelta(days=30)) == L.Pruned(rollouts=1, marks=1)
    assert ledger.unfinished_rollout(CLUSTER) == stuck
    assert ledger.prune(CLUSTER, T0 + timedelta(days=30)) == L.Pruned(rollouts=0, marks=0)
    with pytest.raises(LedgerError, match="naive"):
        ledger.prune(CLUSTER, datetime(2025, 3, 1))


# -- the one-rollout-per-cluster lock ----------------------------------------------------------------------


def test_lock_is_held_refreshed_and_refused(ledger: Ledger) -> None:
    assert ledger.lock_holder(CLUSTER, T0) is None
    assert ledger.acquire_lock(CLUSTER, "run-a", 60, T0)
    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=59)) == "run-a"

    assert ledger.acquire_lock(CLUSTER, "run-a", 60, T0 + timedelta(seconds=50))  # refreshed to 110 s
    assert not ledger.acquire_lock(CLUSTER, "run-b", 60, T0 + timedelta(seconds=100))
    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=100)) == "run-a"
    assert ledger.acquire_lock(L.cluster_key("simulated", "fleet-b"), "run-b", 60, T0)  # another cluster

    ledger.release_lock(CLUSTER, "run-b")  # not the holder: ignored
    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=100)) == "run-a"
    ledger.release_lock(CLUSTER, "run-a")
    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=100)) is None
    assert ledger.acquire_lock(CLUSTER, "run-b", 60, T0 + timedelta(seconds=100))
    with pytest.raises(LedgerError, match="positive"):
        ledger.acquire_lock(CLUSTER, "run-b", 0, T0)


def test_expired_lock_is_taken_over_and_told(ledger: Ledger) -> None:
    assert ledger.acquire_lock(CLUSTER, "crashed-run", 60, T0)
    rollout = start(ledger)

    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=60)) is None
    assert ledger.acquire_lock(CLUSTER, "next-run", 60, T0 + timedelta(seconds=61))

    assert ledger.lock_holder(CLUSTER, T0 + timedelta(seconds=62)) == "next-run"
    assert not ledger.acquire_lock(CLUSTER, "crashed-run", 60, T0 + timedelta(seconds=62))
    told = [e.message for e in ledger.events(rollout.id) if "taken over" in e.message]
    assert told == ["lock taken over by next-run from crashed-run (expired 2025-03-01T12:01:00+00:00)"]


# -- several ledgers, several processes --------------------------------------------------------------------


def test_two_ledgers_on_one_database_see_each_others_writes(db_url: str) -> None:
    with Ledger.open(db_url) as one, Ledger.open(db_url) as two:
        rollout = start(one)
        assert two.unfinished_rollout(CLUSTER) == rollout
        two.update_node(rollout.id, "gpu-0", step="snapshot", status=L.NodeStatus.IN_PROGRESS, now=T0)
        assert one.node(rollout.id, "gpu-0").step == "snapshot"
        assert one.acquire_lock(CLUSTER, "run-a", 60, T0)
        assert not two.acquire_lock(CLUSTER, "run-b", 60, T0)
        with pytest.raises(LedgerError):
            start(two)


CHILD = textwrap.dedent(
    """
    import sys, time
    from datetime import datetime
    from pathlib import Path
    from slicewise.rollout.ledger import Ledger

    url, cluster, holder, now, go = sys.argv[1:6]
    ledger = Ledger.open(url)
    print("ready", flush=True)
    while go and not Path(go).exists():
        time.sleep(0.001)
    at = datetime.fromisoformat(now)
    got = ledger.acquire_lock(cluster, holder, 60, at)
    unfinished = ledger.unfinished_rollout(cluster)
    if unfinished is not None:
        ledger.add_event(unfinished.id, f"{holder} looked in", at)
    print("acquired" if got else "refused", unfinished.id if unfinished else "-", flush=True)
    """
)


def _child(url: str, holder: str, go: Path | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", CHILD, url, CLUSTER, holder, T0.isoformat(), str(go or "")]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_another_process_sees_the_rollout_and_is_locked_out(ledger: Ledger, db_url: str) -> None:
    rollout = start(ledger)
    assert ledger.acquire_lock(CLUSTER, "parent", 60, T0)

    out, err = _child(db_url, "child").communicate(timeout=60)

    assert out.split() == ["ready", "refused", str(rollout.id)], err
    assert "child looked in" in [e.message for e in ledger.events(rollout.id)]
    assert ledger.lock_holder(CLUSTER, T0) == "parent"


def test_racing_processes_get_the_lock_once(ledger: Ledger, db_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    children = [_child(db_url, f"worker-{i}", go) for i in range(4)]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    go.touch()

    results = [child.communicate(timeout=60) for child in children]

    answers = [out.split()[0] for out, _ in results]
    assert sorted(answers) == ["acquired", "refused", "refused", "refused"], [err for _, err in results]
    winner = f"worker-{answers.index('acquired')}"
    assert ledger.lock_holder(CLUSTER, T0) == winner


# -- the property: terminal stays terminal, one unfinished rollout per cluster ------------------------------

CLUSTERS = ("simulated:a", "simulated:b")
operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(CLUSTERS)),
        st.tuples(st.just("status"), st.integers(0, 5), st.sampled_from(L.ROLLOUT_STATUSES)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(operations)
def test_status_changes_never_reopen_or_duplicate_rollouts(ops: list[tuple[str, ...]]) -> None:
    with tempfile.TemporaryDirectory() as folder, Ledger.open(_sqlite_url(Path(folder))) as ledger:
        ids: list[int] = []
        terminal: dict[int, str] = {}
        for step, op in enumerate(ops):
            now = T0 + timedelta(minutes=step)
            if op[0] == "start":
                with contextlib.suppress(LedgerError):  # refused while the cluster has an unfinished one
                    ids.append(ledger.start_rollout(op[1], "run", "/p", [["n"]], {"n": {}}, now).id)
            elif ids:
                rollout_id, status = ids[int(op[1]) % len(ids)], str(op[2])
                before = ledger.rollout(rollout_id).status
                try:
                    ledger.set_rollout_status(rollout_id, status, "property", now)
                except LedgerError:
                    assert status != before and status not in L.TRANSITIONS[before]
                else:
                    assert status == before or status in L.TRANSITIONS[before]
            rollouts = ledger.recent_rollouts(limit=100)
            for rollout in rollouts:
                assert terminal.get(rollout.id, rollout.status) == rollout.status
                if rollout.finished:
                    terminal[rollout.id] = rollout.status
            for cluster in CLUSTERS:
                open_ones = [r for r in rollouts if r.cluster == cluster and not r.finished]
                assert len(open_ones) <= 1
                assert ledger.unfinished_rollout(cluster) == (open_ones[0] if open_ones else None)


# -- where the ledger lives --------------------------------------------------------------------------------


def test_url_from_sqlite_connection() -> None:
    assert url_from_connection("sqlite", "/var/lib/slicewise/ledger.db", None, None, None, None, {}) == (
        "sqlite:////var/lib/slicewise/ledger.db"
    )
    # A URI-style connection (sqlite:////path) leaves the host empty and puts the path in schema.
    assert url_from_connection("sqlite", "", None, "/data/ledger.db", None, None, None) == (
        "sqlite:////data/ledger.db"
    )
    with pytest.raises(LedgerError, match="no database file"):
        url_from_connection("sqlite", None, None, None, None, None, {})


def test_url_from_postgres_connection_quotes_credentials() -> None:
    password = "p@ss:w/rd%?#&="
    url = url_from_connection(
        "postgres", "db.internal", 5433, "slicewise", "ledger@ops", password, {"sslmode": "require"}
    )

    parsed = make_url(url)
    assert url.startswith("postgresql+psycopg2://")
    assert (parsed.username, parsed.password, parsed.host, parsed.port, parsed.database) == (
        "ledger@ops",
        password,
        "db.internal",
        5433,
        "slicewise",
    )
    assert dict(parsed.query) == {"sslmode": "require"}
    assert make_url(url_from_connection("postgresql", "db", None, None, None, None, {})).port is None


def test_url_extra_override_and_unsupported_types() -> None:
    override = {"sqlalchemy_url": "postgresql+psycopg://u:p@h/db"}
    assert (
        url_from_connection("postgres", "ignored", 1, "x", "a", "b", override) == override["sqlalchemy_url"]
    )
    assert url_from_connection("http", None, None, None, None, None, override) == override["sqlalchemy_url"]
    with pytest.raises(LedgerError, match="not supported"):
        url_from_connection("mysql", "h", 3306, "db", "u", "p", {})
    with pytest.raises(LedgerError, match="no host"):
        url_from_connection("postgres", None, None, "db", "u", "p", {})


def test_ledger_url_defaults_to_a_file_in_slicewise_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SLICEWISE_HOME", str(home))
    monkeypatch.delenv("AIRFLOW_CONN_SLICEWISE_LEDGER", raising=False)

    url = ledger_url(load_settings())

    assert url == f"sqlite:///{home / 'ledger.db'}"
    assert home.is_dir()
    with Ledger.open(url) as opened:
        assert opened.recent_rollouts() == []


def test_ledger_url_reads_the_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledgers" / "fleet.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLICEWISE_LEDGER", json.dumps({"conn_type": "sqlite", "host": str(path)})
    )

    assert ledger_url(load_settings()) == f"sqlite:///{path}"
    assert path.parent.is_dir()

    monkeypatch.setenv("AIRFLOW_CONN_OTHER_LEDGER", f"sqlite:///{path}")  # URI form: path in schema
    assert ledger_url(load_settings({"ledger_conn_id": "other_ledger"})) == f"sqlite:///{path}"
