"""Always-on helpers: a safe calculator and the current time in any time zone.

The calculator parses the expression with ``ast`` and walks the tree itself: only
numbers, arithmetic operators, parentheses and a short list of math functions and
constants exist in its world, so there is nothing to escape from (no ``eval``, no
names, no attributes). Each step is bounded before it runs: the input length, the
nesting depth, the number of nodes, and the size of every integer a step would
produce (``9**9**9`` is refused from its estimated size, never computed).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Annotated, Any

from pydantic import Field

from bot.timezones import UnknownTimeZone, time_zone

from .base import Connector, ToolError, action

MAX_EXPRESSION_CHARS = 1000
MAX_DEPTH = 200
MAX_NODES = 400
# Integers past this many bits (about 1,200 decimal digits) are refused.
MAX_INT_BITS = 4000
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 100

Number = int | float

_CONSTANTS: dict[str, Number] = {
    "pi": math.pi,
    "e": math.e,
    "tau": math.tau,
    "inf": math.inf,
}


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


def _round(x: Number, digits: int | None = None) -> Number:
    if digits is None:
        return round(x)
    if not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS:
        raise ToolError(f"round(): the digits must be a whole number up to {MAX_ROUND_DIGITS}")
    return round(x, digits)


def _factorial(n: Number) -> int:
    if not isinstance(n, int) or n < 0:
        raise ToolError("factorial() needs a non-negative whole number")
    if n > MAX_FACTORIAL:
        raise ToolError(f"factorial() is limited to n <= {MAX_FACTORIAL}")
    return math.factorial(n)


def _min(*values: Number) -> Number:
    if not values:
        raise ToolError("min() needs at least one argument")
    return min(values)


def _max(*values: Number) -> Number:
    if not values:
        raise ToolError("max() needs at least one argument")
    return max(values)


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "min": _min,
    "max": _max,
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp,
    "log": _log,
    "ln": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "factorial": _factorial,
    "gcd": math.gcd,
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_SYMBOLS = {"×": "*", "÷": "/", "−": "-", "，": ","}


class _Evaluator:
    """Evaluates an already-checked expression tree, bounding every integer it makes."""

    def eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ToolError(f"only numbers are allowed, not {value!r}")
            return value
        if isinstance(node, ast.Name):
            if node.id not in _CONSTANTS:
                raise ToolError(_unknown_name(node.id))
            return _CONSTANTS[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.eval(node.operand)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._binary(node.op, self.eval(node.left), self.eval(node.right))
        if isinstance(node, ast.Call):
            return self._call(node)
        raise ToolError(_unsupported(node))

    def _binary(self, op: ast.operator, left: Number, right: Number) -> Number:
        if isinstance(op, ast.Pow):
            _check_power(left, right)
        elif isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            _check_product(left, right)
        result = _BINARY[type(op)](left, right)
        return _checked(result)

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name):
            raise ToolError("only plain function calls such as sqrt(2) are allowed")
        if node.func.id not in _FUNCTIONS:
            raise ToolError(_unknown_name(node.func.id))
        if node.keywords:
            raise ToolError(f"{node.func.id}() takes positional arguments only")
        arguments = [self.eval(argument) for argument in node.args]
        try:
            result = _FUNCTIONS[node.func.id](*arguments)
        except TypeError as exc:
            raise ToolError(f"{node.func.id}(): {exc}") from exc
        return _checked(result)


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse a power whose result would be huge, before computing it."""
    # Other cases become float arithmetic, which raises OverflowError instead of growing.
    integers = isinstance(base, int) and isinstance(exponent, int)
    if (
        integers
        and exponent > 0
        and abs(base) > 1
        and exponent * math.log2(abs(base)) > MAX_INT_BITS
    ):
        raise ToolError(_too_large())


def _check_product(left: int, right: int) -> None:
    if left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
        raise ToolError(_too_large())


def _checked(result: Any) -> Number:
    if isinstance(result, complex):
        raise ToolError("the result is not a real number (e.g. a fractional power of a negative)")
    if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
        raise ToolError(_too_large())
    return result


def _too_large() -> str:
    return f"the result would be too large (more than about {int(MAX_INT_BITS * 0.30103)} digits)"


def _unknown_name(name: str) -> str:
    known = ", ".join(sorted(_FUNCTIONS))
    constants = ", ".join(sorted(_CONSTANTS))
    return f"unknown name {name!r}; functions: {known}; constants: {constants}"


def _unsupported(node: ast.AST) -> str:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        return "'^' is not a power here: write 2**10 for 2 to the power 10"
    if isinstance(node, ast.Compare | ast.BoolOp):
        return "comparisons and logic are not supported, only arithmetic"
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        return f"unsupported operator {type(node.op).__name__}; use + - * / // % **"
    return f"unsupported syntax: {type(node).__name__}; use numbers, + - * / // % ** and functions"


def _check_shape(tree: ast.AST) -> None:
    """Bound the size and nesting of the tree without recursion."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ToolError(f"the expression is too long (more than {MAX_NODES} parts)")
        if depth > MAX_DEPTH:
            raise ToolError(f"the expression is nested too deeply (more than {MAX_DEPTH} levels)")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, or ToolError saying what is wrong with it."""
    text = expression.strip()
    for symbol, replacement in _SYMBOLS.items():
        text = text.replace(symbol, replacement)
    if not text:
        raise ToolError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise ToolError(f"cannot parse the expression{where}: {exc.msg}") from exc
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ToolError("the expression is too complex to parse") from exc
    _check_shape(tree)
    try:
        return _Evaluator().eval(tree)
    except ZeroDivisionError as exc:
        raise ToolError("division by zero") from exc
    except OverflowError as exc:
        raise ToolError(f"the result is too large for a floating-point number ({exc})") from exc
    except ValueError as exc:
        raise ToolError(f"math error: {exc}") from exc
    except RecursionError as exc:
        raise ToolError("the expression is nested too deeply") from exc


def format_number(value: Number) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    # 15 significant digits hide binary noise (0.1 + 0.2 shows as 0.3).
    text = format(value, ".15g")
    return text if ("e" in text or "." in text) else text + ".0"


_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)
_ZONE_EXAMPLES = "'Asia/Shanghai', 'Europe/London', 'America/New_York' or 'UTC'"


def parse_timezone(name: str) -> tzinfo:
    """An IANA zone, ``UTC``, or a fixed offset such as ``UTC+8`` / ``+05:30``."""
    text = name.strip()
    if text.upper() in ("UTC", "Z", "GMT", "ZULU", "ETC/UTC"):
        return UTC
    match = _OFFSET.match(text)
    if match:
        sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        if hours > 14 or minutes >= 60:
            raise ToolError(f"UTC offset {text!r} is out of range (-14:00 to +14:00)")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if sign == "-" else delta)
    try:
        return time_zone(text)
    except UnknownTimeZone as exc:
        raise ToolError(
            f"unknown time zone {name!r}: use an IANA name such as {_ZONE_EXAMPLES},"
            " or an offset like 'UTC+8'"
        ) from exc


def _format_offset(offset: timedelta | None) -> str:
    seconds = int((offset or timedelta()).total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"


class Utilities(Connector):
    """Calculator and clock: no backend, always available."""

    name = "utilities"

    # The clock, replaceable in tests.
    now: Callable[[], datetime] = staticmethod(lambda: datetime.now(UTC))

    @action(side_effect="read", timeout=5, max_result_chars=2000)
    async def calculator(
        self,
        expression: Annotated[
            str,
            Field(
                description=(
                    "Arithmetic expression, e.g. '(3.5 + 2) * 4 / 7', '2**10', 'sqrt(2) * pi',"
                    " 'log(100, 10)', 'round(17 / 3, 2)'. Operators: + - * / // % **."
                )
            ),
        ],
    ) -> str:
        """Evaluate an arithmetic expression exactly; use it instead of mental arithmetic.
        Numbers, parentheses, + - * / // % ** (power); sqrt, cbrt, exp, log(x[, base]), ln,
        log10, log2, sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, degrees,
        radians, hypot, floor, ceil, trunc, abs, round(x[, digits]), min, max, factorial,
        gcd; constants pi, e, tau, inf. Angles are in radians.
        """
        value = evaluate(expression)
        return f"{expression.strip()} = {format_number(value)}"

    @action(side_effect="read", timeout=5, max_result_chars=1000)
    async def current_time(
        self,
        timezone: Annotated[
            str,
            Field(
                description=(
                    "IANA time zone name such as 'Asia/Shanghai' or 'America/New_York',"
                    " or a UTC offset like 'UTC+8'. Defaults to UTC."
                )
            ),
        ] = "UTC",
    ) -> str:
        """The current date and time in a time zone, with the weekday and UTC offset."""
        zone = parse_timezone(timezone)
        local = self.now().astimezone(zone)
        abbreviation = local.tzname() or ""
        offset = _format_offset(local.utcoffset())
        lines = [
            f"time: {local.isoformat(timespec='seconds')}",
            f"time zone: {timezone.strip()}" + (f" ({abbreviation})" if abbreviation else ""),
            f"weekday: {local.strftime('%A')}",
            f"UTC offset: {offset}",
            f"UTC: {local.astimezone(UTC).isoformat(timespec='seconds')}",
        ]
        return "\n".join(lines)


__all__ = ["Utilities", "evaluate", "format_number", "parse_timezone"]
