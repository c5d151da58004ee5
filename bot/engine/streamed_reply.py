"""One main-loop call made with streaming: its text reaches the reader as it arrives.

In native mode (with synthesis ``auto``) the loop's calls stream, tools included, so a
final reply is the answer, shown as it is written, with no second call to write it
again. Whether a reply is final is known only at its end, when the provider hands over
its tool calls; so its text goes out as ``answer`` events as it comes, and when the
reply turns out to be tool calls after all (a note before them: "Let me check…"), or
the loop does not take it as the answer, that text is withdrawn with one
``answer_withdrawn`` event, exactly what was sent. Buffering the text until the end
instead would cost every answer its streaming; showing it only past its first
sentence would delay every first word and still not catch longer notes.

A reply is shown only when, were it final, the loop would take it as the answer
(``show``): not when the completion checklist is due (the loop asks for the answer
again), nor when a message of the user is already waiting (the loop drops the reply
for it). The caller decides; this class only reads, shows and takes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .events import AnswerEvent, AnswerWithdrawnEvent, EventSink
from .llm import LLM, LLMResponse
from .messages import Message, ToolCall, Usage


class StreamedReply:
    """Reads one streamed turn into an ``LLMResponse``; ``shown`` is the text sent."""

    def __init__(self, sink: EventSink, *, show: bool) -> None:
        self._sink = sink
        self._show = show
        self._shown: list[str] = []

    @property
    def shown(self) -> str:
        return "".join(self._shown)

    async def read(
        self,
        llm: LLM,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> LLMResponse:
        content: list[str] = []
        reasoning: list[str] = []
        calls: tuple[ToolCall, ...] = ()
        usage = Usage()
        finish_reason: str | None = None
        stream = llm.stream_chat(messages, tools=tools)
        try:
            async for delta in stream:
                if delta.content:
                    content.append(delta.content)
                    if self._show:
                        self._shown.append(delta.content)
                        self._sink.emit(AnswerEvent(delta.content))
                if delta.reasoning_content:
                    reasoning.append(delta.reasoning_content)
                if delta.tool_calls:
                    calls = delta.tool_calls
                if delta.usage is not None:
                    usage = delta.usage
                finish_reason = delta.finish_reason or finish_reason
        finally:
            # A stop (cancellation) mid-stream closes the HTTP stream now, not at GC.
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        return LLMResponse(
            content="".join(content),
            tool_calls=calls,
            reasoning_content="".join(reasoning) or None,
            usage=usage,
            finish_reason=finish_reason,
        )

    def withdraw(self) -> None:
        """Take back the text sent so far (see the module docstring)."""
        shown = self.shown
        self._shown.clear()
        if shown:
            self._sink.emit(AnswerWithdrawnEvent(shown))
