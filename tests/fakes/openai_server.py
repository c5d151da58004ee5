"""A scripted fake of an OpenAI-compatible chat-completions endpoint, for tests.

It is a real HTTP server (aiohttp on 127.0.0.1, a free port) that speaks the real wire
format, so the code under test runs through the genuine ``openai`` SDK and HTTP stack::

    async with FakeOpenAIServer() as server:          # or use the ``fake_openai`` fixture
        server.push_text("Hello there", usage={"prompt_tokens": 5, "completion_tokens": 2})
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

Scripting
    Every ``POST /v1/chat/completions`` consumes the next :class:`Reply` from a queue,
    filled with ``push(reply, times=n)`` or the shortcuts ``push_text``,
    ``push_tool_calls``, ``push_reasoning``, ``push_error`` and ``push_stream_drop``.
    When the queue is empty, ``server.handler`` answers if set: a function
    ``(request_body: dict) -> Reply`` (plain or async). With neither, the server answers
    400 "nothing scripted", so a missing script fails loudly and is not retried.

One reply, both shapes
    Whether a reply streams is decided by the request's ``stream`` flag. Non-streaming,
    it is one ``chat.completion`` JSON body. Streaming, it is SSE ``data: {chunk}`` events
    ending with ``data: [DONE]``: a role chunk; reasoning and content in pieces of
    ``chunk_size`` characters; each tool call as a first chunk carrying id and name, then
    its arguments in pieces; a chunk with the finish reason; and, when the request set
    ``stream_options.include_usage`` and the reply has usage, a final chunk with empty
    ``choices`` and the usage. ``Reply.drop_after=N`` cuts the connection after N chunks
    (for a non-streaming request: before any response).

Errors
    ``Reply.error(status, message, retry_after=...)`` (or ``push_error``) answers with the
    OpenAI error envelope ``{"error": {"message", "type", "param", "code"}}`` and, when
    given, a ``Retry-After`` header. Streaming requests get the same plain JSON error,
    as real servers fail before the stream starts. ``Reply(body=...)`` sends any JSON
    body verbatim with the reply's ``status``: malformed responses, and real servers' own
    error bodies (llama.cpp answers "image input is not supported" with a 500).

The bot's endpoint probe
    Requests with the ``X-Larkgate-Probe`` header (``bot.engine.probe``, at every app
    start) are answered as a server with native tool calls and JSON mode would answer
    them, without touching the script, and recorded in ``server.probes``. With
    ``server.answers_probes = False`` they are scripted and recorded like any request, so a
    test can play a server that ignores tools. ``server.models`` is what ``GET
    /v1/models`` lists, ``server.props`` what llama.cpp's ``GET /props`` answers (404: None).

Recording
    ``server.requests`` lists every request received, as :class:`RecordedRequest`
    (``.path``, ``.headers``, ``.body`` — the parsed JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from support.servers import AppServer

# (id, name, arguments). A mapping is sent as JSON; a string is sent verbatim, so tests can
# script argument text that is not valid JSON.
ToolCallSpec = tuple[str, str, Mapping[str, Any] | str]
Handler = Callable[[dict[str, Any]], "Reply | Awaitable[Reply]"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Defaults give a plain, successful completion."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    # Reported as given; ``total_tokens`` is filled in when missing. None reports no usage.
    usage: Mapping[str, int] | None = None
    # None means "tool_calls" when there are tool calls, else "stop".
    finish_reason: str | None = None
    # None echoes the model the request asked for.
    model: str | None = None
    status: int = 200
    error_message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Sent verbatim as the JSON body (non-streaming), overriding everything above.
    body: Any = None
    drop_after: int | None = None
    delay: float = 0.0
    chunk_size: int = 4
    # Seconds between streamed chunks (e.g. 0.02 with chunk_size 4: ~50 tokens a second).
    chunk_interval: float = 0.0

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        retry_after: float | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ) -> Reply:
        headers = {} if retry_after is None else {"Retry-After": _format_seconds(retry_after)}
        return cls(
            status=status,
            error_message=message or f"fake OpenAI server error {status}",
            error_type=error_type,
            error_code=code,
            headers=headers,
        )

    @property
    def effective_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def usage_body(self) -> dict[str, int] | None:
        if self.usage is None:
            return None
        usage = {"prompt_tokens": 0, "completion_tokens": 0, **self.usage}
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        return usage


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class FakeOpenAIServer(AppServer):
    """A scripted OpenAI-compatible HTTP server; see the module docstring."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.handler: Handler | None = None
        # /v1/audio/transcriptions: what it answers, and what it was sent (apart from
        # ``requests``, which tests read as chat requests). None: 404, like an endpoint
        # without transcription.
        self.transcript: str | None = None
        self.transcriptions: list[dict[str, Any]] = []
        self.answers_probes = True
        self.probes: list[RecordedRequest] = []
        self.models: list[dict[str, Any]] = []
        self.props: dict[str, Any] | None = None
        self._queue: deque[Reply] = deque()
        # Set on stop() so replies that are still sleeping (Reply.delay) end promptly.
        self._closing = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/props", self._props)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        return app

    async def stop(self) -> None:
        self._closing.set()
        await super().stop()

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    # -- scripting -----------------------------------------------------------------------

    def push(self, reply: Reply, *, times: int = 1) -> None:
        self._queue.extend([reply] * times)

    def push_text(
        self, text: str, *, usage: Mapping[str, int] | None = None, **fields: Any
    ) -> None:
        self.push(Reply(content=text, usage=usage, **fields))

    def push_tool_calls(
        self,
        calls: Sequence[ToolCallSpec],
        *,
        content: str | None = None,
        usage: Mapping[str, int] | None = None,
        **fields: Any,
    ) -> None:
        self.push(Reply(content=content, tool_calls=tuple(calls), usage=usage, **fields))

    def push_reasoning(
        self,
        reasoning: str,
        content: str = "",
        *,
        usage: Mapping[str, int] | None = None,
        **fields: Any,
    ) -> None:
        self.push(Reply(content=content, reasoning_content=reasoning, usage=usage, **fields))

    def push_error(
        self,
        status: int,
        *,
        message: str = "",
        times: int = 1,
        retry_after: float | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ) -> None:
        reply = Reply.error(
            status, message, retry_after=retry_after, code=code, error_type=error_type
        )
        self.push(reply, times=times)

    def push_stream_drop(self, text: str, *, after_chunks: int, **fields: Any) -> None:
        """A reply whose connection is cut after ``after_chunks`` chunks were sent."""
        self.push(Reply(content=text, drop_after=after_chunks, **fields))

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        return len(self._queue)

    # -- HTTP handlers -------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self.models})

    async def _props(self, request: web.Request) -> web.Response:
        if self.props is None:
            return _error_response(Reply.error(404, "File Not Found"))
        return web.json_response(self.props)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        recorded = RecordedRequest(request.method, request.path, dict(request.headers), body)
        if PROBE_HEADER in request.headers and self.answers_probes and isinstance(body, dict):
            self.probes.append(recorded)
            return web.json_response(_completion_body(_probe_reply(body), body))
        self.requests.append(recorded)
        if not isinstance(body, dict):
            return _error_response(Reply.error(400, "fake OpenAI server: body is not JSON"))
        reply = await self._next_reply(body)
        if reply.delay:
            await self._pause(reply.delay)
        if reply.body is not None:
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        if reply.status >= 400:
            return _error_response(reply)
        if body.get("stream"):
            return await self._stream(request, reply, body)
        if reply.drop_after is not None:
            _cut_connection(request)
            return web.Response()
        return web.json_response(
            _completion_body(reply, body), status=reply.status, headers=reply.headers
        )

    async def _transcriptions(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if hasattr(upload, "file") else b""
        name = getattr(upload, "filename", "")
        self.transcriptions.append({"model": form.get("model"), "file_name": name, "data": data})
        if self.transcript is None:
            return _error_response(Reply.error(404, "no transcription on this endpoint"))
        return web.json_response({"text": self.transcript})

    async def _next_reply(self, body: dict[str, Any]) -> Reply:
        if self._queue:
            return self._queue.popleft()
        if self.handler is not None:
            reply = self.handler(body)
            return await reply if inspect.isawaitable(reply) else reply
        return Reply.error(400, "fake OpenAI server: no reply scripted for this request")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    async def _stream(
        self, request: web.Request, reply: Reply, body: dict[str, Any]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-cache", **reply.headers})
        response.content_type = "text/event-stream"
        await response.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for sent, chunk in enumerate(_stream_chunks(reply, body, include_usage)):
            if sent == reply.drop_after:
                _cut_connection(request)
                return response
            if sent and reply.chunk_interval:
                await self._pause(reply.chunk_interval)  # a model generating at its pace
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if reply.drop_after is not None:
            _cut_connection(request)
            return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


# -- the bot's endpoint probe -----------------------------------------------------------------

# As the bot sends it (``bot.engine.probe.PROBE_HEADER``).
PROBE_HEADER = "X-Larkgate-Probe"


def _probe_reply(body: Mapping[str, Any]) -> Reply:
    """What a server with native tool calls and JSON mode answers: a call of the tool
    asked for (or offered), a JSON object, or a word."""
    tools = body.get("tools") or []
    if tools:
        choice = body.get("tool_choice")
        forced = choice.get("function", {}) if isinstance(choice, dict) else {}
        name = forced.get("name") or tools[0]["function"]["name"]
        return Reply(tool_calls=[("call_probe", name, {"city": "Paris"})])
    if body.get("response_format"):
        return Reply(content='{"ok": true}')
    return Reply(content="ok")


# -- wire rendering ----------------------------------------------------------------------


def _completion_body(reply: Reply, request_body: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": _arguments_text(arguments)},
            }
            for call_id, name, arguments in reply.tool_calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": reply.model or request_body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.effective_finish_reason,
                "logprobs": None,
            }
        ],
    }
    usage = reply.usage_body()
    if usage is not None:
        body["usage"] = usage
    return body


def _stream_chunks(
    reply: Reply, request_body: Mapping[str, Any], include_usage: bool
) -> Iterator[dict[str, Any]]:
    model = reply.model or request_body.get("model", "fake-model")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if include_usage:  # as OpenAI does: null on every chunk but the usage chunk
            out["usage"] = None
        return out

    # Real servers open with a role-only chunk whose content is empty.
    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.reasoning_content or "", reply.chunk_size):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(reply.content or "", reply.chunk_size):
        yield chunk({"content": piece})
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        head = {"index": index, "id": call_id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for piece in _pieces(_arguments_text(arguments), reply.chunk_size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.effective_finish_reason)
    usage = reply.usage_body()
    if include_usage and usage is not None:
        yield {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": usage,
        }


def _error_response(reply: Reply) -> web.Response:
    error = {
        "message": reply.error_message,
        "type": reply.error_type or _ERROR_TYPES.get(reply.status, "server_error"),
        "param": None,
        "code": reply.error_code,
    }
    return web.json_response({"error": error}, status=reply.status, headers=reply.headers)


def _cut_connection(request: web.Request) -> None:
    # close() (not abort()) flushes what was already written, then drops the socket, so the
    # client sees the chunks sent so far followed by an incomplete body.
    if request.transport is not None:
        request.transport.close()


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _pieces(text: str, size: int) -> Iterator[str]:
    size = max(size, 1)
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
