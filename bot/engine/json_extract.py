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
            pass
        else:
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    return None
