"""What a request to the fake model is, for fake models that answer by kind.

In native mode the tool loop's calls stream (``stream: true`` with ``tools``), and a final
reply is the answer; synthesis, the separate call that writes an answer from the work
trace (JSON mode, plan mode, a run cut short, ``LARKGATE_SYNTHESIS=always``), streams
too. So ``stream`` no longer tells them apart: synthesis is known by its system prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.engine.prompts import SYNTHESIS_SYSTEM_PROMPT


def is_synthesis(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is a synthesis request (not a call of the tool loop)."""
    messages = body.get("messages") or []
    return bool(messages) and messages[0].get("content") == SYNTHESIS_SYSTEM_PROMPT


def user_text(message: Mapping[str, Any]) -> str:
    """A message's text, whether its content is a string or OpenAI content parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return str(content or "")
