"""The rollout DAG's steps outside Airflow: mode gates, the plan's inputs, and the watcher's verdict."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from slicewise.errors import NotYet, PermanentError
from slicewise.rollout import steps
from slicewise.rollout.ledger.tables import RolloutStatus
from slicewise.settings import load_settings


def run_in(tmp_path: Path, mode: str) -> steps.RolloutRun:
    settings = load_settings({"storage_root": tmp_path.as_uri()}, environ={})
    return steps.RolloutRun(settings, "scheduled__2026-12-01T10:45:00+00:00", mode)


def test_rollout_tasks_skip_in_recommend_mode_and_the_plan_is_published_only_there(tmp_path: Path) -> None:
    recommend, apply = run_in(tmp_path, steps.RECOMMEND), run_in(tmp_path, steps.APPLY)
    with pytest.raises(NotYet, match="recommend mode"):
        steps.start(recommend, {"paths": {"plan.json": "unused"}})
    with pytest.raises(NotYet, match="recommend mode"):
        steps.report(recommend, None)
    assert steps.rollback(recommend, {"rollout_id": 7}) == {"rolled_back": False, "rollout_id": 7}
    now = datetime(2026, 12, 1, 10, 45, tzinfo=UTC)
    extra = steps.publish_plan(recommend, {"counts": {"keep": 3}}, now)
    assert extra == {"mode": "recommend", "run_id": recommend.run_id, "counts": {"keep": 3}}
    with pytest.raises(NotYet, match="apply mode"):
        steps.publish_plan(apply, {"counts": {}}, now)


def test_the_plan_reads_what_its_upstream_tasks_wrote_and_refuses_two_runs_folders(tmp_path: Path) -> None:
    run = run_in(tmp_path, steps.RECOMMEND)
    with pytest.raises(PermanentError, match="belong to different runs"):
        steps.plan(
            run,
            str(tmp_path / "plans/a/forecasts.json"),
            str(tmp_path / "plans/b/observed.json"),
            datetime.now(UTC),
        )


def test_a_malformed_node_group_setting_fails_the_plan_before_it_reads_anything(tmp_path: Path) -> None:
    run = run_in(tmp_path, steps.RECOMMEND)
    broken = steps.RolloutRun(
        run.settings.with_overrides({"autoscaler_node_groups": '[{"pattern": "a("}]'}), "r", ""
    )
    folder = tmp_path / "plans/a"  # holds nothing: reading it would fail otherwise
    with pytest.raises(PermanentError, match=r"autoscaler_node_groups\[0\]: pattern 'a\(' is not a regular"):
        steps.plan(broken, str(folder / "forecasts.json"), str(folder / "observed.json"), datetime.now(UTC))


def test_the_watcher_fails_the_run_unless_the_rollout_was_promoted() -> None:
    steps.check_promoted({"outcome": "promoted", "reason": ""})
    steps.check_promoted({"outcome": "nothing to change", "reason": ""})
    for outcome in ("rolled_back", "failed", "not started", "rolling_back", "paused", "running"):
        with pytest.raises(PermanentError, match=f"rollout {outcome}: wave 1 failed its analysis"):
            steps.check_promoted({"outcome": outcome, "reason": "wave 1 failed its analysis"})


def test_each_parse_of_the_dag_gets_its_own_params_so_a_runs_mode_never_leaks_into_the_next() -> None:
    from slicewise.rollout.params import rollout_params

    first, second = rollout_params(), rollout_params()
    assert first["mode"].resolve("apply") == "apply"  # Airflow keeps the resolved value on the Param
    assert first["mode"].value == "apply"
    assert second["mode"].value is None  # the next DAG object still defaults to the rollout_mode setting


def test_without_the_teardowns_answer_the_report_reads_this_runs_rollout_from_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rollback (the teardown) gave up or never ran: report_rollout gets None and must still tell the truth.
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    apply = run_in(tmp_path, steps.APPLY)
    extra = steps.report(apply, None)
    assert extra["outcome"] == "not started"
    with pytest.raises(PermanentError, match="rollout not started"):
        steps.check_promoted(extra)
    ctx = apply.rollouts()
    now = datetime(2026, 12, 1, 10, 46, tzinfo=UTC)
    other = ctx.ledger.start_rollout("another-cluster", ctx.run_id, "/p", [["n"]], {"n": {}}, now)
    ours = ctx.ledger.start_rollout(ctx.cluster, ctx.run_id, "/p", [["sim-h100-0"]], {"sim-h100-0": {}}, now)
    ctx.ledger.set_rollout_status(ours.id, RolloutStatus.ROLLING_BACK, "wave 0 failed its analysis", now)
    extra = steps.report(apply, None)
    assert (extra["rollout_id"], extra["outcome"]) == (ours.id, "rolling_back")
    assert other.id != ours.id
    with pytest.raises(PermanentError, match="rollout rolling_back: wave 0 failed its analysis"):
        steps.check_promoted(extra)  # the nodes were not restored: the run must fail
