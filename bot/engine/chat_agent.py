"""What the bot runs a turn with: ``ReActAgent``, or plan mode's ``DAGAgent``.

Both take the same ``run`` arguments and return an ``AgentResult``, and both stream
the answer from it; code that builds either can type it as ``ChatAgent``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from .events import EventCallback
from .interrupts import InterruptQueue
from .llm import LLM
from .messages import ImagePart, MessageLike
from .result import AgentResult


class ChatAgent(Protocol):
    @property
    def llm(self) -> LLM:
        """The model that writes the answer (its ``model`` names the run's model)."""
        ...

    async def run(
        self,
        query: str,
        *,
        history: Sequence[MessageLike] | None = None,
        images: Sequence[ImagePart] = (),
        interrupt_queue: InterruptQueue | None = None,
        on_event: EventCallback | None = None,
        deps: Any = None,
        run_id: str | None = None,
    ) -> AgentResult: ...

    def stream_answer(
        self,
        query: str,
        result: AgentResult,
        *,
        on_event: EventCallback | None = None,
        fallback: bool = True,
    ) -> AsyncIterator[str]: ...
