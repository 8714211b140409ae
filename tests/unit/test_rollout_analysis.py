"""Analysis verdicts with Argo Rollouts semantics: measurements, metric limits, worst-of, the published rule."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slicewise.rollout.analysis import (
    PHASE_ORDER,
    POOL,
    Measurement,
    Outcome,
    measure,
    metric_outcome,
    tally,
    verdict,
    worst,
)
from slicewise.rollout.checks import Check, load_checks
from slicewise.settings import load_settings

S, F, INC, E = Outcome.SUCCESSFUL, Outcome.FAILED, Outcome.INCONCLUSIVE, Outcome.ERROR


def check(**overrides: Any) -> Check:
    values: dict[str, Any] = {
        "name": "c",
        "query": 'up{node="{node}"}',
        "success": None,
        "failure": None,
        "baseline_query": None,
        "on_empty": INC,
        "on_nan": E,
        "count": 3,
        "interval_s": 60.0,
        **overrides,
    }
    return Check(**values)


# --- measure(): one answer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [(1.0, S), (0.0, F)])
def test_only_a_success_condition_fails_when_it_does_not_hold(value: float, expected: Outcome) -> None:
    assert measure(check(success="result > 0.5"), value, None).outcome is expected


@pytest.mark.parametrize(("value", "expected"), [(1.0, F), (0.0, S)])
def test_only_a_failure_condition_succeeds_when_it_does_not_hold(value: float, expected: Outcome) -> None:
    assert measure(check(failure="result > 0.5"), value, None).outcome is expected


@pytest.mark.parametrize(("value", "expected"), [(0.9, S), (0.1, F), (0.5, INC)])
def test_both_conditions_give_successful_failed_or_inconclusive(value: float, expected: Outcome) -> None:
    c = check(success="result >= 0.8", failure="result <= 0.2")
    m = measure(c, value, None, node="n1")
    assert (m.outcome, m.node, m.value) == (expected, "n1", value)
    if expected is INC:
        assert "neither" in m.detail


def test_failure_wins_when_both_conditions_hold() -> None:
    assert measure(check(success="result > 0", failure="result > 0.5"), 1.0, None).outcome is F


def test_no_conditions_is_successful_as_in_argo_code() -> None:
    assert measure(check(), 123.0, None).outcome is S


@pytest.mark.parametrize("choice", list(Outcome))
def test_empty_and_nan_take_the_outcome_each_check_names(choice: Outcome) -> None:
    c = check(success="result > 0", on_empty=choice, on_nan=choice)
    empty, nan = measure(c, None, None), measure(c, math.nan, None)
    assert (empty.outcome, empty.value) == (choice, None)
    assert nan.outcome is choice and nan.value is not None and math.isnan(nan.value)
    assert "empty" in empty.detail and "NaN" in nan.detail


def test_a_query_exception_is_an_error_with_its_reason_on_one_line() -> None:
    m = measure(check(success="result > 0"), RuntimeError("connection\nrefused"), None, node="n1")
    assert (m.outcome, m.value) == (E, None)
    assert m.detail == "query failed: connection refused"


def test_a_condition_using_a_missing_baseline_is_an_error() -> None:
    c = check(success="result >= baseline", baseline_query='up{node="{node}"}')
    m = measure(c, 1.0, None)
    assert m.outcome is E
    assert "no baseline" in m.detail


def test_measurement_round_trips_through_json() -> None:
    m = measure(check(success="result > 0"), 1.5, None, node="n1")
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m


# --- the published rule: roll back if utilisation drops by more than 10% ----------------------------------


@pytest.fixture(scope="module")
def utilisation() -> Check:
    checks = {c.name: c for c in load_checks(load_settings(environ={}))}
    return checks["utilisation-drop"]


@pytest.mark.parametrize(
    ("drop", "expected"),
    [(0.101, F), (0.099, S), (0.10, S), (0.5, F), (0.0, S), (-0.2, S)],  # exactly 10% is not "more than"
)
def test_utilisation_rule_trips_above_ten_percent(utilisation: Check, drop: float, expected: Outcome) -> None:
    baseline = 0.5
    assert measure(utilisation, baseline * (1 - drop), baseline).outcome is expected


@pytest.mark.parametrize("now", [0.0, 0.3, 1.0])
def test_utilisation_rule_passes_for_an_idle_baseline(utilisation: Check, now: float) -> None:
    assert measure(utilisation, now, 0.0).outcome is S


def test_utilisation_without_data_needs_a_person(utilisation: Check) -> None:
    assert measure(utilisation, None, 0.5).outcome is INC
    assert measure(utilisation, math.nan, 0.5).outcome is INC
    assert measure(utilisation, 0.5, None).outcome is E  # no baseline: cannot judge the rule


# --- metric_outcome(): Argo's limits ---------------------------------------------------------------------


def test_failure_limit_is_strict() -> None:
    c = check(count=10, failure_limit=3)
    assert metric_outcome(c, [F, F, F]) is None
    assert metric_outcome(c, [F, F, F, F]) is F


def test_a_limit_exceeded_ends_the_metric_early_and_later_measurements_are_ignored() -> None:
    c = check(count=3)
    assert metric_outcome(c, [F]) is F
    assert metric_outcome(c, [F, S, S, S]) is F
    assert tally(c, [F, S, S, S]).used == 1
    assert metric_outcome(c, [E] * 5 + [S] * 3) is E  # the errors ended it before the successes


def test_inconclusive_limit_is_strict() -> None:
    c = check(count=5, inconclusive_limit=1)
    assert metric_outcome(c, [INC]) is None
    assert metric_outcome(c, [INC, S, INC]) is INC


def test_failed_is_assessed_before_inconclusive_and_error() -> None:
    assert metric_outcome(check(), [INC]) is INC
    assert metric_outcome(check(), [F]) is F


def test_consecutive_errors_over_the_limit_are_an_error_and_any_other_outcome_resets_them() -> None:
    c = check(count=3)  # consecutive_error_limit defaults to 4, as in Argo
    assert c.consecutive_error_limit == 4
    assert metric_outcome(c, [E] * 4) is None
    assert metric_outcome(c, [E] * 5) is E
    assert metric_outcome(c, [E] * 4 + [S] + [E] * 4 + [S]) is None
    assert metric_outcome(c, [E] * 4 + [S] + [E] * 4 + [S, S]) is S
    lenient = check(count=5, failure_limit=5)
    assert metric_outcome(lenient, [E] * 4 + [F] + [E] * 4) is None  # a failure also resets the streak


def test_errors_do_not_count_towards_count() -> None:
    c = check(count=3)
    assert metric_outcome(c, [S, E, S]) is None
    assert metric_outcome(c, [S, E, S, S]) is S


def test_count_reached_within_the_limits_is_successful() -> None:
    assert metric_outcome(check(count=3, failure_limit=1), [F, S, S]) is S
    assert metric_outcome(check(count=2), [S]) is None
    assert metric_outcome(check(count=2), []) is None


outcomes_st = st.lists(st.sampled_from(list(Outcome)), max_size=30)


@given(
    outcomes=outcomes_st,
    count=st.integers(1, 10),
    failure_limit=st.integers(0, 5),
    inconclusive_limit=st.integers(0, 5),
    error_limit=st.integers(0, 5),
)
def test_never_successful_with_more_failures_than_the_limit(
    outcomes: list[Outcome], count: int, failure_limit: int, inconclusive_limit: int, error_limit: int
) -> None:
    c = check(
        count=count,
        failure_limit=failure_limit,
        inconclusive_limit=inconclusive_limit,
        consecutive_error_limit=error_limit,
    )
    t = tally(c, outcomes)
    considered = outcomes[: t.used]
    if considered.count(F) > failure_limit:
        assert t.outcome is F
    if outcomes.count(F) > failure_limit and sum(o is not E for o in outcomes) <= count:
        # Every failure was taken before count was reached: some limit ended the metric, never as Successful.
        assert t.outcome not in (S, None)


@given(st.lists(st.sampled_from(list(Outcome)), min_size=1, max_size=20), st.randoms())
def test_worst_is_the_maximum_in_the_phase_order(outcomes: list[Outcome], rnd: Any) -> None:
    w = worst(outcomes)
    assert w in outcomes
    assert all(PHASE_ORDER.index(o) <= PHASE_ORDER.index(w) for o in outcomes)
    shuffled = list(outcomes)
    rnd.shuffle(shuffled)
    assert worst(shuffled) is w


def test_phase_order_is_argos() -> None:
    assert PHASE_ORDER == (S, INC, E, F)
    assert worst([S, INC]) is INC
    assert worst([INC, E]) is E
    assert worst([E, F, S]) is F
    assert worst([]) is S


# --- verdict(): a wave ----------------------------------------------------------------------------------


def m(name: str, node: str, outcome: Outcome, detail: str = "") -> Measurement:
    return Measurement(name, node, outcome, 1.0, detail or f"{outcome} measurement")


def test_verdict_is_the_worst_metric_with_one_readable_reason_per_non_successful_metric() -> None:
    util = check(name="util", count=2)
    pool = check(name="pending", query="sum(x)", scope="pool", count=1)
    result = verdict(
        [util, pool],
        [
            m("util", "n1", S),
            m("util", "n2", F, "result 0.3, baseline 0.5: failure condition `result < 0.45` holds"),
            m("util", "n1", S),
            m("pending", POOL, S),
        ],
    )
    assert result.outcome is F
    assert result.per_metric == {("pending", POOL): S, ("util", "n1"): S, ("util", "n2"): F}
    assert result.reasons == (
        "util on n2: Failed (1 failed > failure_limit 0); "
        "last: result 0.3, baseline 0.5: failure condition `result < 0.45` holds",
    )


def test_dry_run_checks_are_reported_but_never_decide() -> None:
    real = check(name="real", count=1)
    trial = check(name="trial", count=1, dry_run=True)
    result = verdict([real, trial], [m("real", "n1", S), m("trial", "n1", F, "too hot")])
    assert result.outcome is S
    assert result.reasons == ()
    assert result.per_metric == {("real", "n1"): S}
    assert result.dry_run == {("trial", "n1"): F}
    assert result.dry_run_reasons == ("trial on n1: Failed (1 failed > failure_limit 0); last: too hot",)


def test_a_metric_still_running_at_the_end_is_inconclusive_and_says_so() -> None:
    c = check(name="util", count=3)
    result = verdict([c], [m("util", "n1", S), m("util", "n1", E, "query failed: timeout")])
    assert result.outcome is INC
    (reason,) = result.reasons
    assert reason.startswith("util on n1: Inconclusive: analysis ended before count was reached")
    assert "1 of 3 measurement(s), 1 error(s)" in reason and "query failed: timeout" in reason


def test_expected_metrics_without_measurements_are_inconclusive_not_a_silent_pass() -> None:
    node_check = check(name="util", count=1)
    pool_check = check(name="pending", query="sum(x)", scope="pool", count=1)
    result = verdict([node_check, pool_check], [m("util", "n1", S)], nodes=["n1", "n2"])
    assert result.outcome is INC
    assert result.per_metric == {("pending", POOL): INC, ("util", "n1"): S, ("util", "n2"): INC}
    assert "util on n2: Inconclusive: no measurement was taken" in result.reasons
    assert "pending (pool): Inconclusive: no measurement was taken" in result.reasons
    # Without the node list, a check never measured at all is still reported.
    assert verdict([node_check, pool_check], [m("util", "n1", S)]).outcome is INC


def test_error_metric_reason_quotes_the_last_error() -> None:
    c = check(name="xid", count=1, consecutive_error_limit=0)
    result = verdict([c], [m("xid", "n1", E, "query failed: HTTP 400: parse error")])
    assert result.outcome is E
    assert result.reasons == (
        "xid on n1: Error (1 consecutive errors > consecutive_error_limit 0); "
        "last: query failed: HTTP 400: parse error",
    )


def test_verdict_of_no_checks_is_successful_and_unknown_checks_are_refused() -> None:
    assert verdict([], []).outcome is S
    with pytest.raises(ValueError, match="unknown check 'ghost'"):
        verdict([check()], [m("ghost", "n1", S)])
