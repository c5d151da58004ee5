"""The LLM protocol the engine talks to, its response types and its error tree.

Any object with ``model``, ``abilities``, ``chat()`` and ``stream_chat()`` is an LLM.
``OpenAICompatibleLLM`` implements it over HTTP; tests and benchmarks use scripted ones.

Error tree (what a provider raises once its own retries are spent)::

    LLMError
    ├── LLMTransientError      429, 5xx, timeouts, connection failures: retries exhausted
    │   └── LLMDeadlineExceeded the turn's model deadline passed (``model_deadline``)
    ├── LLMRequestError        the endpoint refused the request (4xx other than 429)
    │   ├── LLMContextOverflow the prompt is larger than the model's context window
    │   ├── LLMImagesUnsupported the model does not take images (even when said with a 500)
    │   └── LLMAuthError       the key was refused (401/403)
    ├── LLMResponseError       the endpoint answered something that is not a completion
    └── LLMStreamInterrupted   a stream broke after some deltas were already delivered
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .messages import ZERO_USAGE, ToolCall, Usage

# What an LLM can do. Missing keys mean "no" except where DEFAULT_ABILITIES says otherwise.
DEFAULT_ABILITIES: Mapping[str, bool] = {
    "tool_call": True,
    "tool_choice": True,
    "parallel_tool_calls": True,
    "json_mode": True,
    "streaming": True,
    "vision": False,
}


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """A complete (non-streamed) assistant turn."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning_content: str | None = None
    usage: Usage = ZERO_USAGE
    finish_reason: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """One piece of a streamed turn.

    Text arrives in ``content`` / ``reasoning_content`` pieces as the server sends them.
    Tool calls are assembled by the provider (their arguments come split across
    chunks) and delivered whole, with ``usage`` and ``finish_reason``, on the last delta.
    """

    content: str = ""
    reasoning_content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None


@runtime_checkable
class LLM(Protocol):
    """A chat model. ``abilities`` decides the loop mode and the structured-output levels."""

    @property
    def model(self) -> str:
        """The model's name, read (a plain attribute satisfies it, so does a property)."""
        ...

    @property
    def abilities(self) -> Mapping[str, bool]: ...

    async def chat(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> LLMResponse: ...

    def stream_chat(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamDelta]: ...


class LLMError(Exception):
    """The model could not produce a turn."""


class LLMTransientError(LLMError):
    """Rate limits, server errors or timeouts outlasted the provider's retries."""


class LLMDeadlineExceeded(LLMTransientError):
    """The model kept failing until the turn's model deadline passed; the turn gives up on
    it (every later call of the turn raises this at once). See ``bot.engine.model_deadline``."""

    def __init__(self, message: str, *, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class LLMRequestError(LLMError):
    """The endpoint refused the request; retrying the same request will not help."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class LLMContextOverflow(LLMRequestError):
    """The prompt does not fit the model's context window."""


class LLMImagesUnsupported(LLMRequestError):
    """The model does not take images: the same request without them may succeed.

    Only raised when the endpoint says so (``bot.engine.llm_errors``), whatever the
    status it says it with: llama.cpp without a projector answers 500."""


class LLMAuthError(LLMRequestError):
    """The endpoint refused the API key (401) or its permissions (403)."""


class LLMResponseError(LLMError):
    """The endpoint answered, but not with a usable completion."""


class LLMStreamInterrupted(LLMError):
    """The stream failed after ``delivered`` text had already been yielded.

    The provider does not retry such a stream itself: a blind retry would repeat what
    the reader already has. ``ReActAgent.stream_answer`` continues from ``delivered``.
    """

    def __init__(self, message: str, *, delivered: str) -> None:
        super().__init__(message)
        self.delivered = delivered
