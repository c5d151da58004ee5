"""Parsing JSON nobody vouches for: one exception for every way a body can be bad, and a
depth pre-scan that agrees with a parser on valid JSON (property-based)."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.feishu.untrusted_json import MAX_DEPTH, UntrustedJson, check_shape, load_object

FAST = settings(max_examples=300, deadline=None, derandomize=True)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=40,
)


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested deeper|strings"),
        (b'{"a": "' + b"[" * 100_000 + b'"}', None),  # brackets inside a string are text
        (b'{"a": 1e999}', "out of range"),
        (b'{"a": NaN}', "not JSON"),
        (b'{"a": -Infinity}', "not JSON"),
        (b'{"a": ' + b"9" * 5_000 + b"}", "too many digits"),
        (b'{"a": 1, "a": 2}', "repeats a key"),
        (b'{"a": "\\ud800"}', "lone surrogate"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b"", "empty"),
        (b"  \n ", "empty"),
        (b"[1, 2]", "an array"),
        (b'"text"', "a string"),
        (b"null", "null"),
        (b'{"a": ', "invalid JSON"),
        (b'{"a": 1}{"b": 2}', "invalid JSON"),
        (b'{"a": "x"' + b', "b": "y"' * 25_000 + b"}", "strings"),
    ],
)
def test_every_bad_body_is_one_clear_refusal(raw: bytes, why: str | None):
    if why is None:
        assert load_object(raw) == {"a": "[" * 100_000}
        return
    with pytest.raises(UntrustedJson, match=why):
        load_object(raw)


def _python_steps(raw: bytes) -> tuple[str | None, int]:
    """``check_shape``'s verdict on ``raw``, and how many lines of Python (and calls into
    Python functions) it ran: what a tracer sees (not the work C does inside ``count``,
    ``translate``, ``map`` or ``max``). On a thread of its own: a coverage tracer on the
    test's thread is left alone."""
    steps = 0
    verdict: list[str | None] = []

    def trace(frame: object, event: str, arg: object) -> object:
        nonlocal steps
        steps += 1
        return trace

    def run() -> None:
        sys.settrace(trace)
        try:
            verdict.append(check_shape(raw))
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return verdict[0], steps


@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        pytest.param(
            lambda n: json.dumps({"header": {"event_id": "e"}, "x": "y" * n}).encode(),
            None,
            id="an event",
        ),
        pytest.param(lambda n: b"[" * n + b"]" * n, "nested deeper than 32", id="brackets"),
        pytest.param(lambda n: b"[" + b"[1]," * n + b"[1]]", None, id="shallow arrays"),
        pytest.param(lambda n: b'{"a": "' + b'\\"[' * n + b'"}', None, id="escapes"),
        pytest.param(
            lambda n: b'["' + b"[" * n + b'",' + b"[" * 40 + b"]" * 41, "nested deeper", id="mixed"
        ),
    ],
)
def test_the_pre_scan_does_no_python_work_per_byte(body, verdict):
    """What the ACK path pays (check_shape's claim): a few C passes over the bytes, never a
    Python loop over them. Not timed: the Python it runs is counted, and a body four
    times as long runs exactly as many lines of Python. (Its cost in µs: docs/security.md.)"""
    (small_verdict, small_steps), (large_verdict, large_steps) = map(
        _python_steps, (body(1_000), body(4_000))
    )
    for got in (small_verdict, large_verdict):
        assert (got is None) if verdict is None else (got is not None and verdict in got)
    assert large_steps == small_steps


@FAST
@given(value=json_values)
def test_the_depth_scan_agrees_with_the_parser_on_valid_json(value):
    raw = json.dumps({"v": value}, ensure_ascii=False).encode()
    deep = depth_of({"v": value}) > MAX_DEPTH
    assert (check_shape(raw) is not None) == deep or "strings" in (check_shape(raw) or "")


@FAST
@given(levels=st.integers(1, 3 * MAX_DEPTH), kind=st.sampled_from(["[]", "{}"]))
def test_nesting_past_the_limit_is_refused_and_below_it_parses(levels, kind):
    inner = (
        b"[" * levels + b"]" * levels if kind == "[]" else b'{"a":' * levels + b"1" + b"}" * levels
    )
    raw = b'{"v": ' + inner + b"}"
    if levels + 1 > MAX_DEPTH:
        with pytest.raises(UntrustedJson, match="nested deeper"):
            load_object(raw)
    else:
        assert isinstance(load_object(raw), dict)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(raw=st.binary(max_size=600) | st.text(max_size=300).map(str.encode))
def test_random_bytes_give_a_dict_or_untrusted_json_never_anything_else(raw):
    refusal: UntrustedJson | None = None
    try:
        value = load_object(raw)
    except UntrustedJson as exc:
        refusal = exc
    if refusal is not None:
        assert str(refusal) and "\n" not in str(refusal)
    else:
        assert isinstance(value, dict)
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()  # safe to store
