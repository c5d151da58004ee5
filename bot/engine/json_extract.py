"""Find the first JSON object in free text.

Models wrap JSON in code fences, put prose around it, or answer with nothing else;
``extract_json`` handles all of these. It decodes with the real JSON decoder from each
candidate ``{``, so nested objects and braces inside strings are handled correctly.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str | None) -> dict[str, Any] | None:
    """Return the first JSON object found in ``text``, or None."""
    if not text:
        return None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            pass
        else:
            if isinstance(value, dict):
                return value
    for fenced in _FENCE.findall(text):
        found = _first_object(fenced)
        if found is not None:
            return found
    return _first_object(text)


def _first_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            # Skip the whole broken object, so a fragment inside it is not mistaken
            # for the answer; an unbalanced one is skipped one brace at a time.
            end = _balanced_end(text, start)
            start = text.find("{", end if end is not None else start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def _balanced_end(text: str, start: int) -> int | None:
    """Index just past the brace that closes the one at ``start`` (string-aware)."""
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None
