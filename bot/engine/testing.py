"""A scripted in-process LLM for tests, benchmarks and demos (no network).

``ScriptedLLM`` answers from a script: each entry is an ``LLMResponse``, a plain
string (a text reply), an exception to raise, or a function of the messages returning
one of those. ``script`` holds the model's turns in order, asked for with ``chat()`` or
``stream_chat()`` alike (the loop streams its calls in native mode); a streamed entry
comes in small pieces, its tool calls and usage on the last delta. ``stream_script``
answers streamed calls once ``script`` is spent (the reference design's separate
synthesis call), where ``BrokenStream`` also fails part-way.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .llm import DEFAULT_ABILITIES, LLMResponse, LLMResponseError, StreamDelta
from .messages import Message, ToolCall, Usage

ScriptEntry = LLMResponse | str | BaseException | Callable[[list[Message]], Any]


@dataclass(frozen=True, slots=True)
class BrokenStream:
    """Stream ``text`` in pieces, then raise ``error`` after ``fail_after`` pieces."""

    text: str
    fail_after: int
    error: BaseException = field(default_factory=lambda: ConnectionError("stream reset"))


@dataclass(frozen=True, slots=True)
class RecordedCall:
    messages: tuple[Message, ...]
    tools: Sequence[Mapping[str, Any]] | None
    tool_choice: Any
    response_format: Mapping[str, Any] | None
    stream: bool


def tool_call(
    name: str, arguments: Mapping[str, Any] | None = None, *, id: str | None = None
) -> ToolCall:
    args = dict(arguments or {})
    return ToolCall(
        id or f"call_{name}_{abs(hash(json.dumps(args, sort_keys=True))) % 10**8}",
        name,
        args,
        json.dumps(args),
    )


def tool_calls_response(
    *calls: ToolCall, content: str = "", usage: Usage | None = None
) -> LLMResponse:
    return LLMResponse(content=content, tool_calls=calls, usage=usage or Usage(10, 5, 15))


class ScriptedLLM:
    """An LLM whose replies are scripted in advance; it records what it was asked."""

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        stream_script: Iterable[ScriptEntry | BrokenStream] = (),
        abilities: Mapping[str, bool] | None = None,
        model: str = "scripted",
        record: bool = True,
        chunk_chars: int = 4,
    ) -> None:
        self.model = model
        self._abilities = {**DEFAULT_ABILITIES, **(abilities or {})}
        self._script: deque[ScriptEntry] = deque(script)
        self._stream_script: deque[ScriptEntry | BrokenStream] = deque(stream_script)
        self._record = record
        self._chunk_chars = chunk_chars
        self.calls: list[RecordedCall] = []

    @property
    def abilities(self) -> Mapping[str, bool]:
        return self._abilities

    def extend(self, entries: Iterable[ScriptEntry]) -> None:
        self._script.extend(entries)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> LLMResponse:
        if self._record:
            self.calls.append(
                RecordedCall(tuple(messages), tools, tool_choice, response_format, False)
            )
        if not self._script:
            raise LLMResponseError("scripted LLM: script exhausted")
        entry = self._script.popleft()
        if callable(entry) and not isinstance(entry, LLMResponse | BaseException):
            entry = entry(list(messages))
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, str):
            return LLMResponse(content=entry, usage=Usage(10, 5, 15))
        return entry

    async def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamDelta]:
        if self._record:
            self.calls.append(RecordedCall(tuple(messages), tools, tool_choice, None, True))
        entry: ScriptEntry | BrokenStream
        if self._script:  # a turn of the script, streamed: usage as chat() reports it
            entry = self._script.popleft()
            default_usage = Usage(10, 5, 15)
        elif self._stream_script:
            entry = self._stream_script.popleft()
            default_usage = Usage()
        else:
            raise LLMResponseError("scripted LLM: stream script exhausted")
        if callable(entry) and not isinstance(entry, LLMResponse | BaseException | BrokenStream):
            entry = entry(list(messages))
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, BrokenStream):
            for piece in self._pieces(entry.text)[: entry.fail_after]:
                yield StreamDelta(content=piece)
            raise entry.error
        if isinstance(entry, str):
            response = LLMResponse(content=entry, usage=default_usage)
        elif isinstance(entry, LLMResponse):
            response = entry
        else:
            raise TypeError(f"scripted LLM: cannot stream {entry!r}")
        if response.reasoning_content:
            yield StreamDelta(reasoning_content=response.reasoning_content)
        for piece in self._pieces(response.content):
            yield StreamDelta(content=piece)
        yield StreamDelta(
            tool_calls=response.tool_calls,
            usage=response.usage,
            finish_reason=response.finish_reason or "stop",
        )

    def _pieces(self, text: str) -> list[str]:
        n = self._chunk_chars
        return [text[i : i + n] for i in range(0, len(text), n)]
