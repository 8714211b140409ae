"""Safe success/failure conditions: a tiny, typed expression language over ``result`` and ``baseline``.

Argo Rollouts writes conditions in expr-lang; Slicewise writes them in a Python-syntax subset checked with
:mod:`ast` and run by a small tree-walking interpreter, so a user's check can never execute code. Allowed:
numbers, the names ``result`` and ``baseline`` (floats), ``+ - * /``, unary minus, comparisons
(``< <= > >= == !=``, chained too), ``and``/``or``/``not``, parentheses and the functions ``abs``, ``min``,
``max`` (two or more arguments) and ``isnan``. Everything else (attributes, subscripts, strings, ``**``,
other names or calls, lambdas, comprehensions) is a :class:`ConditionError` at compile time, so a bad check
fails when checks are loaded, not in the middle of a rollout.

Conditions are also type-checked at compile time: the whole expression must be true/false, comparisons and
arithmetic take numbers, ``and``/``or``/``not`` take truth values (``result and 1`` is rejected).

Division follows IEEE 754 like expr-lang's floats: ``x / 0`` is ``inf`` (or ``-inf``), ``0 / 0`` is NaN, and
every comparison with NaN is false.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass
from typing import Literal

from slicewise.errors import PermanentError

MAX_LENGTH = 500  # a condition is one line a person reads; also bounds the parser's recursion
NAMES = ("result", "baseline")
FUNCTIONS = ("abs", "min", "max", "isnan")

_Kind = Literal["number", "truth"]
_COMPARISONS = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class ConditionError(PermanentError, ValueError):
    """A condition is not in the allowed language, or cannot be evaluated (e.g. no baseline)."""


@dataclass(frozen=True)
class Condition:
    """A compiled, validated condition; :func:`compile_condition` is the only way to make one."""

    text: str
    tree: ast.Expression
    uses_baseline: bool

    def evaluate(self, result: float, baseline: float | None) -> bool:
        """Truth of the condition for ``result`` (and ``baseline``).

        Raises :class:`ConditionError` when the condition uses ``baseline`` and there is none.
        """
        if self.uses_baseline and baseline is None:
            raise ConditionError(f"condition {self.text!r} uses baseline, but there is no baseline value")
        names = {"result": float(result), "baseline": math.nan if baseline is None else float(baseline)}
        value = _evaluate(self.tree.body, names)
        assert isinstance(value, bool)  # guaranteed by the compile-time type check
        return value


def compile_condition(text: str) -> Condition:
    """Parse and validate ``text``; raises :class:`ConditionError` naming the first disallowed construct."""
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("a condition must be a non-empty string")
    return _compile(text)


@functools.lru_cache(maxsize=256)  # checks are re-loaded per task; compiling once per text is enough
def _compile(text: str) -> Condition:
    if len(text) > MAX_LENGTH:
        raise ConditionError(f"condition is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ConditionError(f"condition {text!r} is not a valid expression: {exc}") from exc
    try:
        kind: _Kind = _check(tree.body)
    except RecursionError as exc:
        raise ConditionError(f"condition {text!r} is nested too deeply") from exc
    except ConditionError as exc:
        raise ConditionError(f"condition {text!r}: {exc}") from exc
    if kind != "truth":
        raise ConditionError(f"condition {text!r} is a number, not true/false (compare it with something)")
    uses_baseline = any(isinstance(n, ast.Name) and n.id == "baseline" for n in ast.walk(tree))
    return Condition(text=text, tree=tree, uses_baseline=uses_baseline)


def _check(node: ast.AST) -> _Kind:
    """Validate ``node`` and return what it evaluates to."""
    if isinstance(node, ast.Constant):
        # bool is an int subclass: True/False are not part of the language.
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ConditionError(f"only numbers are allowed as constants, not {node.value!r}")
        try:
            float(node.value)
        except OverflowError as exc:
            raise ConditionError("number too large") from exc
        return "number"
    if isinstance(node, ast.Name):
        if node.id not in NAMES:
            raise ConditionError(f"unknown name {node.id!r} (allowed: {', '.join(NAMES)})")
        return "number"
    if isinstance(node, ast.UnaryOp):
        inner = _check(node.operand)
        if isinstance(node.op, ast.USub | ast.UAdd):
            _expect(inner, "number", "unary minus")
            return "number"
        if isinstance(node.op, ast.Not):
            _expect(inner, "truth", "not")
            return "truth"
        raise ConditionError(f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _ARITHMETIC):
            raise ConditionError(f"operator {type(node.op).__name__} is not allowed (only + - * /)")
        _expect(_check(node.left), "number", "arithmetic")
        _expect(_check(node.right), "number", "arithmetic")
        return "number"
    if isinstance(node, ast.BoolOp):
        for operand in node.values:
            _expect(_check(operand), "truth", "and/or")
        return "truth"
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARISONS:
                raise ConditionError(f"comparison {type(op).__name__} is not allowed")
        for operand in (node.left, *node.comparators):
            _expect(_check(operand), "number", "comparison")
        return "truth"
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ConditionError(f"only the functions {', '.join(FUNCTIONS)} may be called")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ConditionError(f"{node.func.id}() takes plain arguments only")
        wanted = "2 or more" if node.func.id in ("min", "max") else "1"
        if (wanted == "1") != (len(node.args) == 1) or (wanted != "1" and len(node.args) < 2):
            raise ConditionError(f"{node.func.id}() takes {wanted} argument(s), got {len(node.args)}")
        for arg in node.args:
            _expect(_check(arg), "number", f"{node.func.id}()")
        return "truth" if node.func.id == "isnan" else "number"
    raise ConditionError(f"{type(node).__name__} is not allowed")


def _expect(kind: _Kind, wanted: _Kind, where: str) -> None:
    if kind != wanted:
        raise ConditionError(f"{where} needs a {wanted}, got a {kind}")


def _evaluate(node: ast.AST, names: dict[str, float]) -> float | bool:
    """Interpret a validated tree (only the node types :func:`_check` accepts reach here)."""
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)
        return float(node.value)
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, names)
        if isinstance(node.op, ast.Not):
            return not operand
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        return _arithmetic(node.op, float(_evaluate(node.left, names)), float(_evaluate(node.right, names)))
    if isinstance(node, ast.BoolOp):
        # Short-circuit like Python and expr-lang.
        if isinstance(node.op, ast.And):
            return all(_evaluate(v, names) for v in node.values)
        return any(_evaluate(v, names) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, names)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(comparator, names)
            if not _COMPARISONS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [float(_evaluate(a, names)) for a in node.args]
        if node.func.id == "isnan":
            return math.isnan(args[0])
        if node.func.id == "abs":
            return abs(args[0])
        # NaN-propagating, unlike Python's min/max whose answer depends on argument order.
        if any(math.isnan(a) for a in args):
            return math.nan
        return min(args) if node.func.id == "min" else max(args)
    raise AssertionError(f"unvalidated node {type(node).__name__}")


def _arithmetic(op: ast.operator, a: float, b: float) -> float:
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if b == 0:  # IEEE 754, as expr-lang's float division
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b
