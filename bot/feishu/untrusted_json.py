"""Parsing JSON that nobody vouches for yet: a request body, a decrypted payload, a frame.

``json.loads`` has failure modes that are not ``ValueError``: a body nested 100,000
levels deep raises ``RecursionError`` (after recursing ~1,000 C frames), a lone surrogate
escape (``"\\ud800"``) parses into a ``str`` that raises ``UnicodeEncodeError`` later, at
whatever ``.encode()`` meets it first, and ``1e999`` or ``NaN`` parse into floats that no
JSON column, ``json.dumps(allow_nan=False)`` or PostgreSQL accepts. Duplicate keys parse
silently (the last wins), the classic ingredient of two readers disagreeing about one
body. :func:`load_object` turns all of these into one exception, :class:`UntrustedJson`,
whose message is short and safe to log, and it checks size and nesting depth *before*
parsing, with a pre-scan that runs at C speed (``bytes`` methods, no Python loop per byte).

How the pre-scan finds the depth without parsing: within the part of a body that is valid
JSON (the only part ``json.loads`` ever recurses into), a backslash occurs only inside
strings, escapes pair up from the left, and quotes alternate between opening and closing
a string. So removing ``\\\\`` pairs and then ``\\"`` escapes leaves quotes that only
delimit strings, splitting on ``"`` puts the strings at odd indexes, and the brackets
left outside them are the structure: the depth is the highest count of open brackets
over its prefixes. Past the first syntax error the scan may see nonsense, but there
``json.loads`` stops, so at worst an already invalid body is refused for depth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate, count
from operator import sub
from typing import Any

# Feishu envelopes nest 6 levels at most (event.message.mentions[].id); card callbacks
# carry our own flat button values. 32 leaves room and is far from json's ~1,000.
MAX_DEPTH = 32
# The same bound as the HTTP routes: Feishu payloads are a few KB.
MAX_BYTES = 1 << 20
# Integers longer than this are not Feishu's (its ids are strings); the bound also keeps
# int() from quadratic work when the interpreter's digit limit (4,300) is switched off.
MAX_INT_DIGITS = 64
# A push holds a few dozen strings and objects. These bounds (a hundred times that) keep
# both the pre-scan and the parse of a hostile 1 MiB body to milliseconds.
MAX_STRINGS = 20_000
MAX_CONTAINERS = 5_000

# For isinstance checks of parsed JSON: objects are dicts, so dict goes first and isinstance
# stops there; Mapping's own check (a Python-level __instancecheck__) costs seven times as
# much, and a push ran ~30 of them.
JSON_OBJECT = (dict, Mapping)

# The brackets outside strings, as "(" and ")": depth does not care which kind.
_BRACKETS_ONLY = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Escapes that may encode half of a surrogate pair: only then is the slower check needed.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class UntrustedJson(ValueError):
    """The bytes are not a JSON object we accept; the message says why (safe to log)."""


def load_object(
    raw: bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> dict[str, Any]:
    """``raw`` (UTF-8 JSON) as a dict, or :class:`UntrustedJson`; never anything else."""
    if len(raw) > max_bytes:
        raise UntrustedJson(f"larger than {max_bytes} bytes")
    if not raw or raw.isspace():
        raise UntrustedJson("empty")
    too_complex = check_shape(raw, max_depth=max_depth)
    if too_complex is not None:
        raise UntrustedJson(too_complex)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UntrustedJson("not UTF-8") from None
    try:
        value = _DECODER.decode(text)
    except UntrustedJson:
        raise
    except (ValueError, RecursionError):  # RecursionError: only if max_depth is set high
        raise UntrustedJson("invalid JSON") from None
    if not isinstance(value, dict):
        raise UntrustedJson(f"it is {_kind(value)}")
    if _SURROGATE_ESCAPE.search(raw) and not _encodable(value):
        raise UntrustedJson("a string holds a lone surrogate")
    return value


def check_shape(raw: bytes, *, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``raw`` is too deep or too busy to parse, or None when it is fine to.

    Exact for valid JSON: arrays and objects nested more than ``max_depth`` deep, more
    than :data:`MAX_CONTAINERS` of them, or more than :data:`MAX_STRINGS` strings. For
    invalid JSON it may name one of these where the parser would have stopped at a
    syntax error first. Its cost is a few C passes over the bytes and at most one
    ``bytes`` object per string: never a Python loop over the bytes.
    """
    openers = raw.count(b"[") + raw.count(b"{")
    quotes = raw.count(b'"')
    if openers <= max_depth and quotes <= 2 * MAX_STRINGS:
        return None  # cannot nest deeper than it opens: the common case, and 4 C scans
    text = raw
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
        quotes = text.count(b'"')
    if quotes > 2 * MAX_STRINGS + 1:  # +1: an unterminated string
        return f"more than {MAX_STRINGS} strings"
    if openers <= max_depth:
        return None
    outside_strings = b"".join(text.split(b'"')[::2])
    brackets = outside_strings.translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    openers = brackets.count(b"(")
    if openers <= max_depth:
        return None
    if b"(" * (max_depth + 1) in brackets:
        return f"nested deeper than {max_depth} levels"  # the usual attack, said quickly
    if openers > MAX_CONTAINERS:
        return f"more than {MAX_CONTAINERS} arrays and objects"
    # The depth at each ")": the openers before it, minus the closers before it.
    depths = map(sub, accumulate(map(len, brackets.split(b")"))), count())
    if max(depths) > max_depth:
        return f"nested deeper than {max_depth} levels"
    return None


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise UntrustedJson("an object repeats a key")
    return value


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise UntrustedJson("a number out of range")
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise UntrustedJson("an integer with too many digits")
    return int(literal)


def _no_constant(literal: str) -> Any:
    raise UntrustedJson(f"{literal} is not JSON")


# One decoder for every call: json.loads with hooks would build it (and its scanner) anew.
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_float=_finite_float,
    parse_int=_bounded_int,
    parse_constant=_no_constant,
)


def _encodable(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
