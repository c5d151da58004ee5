"""The answer phase: one streaming call that writes the reply from the run's full trace.

It reads ``AgentResult.messages``, the uncompacted transcript, so JSON-mode
observations and turns that compaction summarised away are all there; each tool
result is cut to ``SYNTHESIS_OBSERVATION_CHARS``. A stream that breaks after some text
was delivered is continued from that text (never restarted, so no delta repeats).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from .llm import LLM
from .loop import JsonFinal, JsonToolCall, parse_json_action
from .messages import Message
from .prompts import (
    SYNTHESIS_CONTINUE_PROMPT,
    SYNTHESIS_OBSERVATION_CHARS,
    SYNTHESIS_SYSTEM_PROMPT,
)
from .result import AgentResult

logger = logging.getLogger(__name__)

MAX_CONTINUATIONS = 2
HISTORY_MESSAGES = 10
HISTORY_CHARS = 1000
# A document the user sent is what the answer is about: far more of it than of history.
ATTACHMENT_CHARS = 12_000
_SKIPPED_KINDS = {
    "system",
    "query",
    "reformat",
    "reflection",
    "cycle_warning",
    "checklist",
    "attachment",
}


async def synthesize(
    llm: LLM, query: str, result: AgentResult, *, fallback: bool = True
) -> AsyncIterator[str]:
    base = synthesis_messages(query, result)
    if not llm.abilities.get("streaming", True):
        async for text in _whole(llm, base, result, fallback):
            yield text
        return
    messages = base
    delivered: list[str] = []
    continuations = 0
    while True:
        try:
            async for delta in llm.stream_chat(messages):
                if delta.usage is not None:
                    result.synthesis_usage += delta.usage
                if delta.content:
                    delivered.append(delta.content)
                    yield delta.content
            return
        except Exception as exc:  # any failure falls back or continues
            if not delivered:
                logger.warning("synthesis failed before any text: %s", exc)
                if fallback and result.answer:
                    yield result.answer
                    return
                raise
            if continuations >= MAX_CONTINUATIONS:
                logger.warning("synthesis broke off after %d continuations: %s", continuations, exc)
                return
            continuations += 1
            logger.info("synthesis stream broke off (%s); continuing from delivered text", exc)
            messages = [
                *base,
                Message.assistant("".join(delivered)),
                Message.user(SYNTHESIS_CONTINUE_PROMPT),
            ]


async def _whole(
    llm: LLM, messages: list[Message], result: AgentResult, fallback: bool
) -> AsyncIterator[str]:
    try:
        response = await llm.chat(messages)
    except Exception as exc:  # fall back to the run's answer
        logger.warning("synthesis failed: %s", exc)
        if fallback and result.answer:
            yield result.answer
            return
        raise
    result.synthesis_usage += response.usage
    yield response.content or result.answer


def synthesis_messages(query: str, result: AgentResult) -> list[Message]:
    history = [m for m in result.messages if m.kind == "history" and m.content]
    attachments = [m.content for m in result.messages if m.kind == "attachment" and m.content]
    trace = _trace_lines(result.messages)
    parts = [f"Question: {query}"]
    if attachments:
        texts = [_cut(text, ATTACHMENT_CHARS) for text in attachments]
        parts.append("Documents the user sent:\n" + "\n\n".join(texts))
    if history:
        lines = [f"{m.role}: {_cut(m.content, HISTORY_CHARS)}" for m in history[-HISTORY_MESSAGES:]]
        parts.append("Earlier conversation:\n" + "\n".join(lines))
    parts.append("Work trace:\n" + ("\n".join(trace) if trace else "(no tools were used)"))
    if result.status != "completed":
        parts.append(
            f"Note: the work ended early ({result.status}: {result.error or 'no detail'})."
        )
    # The images the question came with: the answer is written looking at them too.
    images = next((m.images for m in result.messages if m.kind == "query"), ())
    return [
        Message.system(SYNTHESIS_SYSTEM_PROMPT),
        Message.user("\n\n".join(parts), images=images),
    ]


def _trace_lines(messages: list[Message]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        kind = message.kind
        if kind in _SKIPPED_KINDS or kind == "history":
            continue
        if message.role == "assistant":
            lines.extend(_assistant_lines(message))
        elif message.role == "tool" or kind == "observation":
            text = message.content
            if kind == "observation" and message.role == "user":
                text = text.split("\n", 1)[1] if "\n" in text else text
            lines.append(f"Tool result ({message.name}): {_cut(text, SYNTHESIS_OBSERVATION_CHARS)}")
        elif kind == "interrupt":
            lines.append(f"The user added: {message.content}")
        elif kind == "summary":
            lines.append(message.content)
    return lines


def _assistant_lines(message: Message) -> list[str]:
    if message.tool_calls:
        lines = [f"Assistant note: {message.content}"] if message.content.strip() else []
        for call in message.tool_calls:
            lines.append(f"Tool call: {call.name}({_args(call.arguments)})")
        return lines
    action = (
        parse_json_action(message.content)
        if message.content.lstrip().startswith(("{", "`"))
        else None
    )
    if isinstance(action, JsonToolCall):
        note = [f"Assistant note: {action.reasoning}"] if action.reasoning else []
        return [*note, f"Tool call: {action.tool}({_args(action.arguments)})"]
    if isinstance(action, JsonFinal):
        return [f"Draft answer: {action.answer}"]
    if message.content.strip():
        return [f"Draft answer: {message.content.strip()}"]
    return []


def _args(arguments: object) -> str:
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(arguments)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " … (cut)"
