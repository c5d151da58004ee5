"""The utilities connector: a calculator that parses instead of evaluating, and the clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.engine import Tool, ToolError
from connectors.base import ConnectorContext
from connectors.utilities import MAX_EXPRESSION_CHARS, Utilities


@pytest.fixture
def utilities() -> Utilities:
    return Utilities(Utilities.Settings(), ConnectorContext())


@pytest.fixture
def tools(utilities: Utilities) -> dict[str, Tool]:
    return {tool.name: tool for tool in utilities.tools()}


async def calc(tools: dict[str, Tool], expression: str) -> str:
    result = await tools["calculator"].handler(expression=expression)
    assert isinstance(result, str)
    return result.rpartition(" = ")[2]


async def refused(tools: dict[str, Tool], expression: str) -> str:
    with pytest.raises(ToolError) as caught:
        await tools["calculator"].handler(expression=expression)
    return str(caught.value)


def test_tools_are_reads_with_schemas(tools: dict[str, Tool]) -> None:
    assert set(tools) == {"calculator", "current_time"}
    assert all(tool.side_effect == "read" for tool in tools.values())
    assert tools["calculator"].parameters["required"] == ["expression"]
    time_schema = tools["current_time"].parameters["properties"]["timezone"]
    assert time_schema["default"] == "UTC"
    assert "IANA" in time_schema["description"]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("2 ** 10", "1024"),
        ("2 ** -1", "0.5"),
        ("-3 ** 2", "-9"),
        ("(-3) ** 2", "9"),
        ("+5", "5"),
        ("--5", "5"),
        ("0.1 + 0.2", "0.3"),
        ("1e3 + 1", "1001.0"),
        ("1_000 * 3", "3000"),
        ("0x10 + 1", "17"),
        ("sqrt(16)", "4.0"),
        ("sqrt(2) ** 2", "2.0"),
        ("log(100, 10)", "2.0"),
        ("log(e)", "1.0"),
        ("ln(e ** 2)", "2.0"),
        ("log10(1000)", "3.0"),
        ("log2(8)", "3.0"),
        ("sin(pi / 2)", "1.0"),
        ("cos(0)", "1.0"),
        ("round(tan(pi / 4), 6)", "1.0"),
        ("degrees(pi)", "180.0"),
        ("abs(-4.5)", "4.5"),
        ("round(17 / 3, 2)", "5.67"),
        ("round(2.5)", "2"),
        ("min(3, 1, 2)", "1"),
        ("max(3, 1, 2.5)", "3"),
        ("floor(-2.5)", "-3"),
        ("ceil(2.1)", "3"),
        ("factorial(10)", "3628800"),
        ("gcd(12, 18)", "6"),
        ("hypot(3, 4)", "5.0"),
        ("cbrt(-27)", "-3.0"),
        ("3 × 4 ÷ 2", "6.0"),
        ("2 ** 64", "18446744073709551616"),
        ("10 ** 1000 // 10 ** 999", "10"),
        ("1 / 3", "0.333333333333333"),
        ("1e308 * 10", "inf"),
    ],
)
async def test_arithmetic(tools: dict[str, Tool], expression: str, expected: str) -> None:
    assert await calc(tools, expression) == expected


async def test_result_repeats_the_expression(tools: dict[str, Tool]) -> None:
    assert await tools["calculator"].handler(expression=" 6*7 ") == "6*7 = 42"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9", "too large"),
        ("10 ** 100000", "too large"),
        ("2 ** 2 ** 2 ** 2 ** 2", "too large"),
        ("(10 ** 1000) * (10 ** 1000)", "too large"),
        ("10 ** 1000 * 10 ** 1000 * 10 ** 1000", "too large"),
        ("factorial(100000)", "factorial"),
        ("factorial(1000)", "too large"),
        ("exp(100000)", "too large"),
        ("1.5 ** 100000", "too large"),
        ("7 ** -(10 ** 1000)", "too large"),
        ("sqrt(10 ** 1000)", "too large"),
        ("(" * 300 + "1" + ")" * 300, "parse"),
        ("-" * 500 + "1", "nested too deeply"),
        ("+".join(["1"] * 450), "too"),
        ("1" * (MAX_EXPRESSION_CHARS + 1), "longer than"),
        ("round(1.5, 10 ** 6)", "digits"),
    ],
)
async def test_resource_abuse_is_refused_quickly(
    tools: dict[str, Tool], expression: str, message: str
) -> None:
    started = time.perf_counter()
    assert message in await refused(tools, expression)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "only plain function calls"),
        ("__import__('os')", "unknown name '__import__'"),
        ("open('/etc/passwd')", "unknown name 'open'"),
        ("(1).__class__", "Attribute"),
        ("x + 1", "unknown name 'x'"),
        ("[1, 2]", "List"),
        ("{1: 2}", "Dict"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("lambda: 1", "Lambda"),
        ("1 if 2 else 3", "IfExp"),
        ("(x := 3)", "NamedExpr"),
        ("1 < 2", "comparisons"),
        ("1 and 2", "comparisons"),
        ("2 ^ 10", "write 2**10"),
        ("1 << 1000", "LShift"),
        ("~1", "Invert"),
        ("[x for x in range(10)]", "ListComp"),
        ("1j", "only numbers"),
        ("sqrt(x=4)", "positional"),
        ("math.sqrt(4)", "only plain function calls"),
        ("pi()", "unknown name"),
        ("1 +", "cannot parse"),
        ("", "empty"),
        ("import os", "cannot parse"),
        ("f'{1}'", "JoinedStr"),
    ],
)
async def test_anything_but_arithmetic_is_refused(
    tools: dict[str, Tool], expression: str, message: str
) -> None:
    assert message in await refused(tools, expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "math error"),
        ("log(0)", "math error"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("max()", "at least one"),
        ("factorial(-1)", "non-negative"),
        ("factorial(2.5)", "non-negative"),
        ("floor(inf)", "too large"),
        ("sqrt(1, 2)", "sqrt()"),
    ],
)
async def test_math_errors_are_explained(
    tools: dict[str, Tool], expression: str, message: str
) -> None:
    assert message in await refused(tools, expression)


async def test_unknown_name_lists_what_exists(tools: dict[str, Tool]) -> None:
    message = await refused(tools, "foo(1)")
    assert "sqrt" in message and "pi" in message


# ---------------------------------------------------------------- current_time

SUMMER = datetime(2024, 7, 1, 12, 30, 15, tzinfo=UTC)  # a Monday
WINTER = datetime(2024, 1, 15, 23, 30, 0, tzinfo=UTC)  # a Monday, late evening UTC


async def clock(utilities: Utilities, instant: datetime, **arguments: Any) -> dict[str, str]:
    utilities.now = lambda: instant  # type: ignore[method-assign]
    tool = {t.name: t for t in utilities.tools()}["current_time"]
    result = await tool.handler(**arguments)
    return dict(line.split(": ", 1) for line in result.splitlines())


async def test_default_is_utc(utilities: Utilities) -> None:
    fields = await clock(utilities, SUMMER)
    assert fields["time"] == "2024-07-01T12:30:15+00:00"
    assert fields["weekday"] == "Monday"
    assert fields["UTC offset"] == "+00:00"


async def test_real_clock_is_used_by_default(tools: dict[str, Tool]) -> None:
    result = await tools["current_time"].handler()
    assert str(datetime.now(UTC).year) in result


@pytest.mark.parametrize(
    ("zone", "instant", "time", "weekday", "offset"),
    [
        ("Asia/Shanghai", WINTER, "2024-01-16T07:30:00+08:00", "Tuesday", "+08:00"),
        ("America/New_York", SUMMER, "2024-07-01T08:30:15-04:00", "Monday", "-04:00"),
        ("America/New_York", WINTER, "2024-01-15T18:30:00-05:00", "Monday", "-05:00"),
        ("Asia/Kolkata", SUMMER, "2024-07-01T18:00:15+05:30", "Monday", "+05:30"),
        ("Pacific/Chatham", WINTER, "2024-01-16T13:15:00+13:45", "Tuesday", "+13:45"),
        ("Europe/London", SUMMER, "2024-07-01T13:30:15+01:00", "Monday", "+01:00"),
        ("UTC+8", WINTER, "2024-01-16T07:30:00+08:00", "Tuesday", "+08:00"),
        ("-05:30", SUMMER, "2024-07-01T07:00:15-05:30", "Monday", "-05:30"),
        ("utc", SUMMER, "2024-07-01T12:30:15+00:00", "Monday", "+00:00"),
    ],
)
async def test_time_zones(
    utilities: Utilities, zone: str, instant: datetime, time: str, weekday: str, offset: str
) -> None:
    fields = await clock(utilities, instant, timezone=zone)
    assert (fields["time"], fields["weekday"], fields["UTC offset"]) == (time, weekday, offset)
    assert fields["UTC"] == instant.isoformat(timespec="seconds")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "", "Asia/"])
async def test_bad_time_zone_names_an_example(utilities: Utilities, zone: str) -> None:
    with pytest.raises(ToolError) as caught:
        await clock(utilities, SUMMER, timezone=zone)
    assert "unknown time zone" in str(caught.value)
    assert "Asia/Shanghai" in str(caught.value)


async def test_out_of_range_offset(utilities: Utilities) -> None:
    with pytest.raises(ToolError, match="out of range"):
        await clock(utilities, SUMMER, timezone="UTC+99")


async def test_check_reports_ready(utilities: Utilities) -> None:
    status = await utilities.check()
    assert status.ok and status.tools == 2
