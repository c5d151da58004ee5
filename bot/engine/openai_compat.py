"""The engine's LLM over any OpenAI-compatible chat-completions endpoint.

OpenAI, DeepSeek, Qwen, vLLM and friends all speak ``POST /chat/completions``; this module
reaches them through the ``openai`` SDK and translates the engine's ``Message`` /
``ToolCall`` types at this edge, so nothing further in handles wire dicts.

The SDK's own retries are switched off (``max_retries=0``): this module owns the retry
loop, so backoff is ours to tune and a stream is never replayed once text has reached the
reader (see ``stream_chat``). Inside a turn's ``model_deadline``, that deadline bounds
the retries of every call of the turn together (``bot.engine.model_deadline``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# The installed openai SDK is built on httpx2 (the successor of httpx): an
# ``httpx2.AsyncClient`` is what it accepts as ``http_client``, and its errors are the causes.
import httpx2
import openai

from .llm import (
    DEFAULT_ABILITIES,
    LLMAuthError,
    LLMContextOverflow,
    LLMImagesUnsupported,
    LLMRequestError,
    LLMResponse,
    LLMResponseError,
    LLMStreamInterrupted,
    LLMTransientError,
    StreamDelta,
)
from .llm_errors import RETRIED, classify_error
from .messages import ZERO_USAGE, Message, ToolCall, Usage, decode_arguments
from .model_deadline import current_model_deadline

logger = logging.getLogger(__name__)

# Indirection so tests can observe backoff delays instead of waiting them out.
_sleep = asyncio.sleep

_MAX_DETAIL_CHARS = 300


class OpenAICompatibleLLM:
    """An :class:`~bot.engine.llm.LLM` backed by an OpenAI-compatible HTTP endpoint.

    ``abilities`` is merged over ``DEFAULT_ABILITIES``. ``timeout`` applies per attempt;
    transient failures are retried ``max_retries`` times with exponential backoff
    (``backoff_base * 2**attempt`` capped at ``backoff_max``, with jitter, or the server's
    ``Retry-After`` capped the same way).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        abilities: Mapping[str, bool] | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self._abilities = MappingProxyType({**DEFAULT_ABILITIES, **(abilities or {})})
        self._base_url = base_url
        self._api_key = api_key
        self._max_retries = max(0, max_retries)
        self._timeout = timeout
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            http_client=http_client,
        )

    @property
    def abilities(self) -> Mapping[str, bool]:
        return self._abilities

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(model={self.model!r}, base_url={self._base_url!r})"

    async def aclose(self) -> None:
        """Close the underlying HTTP client (including one passed as ``http_client``)."""
        await self._client.close()

    # -- the LLM protocol ----------------------------------------------------------------

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
        params = self._params(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        attempt = 0
        while True:
            started = self._attempt_started(params)
            try:
                completion = await self._client.chat.completions.create(**params)
                break
            except openai.APIError as exc:
                await self._recover(exc, attempt, started)
                attempt += 1
        self._answered()
        return _parse_completion(completion)

    async def transcribe(self, audio: bytes, *, file_name: str, model: str) -> str:
        """The text of a recording, from the endpoint's ``/audio/transcriptions`` (e.g.
        ``whisper-1``); retried and mapped to engine errors like a chat call."""
        attempt = 0
        while True:
            options: dict[str, Any] = {}
            started = self._attempt_started(options)
            try:
                result = await self._client.audio.transcriptions.create(
                    model=model, file=(file_name, audio), **options
                )
                self._answered()
                return str(getattr(result, "text", "") or "").strip()
            except openai.APIError as exc:
                await self._recover(exc, attempt, started)
                attempt += 1

    async def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamDelta]:
        """Yield text deltas as they arrive, then one final delta with tool calls and usage.

        A failure before anything was yielded is retried like ``chat``. After that, a retry
        would repeat text the reader already has, so it raises ``LLMStreamInterrupted``
        carrying the content delivered so far instead.
        """
        params = self._params(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        params.update(stream=True, stream_options={"include_usage": True})
        attempt = 0
        while True:
            turn = _StreamedTurn()
            started = self._attempt_started(params)
            try:
                stream = await self._client.chat.completions.create(**params)
                async with stream:  # releases the connection if the reader stops early
                    async for chunk in stream:
                        if not turn.heard:
                            turn.heard = True
                            self._answered()  # the model is answering: not failing
                        delta = turn.feed(chunk)
                        if delta is not None:
                            yield delta
                break
            except openai.APIError as exc:
                if turn.yielded:
                    raise self._interrupted(exc, turn) from _safe_cause(exc)
                await self._recover(exc, attempt, started)
                attempt += 1
        self._answered()
        yield turn.final_delta()

    # -- requests --------------------------------------------------------------------------

    def _params(self, messages: Sequence[Message], **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [_message_to_wire(m) for m in messages],
        }
        # Omitted, not null: several compatible servers reject explicit nulls, and OpenAI
        # rejects an empty ``tools`` list.
        for name, value in options.items():
            if value is None or (name == "tools" and not value):
                continue
            if name == "tools":
                value = [dict(tool) for tool in value]
            elif isinstance(value, Mapping):
                value = dict(value)
            params[name] = value
        return params

    # -- failures --------------------------------------------------------------------------

    def _attempt_started(self, options: dict[str, Any]) -> float:
        """When the attempt about to start began; inside an armed turn deadline its
        timeout goes into ``options``, cut to what is left (or it raises, nothing left)."""
        deadline = current_model_deadline()
        if deadline is None:
            return 0.0
        started = deadline.now()
        options.pop("timeout", None)
        if deadline.armed:
            options["timeout"] = deadline.attempt_timeout(self._timeout, self.model)
        return started

    def _answered(self) -> None:
        deadline = current_model_deadline()
        if deadline is not None:
            deadline.answered()

    async def _recover(self, exc: openai.APIError, attempt: int, started: float) -> None:
        """Wait before the next attempt, or raise the engine error ``exc`` amounts to."""
        fatal = self._request_error(exc)
        if fatal is not None:
            raise fatal from _safe_cause(exc)
        reason = self._describe(exc)
        deadline = current_model_deadline()
        if deadline is not None:
            deadline.failed(started)
        if attempt >= self._max_retries:
            raise LLMTransientError(
                f"{self.model}: {reason}; gave up after {attempt + 1} attempts"
            ) from _safe_cause(exc)
        delay = self._delay(attempt, exc)
        if deadline is not None and not deadline.allows_wait(delay):
            logger.warning("LLM %s: %s; the turn's model deadline passed", self.model, reason)
            raise deadline.exceeded(self.model) from _safe_cause(exc)
        logger.warning(
            "LLM %s: %s; retry %d/%d in %.2fs",
            self.model,
            reason,
            attempt + 1,
            self._max_retries,
            delay,
        )
        await _sleep(delay)

    def _request_error(self, exc: openai.APIError) -> LLMRequestError | None:
        """The non-retryable error for a refused request, or None when ``exc`` is transient.

        What the error says decides, then its status (``bot.engine.llm_errors``): a 500
        saying "image input is not supported" is a refusal of the images, not a server
        failure to retry; a 400 saying the prompt is too long is not a refusal of images.
        """
        if isinstance(exc, openai.APIConnectionError):
            # Connection failures and timeouts: nothing was said, try again; but not a
            # certificate nobody trusts or a proxy wanting credentials (the same again).
            problem = _lasting_connection_problem(exc)
            return None if problem is None else LLMRequestError(f"{self.model}: {problem}")
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if status == 407:  # an http:// endpoint behind the proxy: the proxy's own answer
            return LLMRequestError(f"{self.model}: {_PROXY_WANTS_CREDENTIALS}", status_code=407)
        kind = classify_error(status, code=exc.code, error_type=exc.type, message=_said(exc))
        if kind in RETRIED:
            return None
        where = f"HTTP {status}" if status is not None else "stream error"
        message = f"{self.model}: {where}: {self._detail(exc)}"
        if kind == "context":
            return LLMContextOverflow(message, status_code=status)
        if kind == "images":
            return LLMImagesUnsupported(message, status_code=status)
        if kind == "auth":
            return LLMAuthError(message, status_code=status)
        return LLMRequestError(message, status_code=status)

    def _interrupted(self, exc: openai.APIError, turn: _StreamedTurn) -> LLMStreamInterrupted:
        message = f"{self.model}: stream broke after partial output: {self._describe(exc)}"
        logger.warning("LLM %s: stream interrupted (%s)", self.model, self._describe(exc))
        return LLMStreamInterrupted(message, delivered=turn.delivered)

    def _describe(self, exc: openai.APIError) -> str:
        if isinstance(exc, openai.APIStatusError):
            return f"HTTP {exc.status_code}: {self._detail(exc)}"
        if isinstance(exc, openai.APITimeoutError):
            return "request timed out"
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            problem = _lasting_connection_problem(exc)
            if problem is not None:
                return problem
            return f"connection error ({type(cause).__name__ if cause else 'unknown'})"
        return f"stream error: {self._detail(exc)}"

    def _detail(self, exc: openai.APIError) -> str:
        """The server's own error message, shortened and with the API key masked."""
        body = exc.body
        text = body.get("message") if isinstance(body, Mapping) else None
        if not isinstance(text, str) or not text:
            text = exc.message
        if len(text) > _MAX_DETAIL_CHARS:
            text = text[:_MAX_DETAIL_CHARS] + "…"
        # Servers do echo keys back ("Incorrect API key provided: sk-...").
        return text.replace(self._api_key, "***") if self._api_key else text

    def _delay(self, attempt: int, exc: openai.APIError) -> float:
        retry_after = _retry_after_seconds(exc)
        if retry_after is not None:
            return min(retry_after, self._backoff_max)
        step = min(self._backoff_max, self._backoff_base * 2**attempt)
        # Half fixed, half random: concurrent callers spread out, none retries at once.
        return float(step / 2 + random.uniform(0, step / 2))


# -- the wire, outbound ----------------------------------------------------------------------


def _message_to_wire(message: Message) -> dict[str, Any]:
    # ``pinned`` and ``kind`` are ours, and ``reasoning_content`` is never sent back:
    # DeepSeek rejects requests that echo it.
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:
        wire["content"] = _content_parts(message)
    if message.tool_calls:
        wire["tool_calls"] = [_tool_call_to_wire(call) for call in message.tool_calls]
        # Mirror what the API itself returns for a tool-call turn without text.
        wire["content"] = message.content or None
    if message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id
    elif message.name:
        wire["name"] = message.name
    return wire


def _content_parts(message: Message) -> list[dict[str, Any]]:
    """Text first, then the images: what vision endpoints document for a user turn."""
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    for image in message.images:
        parts.append({"type": "image_url", "image_url": {"url": image.url, "detail": image.detail}})
    return parts


def _tool_call_to_wire(call: ToolCall) -> dict[str, Any]:
    arguments = call.raw_arguments or json.dumps(dict(call.arguments), ensure_ascii=False)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


# -- the wire, inbound -----------------------------------------------------------------------


def _parse_completion(completion: Any) -> LLMResponse:
    choices = getattr(completion, "choices", None)
    if not choices:
        raise LLMResponseError("the endpoint answered without any choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise LLMResponseError("the endpoint returned a choice without a message")
    calls = []
    for index, wire_call in enumerate(message.tool_calls or ()):
        function = getattr(wire_call, "function", None)
        if function is None:  # a non-function ("custom") tool call: not ours
            logger.warning("ignoring non-function tool call of type %r", wire_call.type)
            continue
        call_id = wire_call.id or f"call_{index}"
        calls.append(_tool_call(call_id, function.name or "", function.arguments))
    return LLMResponse(
        content=message.content or "",
        tool_calls=tuple(calls),
        reasoning_content=_reasoning(message),
        usage=_usage(getattr(completion, "usage", None)),
        finish_reason=choice.finish_reason,
        model=getattr(completion, "model", None),
    )


def _tool_call(call_id: str, name: str, raw: str | None) -> ToolCall:
    raw = raw or ""
    arguments, error = decode_arguments(raw)
    return ToolCall(call_id, name, arguments, raw_arguments=raw, parse_error=error)


def _reasoning(message: Any) -> str | None:
    # DeepSeek-style ``reasoning_content`` is not part of the SDK's schema; it arrives as
    # an extra field. Fall back to the attribute in case a future SDK declares it.
    extra = getattr(message, "model_extra", None) or {}
    value = extra.get("reasoning_content", getattr(message, "reasoning_content", None))
    return value if isinstance(value, str) else None


def _usage(usage: Any) -> Usage:
    if usage is None:
        return ZERO_USAGE
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    total = int(getattr(usage, "total_tokens", 0) or 0) or prompt + completion
    return Usage(prompt, completion, total)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _StreamedTurn:
    """One streamed turn: the text handed out so far, tool-call fragments, usage."""

    def __init__(self) -> None:
        self.yielded = False
        self.heard = False  # any chunk arrived
        self._content: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None
        self._finish_reason: str | None = None

    @property
    def delivered(self) -> str:
        return "".join(self._content)

    def feed(self, chunk: Any) -> StreamDelta | None:
        """Absorb one chunk; return the text delta to hand out, if it carries text."""
        if getattr(chunk, "usage", None) is not None:
            self._usage = _usage(chunk.usage)
        choices = getattr(chunk, "choices", None)
        if not choices:  # the trailing usage chunk has none
            return None
        choice = choices[0]
        self._finish_reason = choice.finish_reason or self._finish_reason
        delta = choice.delta
        if delta is None:
            return None
        for fragment in delta.tool_calls or ():
            self._add_fragment(fragment)
        content = delta.content or ""
        reasoning = _reasoning(delta) or ""
        if not content and not reasoning:
            return None  # e.g. the opening role-only chunk
        self._content.append(content)
        self.yielded = True
        return StreamDelta(content=content, reasoning_content=reasoning)

    def _add_fragment(self, fragment: Any) -> None:
        index = getattr(fragment, "index", None)
        if index is None:  # some servers omit it: a new id starts a new call
            index = len(self._calls) - 1 if self._calls and not fragment.id else len(self._calls)
        call = self._calls.setdefault(index, _PartialCall())
        # id and name come once, on a call's first fragment; arguments come in pieces.
        call.id = call.id or fragment.id or ""
        function = fragment.function
        if function is not None:
            call.name = call.name or function.name or ""
            if function.arguments:
                call.arguments.append(function.arguments)

    def final_delta(self) -> StreamDelta:
        calls = tuple(
            _tool_call(call.id or f"call_{index}", call.name, "".join(call.arguments))
            for index, call in sorted(self._calls.items())
        )
        return StreamDelta(
            tool_calls=calls,
            usage=self._usage or ZERO_USAGE,
            finish_reason=self._finish_reason,
        )


# -- helpers -----------------------------------------------------------------------------------


def _retry_after_seconds(exc: openai.APIError) -> float | None:
    """The server's requested wait (``retry-after-ms`` or ``Retry-After``), if any."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:  # the HTTP-date form
        parsed = email.utils.parsedate_tz(value)
        if parsed is not None:
            return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    return None


def _said(exc: openai.APIError) -> str:
    """Everything the error says in words: its body's message and the SDK's summary (which
    holds the body when it has no ``message``, e.g. Ollama's ``{"error": "..."}``)."""
    body = exc.body
    message = body.get("message") if isinstance(body, Mapping) else body
    return f"{message if isinstance(message, str) else ''} {exc.message}"


_PROXY_WANTS_CREDENTIALS = (
    "the proxy wants credentials (HTTP 407): put them in HTTPS_PROXY / HTTP_PROXY "
    "(http://user:password@host:port)"
)


def _lasting_connection_problem(exc: BaseException) -> str | None:
    """What no retry fixes, found in the chain of causes: the endpoint's certificate is
    not one the bot trusts (a TLS-inspecting proxy's CA not given), or the egress proxy
    wants credentials."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            why = current.verify_message or current.reason or "verify failed"
            return (
                f"the endpoint's TLS certificate is not trusted ({why}); trust its CA "
                "with LARKGATE_CA_BUNDLE or SSL_CERT_FILE"
            )
        if isinstance(current, httpx2.ProxyError) and "407" in str(current):
            return _PROXY_WANTS_CREDENTIALS
        current = current.__cause__ or current.__context__
    return None


def _safe_cause(exc: openai.APIError) -> BaseException | None:
    # A status error's text is the server's body, which may echo the API key; our own
    # message already carries the masked detail, so that cause is dropped from the chain.
    # Connection errors keep theirs: it names the network failure and holds no secrets.
    return None if isinstance(exc, openai.APIStatusError) else exc
