"""Safe conditions: the allowed language evaluates like Python/expr-lang, everything else is refused early."""

from __future__ import annotations

import contextlib
import math

import pytest

from slicewise.rollout.conditions import ConditionError, compile_condition


@pytest.mark.parametrize(
    ("text", "result", "baseline", "expected"),
    [
        ("result > 0", 1.0, None, True),
        ("result > 0", 0.0, None, False),
        ("result >= 0", 0.0, None, True),
        ("result < 1", 1.0, None, False),
        ("result <= 1", 1.0, None, True),
        ("result == 2", 2.0, None, True),
        ("result != 2", 2.0, None, False),
        ("result >= baseline * (1 - 0.1)", 0.45, 0.5, True),
        ("result >= baseline * (1 - 0.1)", 0.44, 0.5, False),
        ("result <= baseline + 2", 5.0, 3.0, True),
        ("result <= baseline + 2", 5.1, 3.0, False),
        ("0 < result < 1", 0.5, None, True),  # chained comparison
        ("0 < result < 1", 1.5, None, False),
        ("abs(result - baseline) <= 0.1", 0.95, 1.0, True),
        ("min(result, baseline) > 0", 0.0, 1.0, False),
        ("max(result, baseline, 3) == 3", 1.0, 2.0, True),
        ("isnan(result)", math.nan, None, True),
        ("not isnan(result)", 1.0, None, True),
        ("-result < 0", 1.0, None, True),
        ("result / 2 == 0.25", 0.5, None, True),
    ],
)
def test_conditions_evaluate_like_python(
    text: str, result: float, baseline: float | None, expected: bool
) -> None:
    assert compile_condition(text).evaluate(result, baseline) is expected


@pytest.mark.parametrize("a", [True, False])
@pytest.mark.parametrize("b", [True, False])
def test_truth_tables_of_and_or_not(a: bool, b: bool) -> None:
    # result encodes a (result > 0), baseline encodes b (baseline > 0).
    result, baseline = (1.0 if a else -1.0), (1.0 if b else -1.0)
    assert compile_condition("result > 0 and baseline > 0").evaluate(result, baseline) is (a and b)
    assert compile_condition("result > 0 or baseline > 0").evaluate(result, baseline) is (a or b)
    assert compile_condition("not result > 0").evaluate(result, baseline) is (not a)


def test_precedence_follows_python() -> None:
    # * before +, and before or, not binds to its comparison only, unary minus before *.
    assert compile_condition("result == 1 + 2 * 3").evaluate(7.0, None)
    assert compile_condition("result == (1 + 2) * 3").evaluate(9.0, None)
    assert compile_condition("result > 5 or result > 0 and result < 0").evaluate(6.0, None)
    assert not compile_condition("(result > 5 or result > 0) and result < 0").evaluate(6.0, None)
    assert compile_condition("not result > 5 and result > 0").evaluate(1.0, None)
    assert compile_condition("-2 * result == -4").evaluate(2.0, None)
    assert compile_condition("result - 1 - 1 == 0").evaluate(2.0, None)  # left-associative
    assert compile_condition("result / 2 / 2 == 1").evaluate(4.0, None)


def test_division_by_zero_follows_ieee_like_expr_lang() -> None:
    assert compile_condition("result / baseline > 1000").evaluate(1.0, 0.0)  # inf
    assert compile_condition("result / baseline < -1000").evaluate(-1.0, 0.0)  # -inf
    assert compile_condition("isnan(result / baseline)").evaluate(0.0, 0.0)
    assert not compile_condition("result / baseline >= 0.9").evaluate(0.0, 0.0)  # NaN compares false


def test_nan_compares_false_and_min_max_propagate_it() -> None:
    assert not compile_condition("result >= 0").evaluate(math.nan, None)
    assert not compile_condition("result < 0").evaluate(math.nan, None)
    assert compile_condition("isnan(min(result, 1))").evaluate(math.nan, None)
    assert compile_condition("isnan(max(1, result))").evaluate(math.nan, None)


def test_uses_baseline_is_known_and_a_missing_baseline_is_an_error() -> None:
    assert not compile_condition("result > 0").uses_baseline
    condition = compile_condition("result >= baseline * 0.9")
    assert condition.uses_baseline
    with pytest.raises(ConditionError, match="no baseline"):
        condition.evaluate(1.0, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("result.real > 0", "Attribute"),
        ("result.__class__ == 1", "Attribute"),
        ("__import__('os') == 0", "only the functions"),
        ("open(1) == 1", "only the functions"),
        ("round(result) == 1", "only the functions"),
        ("abs.__call__(result) > 0", "only the functions"),
        ("[result][0] > 0", "not allowed"),
        ("result[0] > 0", "Subscript"),
        ("(lambda: 1)() == 1", "only the functions"),
        ("(lambda x: x) == 1", "Lambda"),
        ("[x for x in (1, 2)] == 1", "ListComp"),
        ("sum(x for x in (1,)) > 0", "only the functions"),
        ("__builtins__ == 1", "unknown name"),
        ("__class__ > 0", "unknown name"),
        ("now > 0", "unknown name"),
        ("result ** 2 > 0", "Pow"),
        ("9 ** 9 ** 9 > 0", "Pow"),
        ("result // 2 > 0", "FloorDiv"),
        ("result % 2 == 0", "Mod"),
        ("result << 2 > 0", "LShift"),
        ("result > 'a'", "only numbers"),
        ("'a' == 'a'", "only numbers"),
        ("result > True", "only numbers"),
        ("result in (1, 2)", "comparison In"),
        ("result is None", "comparison Is"),
        ("result", "is a number, not true/false"),
        ("result + 1", "is a number, not true/false"),
        ("result > 0 and 1", "needs a truth"),
        ("not result", "needs a truth"),
        ("(result > 0) + 1 > 0", "needs a number"),
        ("abs(result > 0) > 0", "needs a number"),
        ("abs(result, 1) > 0", "takes 1 argument"),
        ("max(result) > 0", "takes 2 or more"),
        ("isnan(x=result)", "plain arguments"),
        ("max(*(1, 2)) > 0", "plain arguments"),
        ("(y := 1) > 0", "NamedExpr"),
        ("1 if result else 0 > 0", "IfExp"),
        ("result > 1" + "0" * 400, "number too large"),
        ("result > 0; import os", "not a valid expression"),
        ("result >", "not a valid expression"),
        ("", "non-empty"),
        ("(" * 300 + "result > 0" + ")" * 300, "longer than"),
        ("f'{result}' == 1", "JoinedStr"),
    ],
)
def test_anything_outside_the_language_is_refused_at_compile_time(text: str, problem: str) -> None:
    with pytest.raises(ConditionError, match=problem.replace("(", r"\(").replace("*", r"\*")):
        compile_condition(text)


def test_deep_nesting_within_the_length_limit_is_refused_not_crashing() -> None:
    text = "-" * 480 + "result > 0"
    # Either accepted (it is valid) or refused with a ConditionError: never a RecursionError.
    with contextlib.suppress(ConditionError):
        assert compile_condition(text).evaluate(1.0, None)
