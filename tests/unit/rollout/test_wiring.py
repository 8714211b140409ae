"""The rollout contexts the DAG and ``slicewise rollout`` build: a DAG run takes over a lock an earlier run of the
DAG left (they run one at a time); a person's command never takes over a lock, since the run holding it may be
alive and mid-step."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slicewise.planning.types import FleetPlan
from slicewise.rollout import engine, wiring
from slicewise.settings import SettingsError, load_settings

NOTHING = FleetPlan("packing", "model", True, 60, ())


def test_a_persons_command_never_takes_over_the_lock_a_dag_run_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    settings = load_settings()
    first = wiring.rollouts(settings, "manual__1")
    by_hand = wiring.rollouts(settings, "", holder_id="slicewise-cli/fix")
    later = wiring.rollouts(settings, "manual__2")
    try:
        assert (first.run_id, first.takeover_prefix) == (
            "gpu_partition_rollout/manual__1",
            "gpu_partition_rollout/",
        )
        assert (by_hand.run_id, by_hand.takeover_prefix) == ("slicewise-cli/fix", "")
        taken_at = first.clock.now()
        assert first.ledger.acquire_lock(first.cluster, first.run_id, 3600, taken_at)

        expires = (taken_at + timedelta(hours=1)).isoformat(timespec="seconds")
        with pytest.raises(engine.RolloutBusy, match="locked by gpu_partition_rollout/manual__1") as refused:
            engine.start(by_hand, NOTHING, "plan.json")
        assert f"until {expires}" in str(refused.value)  # when a person may try again
        assert str(refused.value).endswith("one rollout at a time")
        assert first.ledger.lock_holder(first.cluster, first.clock.now()) == first.run_id

        # The DAG's next run does take it over: the DAG runs one at a time, so the first run has ended.
        assert engine.start(later, NOTHING, "plan.json")["action"] == "nothing to change"
        assert later.ledger.lock_holder(later.cluster, later.clock.now()) is None  # released when done
    finally:
        for ctx in (first, by_hand, later):
            ctx.ledger.close()


def test_each_start_prunes_the_history_older_than_the_retention_and_keeps_it_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    for days, kept in ((90, ["last month"]), (0, ["last month", "last year"])):
        settings = load_settings({"ledger_retention_days": days})
        ctx = wiring.rollouts(settings, f"manual__{days}")
        try:
            now = ctx.clock.now()
            for message, age in (("last year", timedelta(days=365)), ("last month", timedelta(days=30))):
                ctx.ledger.add_marks(ctx.cluster, "older-run", [("standby", message)], now - age)
            assert engine.start(ctx, NOTHING, "plan.json")["action"] == "nothing to change"
            assert [m.message for m in ctx.ledger.recent_marks(ctx.cluster)] == kept
            ctx.ledger.prune(ctx.cluster, now)  # a clean ledger for the next setting
        finally:
            ctx.ledger.close()


def test_the_retention_never_undercuts_the_dwell_and_refuses_a_negative_value() -> None:
    assert wiring.ledger_history_s(load_settings({"ledger_retention_days": 0})) == 0
    assert wiring.ledger_history_s(load_settings({"ledger_retention_days": 2})) == 2 * 86400
    dwell = load_settings({"ledger_retention_days": 0.01, "planner_dwell_hours": 6})
    assert wiring.ledger_history_s(dwell) == 6 * 3600
    with pytest.raises(SettingsError, match=r"ledger_retention_days=-1\.0"):
        wiring.ledger_history_s(load_settings({"ledger_retention_days": -1}))


def test_a_lock_released_before_it_is_told_says_to_try_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    ctx = wiring.rollouts(load_settings(), "manual__1")
    try:
        now = ctx.clock.now()
        assert ctx.ledger.acquire_lock(ctx.cluster, "someone", 60, now)
        assert "locked by someone until" in str(engine.busy(ctx, now, "stop that run first"))
        ctx.ledger.release_lock(ctx.cluster, "someone")
        assert "a moment ago; try again" in str(engine.busy(ctx, now, "stop that run first"))
    finally:
        ctx.ledger.close()
