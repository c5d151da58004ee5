"""What an OpenAI-compatible endpoint can do, asked of it once with a few tiny requests.

"OpenAI-compatible" covers servers that differ where the engine cares most: llama.cpp
ignores or refuses ``tools`` without its ``--jinja`` templates (older builds), vLLM calls
a tool when one is forced but refuses ``tool_choice: auto`` unless started with
``--enable-auto-tool-choice``, Ollama refuses ``tools`` for models without a tool
template, and some servers answer a tool request with plain text. The engine has a JSON
mode for every such server; :func:`probe_endpoint` finds out which mode this one needs:

- **tool calls**: one request with one tool and a question that needs it, the tool
  *not* forced, as the loop sends its requests. A tool call: ``native``. Text or a
  refusal: once more with the tool forced (``tool_choice``), as structured calls send
  theirs. A tool call then: ``forced`` (the server can call tools but will not choose
  one itself); text: ``ignored``; a refusal: ``refused``. No answer: ``unknown``.
- **JSON mode**: one request with ``response_format: json_object``: ``accepted``
  unless refused (a 4xx).
- **context length**, when the server says it: ``GET /models`` (vLLM's
  ``max_model_len``, OpenRouter's ``context_length``, Groq's ``context_window``), and for
  llama.cpp, whose listing has only the model's trained length (``meta.n_ctx_train``),
  the length the server was started with, from ``GET /props``.

All run at once, each with a short timeout, and nothing they raise escapes: a server
that cannot be reached gives a report of ``unknown`` with the reason in ``notes``.
Every probe request carries the ``X-Larkgate-Probe`` header, so that a server's logs (and
the tests' fake server) can tell it from a question.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import openai

from .llm_errors import classify_error

logger = logging.getLogger(__name__)

PROBE_HEADER = "X-Larkgate-Probe"
PROBE_TIMEOUT = 30.0  # seconds a probe request may take: a small model on a CPU is slow
# Room for a tool call after a short thought; a reply cut here tells nothing (``unknown``).
PROBE_MAX_TOKENS = 256

ToolCallSupport = Literal["native", "forced", "ignored", "refused", "unknown"]
JsonModeSupport = Literal["accepted", "refused", "unknown"]

_TOOL_NAME = "get_current_time"
_TOOL = {
    "type": "function",
    "function": {
        "name": _TOOL_NAME,
        "description": "The current local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name."}},
            "required": ["city"],
        },
    },
}
_TOOL_QUESTION = [
    {"role": "user", "content": f"What time is it in Paris? Use the {_TOOL_NAME} tool."}
]
_FORCED = {"type": "function", "function": {"name": _TOOL_NAME}}
_JSON_QUESTION = [
    {"role": "system", "content": "You answer with one JSON object and nothing else."},
    {"role": "user", "content": 'Reply with the JSON object {"ok": true}.'},
]


@dataclass(frozen=True, slots=True)
class EndpointReport:
    """What the probe found; ``notes`` say why something is ``unknown`` or refused."""

    tool_calls: ToolCallSupport = "unknown"
    json_mode: JsonModeSupport = "unknown"
    context_length: int | None = None
    context_source: str = ""  # where the length was read, e.g. "/props n_ctx"
    notes: tuple[str, ...] = ()

    @property
    def answered(self) -> bool:
        """Whether the endpoint answered at all (a refusal is an answer)."""
        return self.tool_calls != "unknown" or self.json_mode != "unknown"

    def describe(self) -> str:
        """One line: what was found, and why where it matters."""
        tools = {
            "native": "native (it called the probe's tool)",
            "forced": "only when forced (it called the probe's tool only with tool_choice)",
            "ignored": "ignored (it answered a tool request in text)",
            "refused": "refused",
            "unknown": "not known",
        }[self.tool_calls]
        json_mode = "not known" if self.json_mode == "unknown" else self.json_mode
        parts = [f"tool calls {tools}", f"JSON mode {json_mode}"]
        if self.context_length:
            parts.append(f"context {self.context_length:,} tokens ({self.context_source})")
        text = "; ".join(parts)
        return f"{text} [{'; '.join(self.notes)}]" if self.notes else text


async def probe_endpoint(
    base_url: str,
    api_key: str,
    model: str,
    *,
    request_timeout: float = PROBE_TIMEOUT,
    http_client: httpx2.AsyncClient | None = None,
) -> EndpointReport:
    """Ask the endpoint what it can do (see the module docstring); never raises.
    ``request_timeout`` bounds each request (a tool request may be followed by another);
    ``http_client`` (closed here) carries the deployment's proxies and CA."""
    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        timeout=request_timeout,
        max_retries=0,
        http_client=http_client,
    )
    try:
        (tools, tool_note), (json_mode, json_note), (length, source) = await asyncio.gather(
            _tool_calls(client, model), _json_mode(client, model), _context_length(client, model)
        )
    except Exception as exc:  # a probe must never stop the bot; say what happened
        logger.warning("probing %s failed", model, exc_info=True)
        return EndpointReport(notes=(f"the probe failed: {type(exc).__name__}",))
    finally:
        await client.close()
    notes = tuple(note for note in (tool_note, json_note) if note)
    return EndpointReport(tools, json_mode, length, source, notes)


# -- tool calls --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Answer:
    kind: Literal["called", "text", "refused", "unanswered"]
    note: str = ""


async def _tool_calls(client: openai.AsyncOpenAI, model: str) -> tuple[ToolCallSupport, str]:
    chosen = await _ask_with_tool(client, model, forced=False)
    if chosen.kind == "called":
        return "native", ""
    if chosen.kind == "unanswered":
        return "unknown", chosen.note
    forced = await _ask_with_tool(client, model, forced=True)
    if forced.kind == "called":
        return "forced", chosen.note or "with the tool not forced, it answered in text"
    if "refused" in (chosen.kind, forced.kind):
        return "refused", chosen.note or forced.note
    return "ignored", ""


async def _ask_with_tool(client: openai.AsyncOpenAI, model: str, *, forced: bool) -> _Answer:
    request = _request(model, _TOOL_QUESTION, "tool_call", tools=[_TOOL])
    if forced:
        request["tool_choice"] = _FORCED
    try:
        completion = await _create(client, request)
    except openai.APIError as exc:
        refused = _refusal(exc)
        return _Answer("refused" if refused else "unanswered", _failure(exc))
    choices = completion.choices or []
    if not choices:
        return _Answer("unanswered", "a tool request was answered without choices")
    if choices[0].message.tool_calls:
        return _Answer("called")
    if choices[0].finish_reason == "length":
        return _Answer("unanswered", "the reply to a tool request was cut at max_tokens")
    return _Answer("text")


# -- JSON mode ---------------------------------------------------------------------------------


async def _json_mode(client: openai.AsyncOpenAI, model: str) -> tuple[JsonModeSupport, str]:
    request = _request(model, _JSON_QUESTION, "json_mode", response_format={"type": "json_object"})
    try:
        await _create(client, request)
    except openai.APIError as exc:
        if _refusal(exc):
            return "refused", f"JSON mode: {_failure(exc)}"
        return "unknown", f"JSON mode: {_failure(exc)}"
    return "accepted", ""


def _request(
    model: str, messages: list[dict[str, str]], what: str, **options: Any
) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
        "extra_headers": {PROBE_HEADER: what},
        **options,
    }


async def _create(client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
    """The completion for ``request``, asked again once without the probe's sampling
    limits when the model refuses them (OpenAI's reasoning models take no ``temperature``
    and want ``max_completion_tokens``): a refused limit says nothing of tools."""
    try:
        return await client.chat.completions.create(**request)
    except openai.BadRequestError as exc:
        if not _refuses_limits(exc):
            raise
    plain = {k: v for k, v in request.items() if k not in ("max_tokens", "temperature")}
    return await client.chat.completions.create(max_completion_tokens=PROBE_MAX_TOKENS, **plain)


def _refuses_limits(exc: openai.APIStatusError) -> bool:
    if exc.param in ("max_tokens", "temperature"):
        return True
    said = _said(exc).lower()
    return "unsupported" in said and ("max_tokens" in said or "temperature" in said)


def _said(exc: openai.APIError) -> str:
    body = exc.body
    said = body.get("message") if isinstance(body, Mapping) else body
    return f"{said if isinstance(said, str) else ''} {exc.message}"


def _refusal(exc: openai.APIError) -> bool:
    """A refusal of the request's feature (tools, tool_choice, response_format), as opposed
    to no answer (timeouts, server errors, a wrong key or model)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code == 404:
        return False
    kind = classify_error(exc.status_code, code=exc.code, error_type=exc.type, message=_said(exc))
    return kind in ("tools", "refused")


def _failure(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "could not connect"
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        said = body.get("message") if isinstance(body, Mapping) else body
        return f"HTTP {exc.status_code}: {str(said or exc.message)[:200]}"
    return str(exc)[:200]


# -- context length ----------------------------------------------------------------------------


async def _context_length(client: openai.AsyncOpenAI, model: str) -> tuple[int | None, str]:
    listing = await _get_json(client, "/models", "models")
    entry = _entry_for(listing, model)
    if entry is None:
        return None, ""
    for source, value in _declared_lengths(entry):
        if value:
            return value, f"/models {source}"
    meta = entry.get("meta")
    trained = _positive(meta.get("n_ctx_train")) if isinstance(meta, Mapping) else None
    if trained is None:
        return None, ""
    # llama.cpp: the listing has the model's trained length; the server's own (-c) is
    # in /props, at the server's root (the base URL without its /v1).
    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    props = await _get_json(client, f"{root}/props", "props")
    settings = props.get("default_generation_settings") if isinstance(props, Mapping) else None
    served = _positive(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    if served is not None:
        return served, "/props default_generation_settings.n_ctx"
    return trained, "/models meta.n_ctx_train, the model's trained length"


def _declared_lengths(entry: Mapping[str, Any]) -> list[tuple[str, int | None]]:
    """What servers put in a model's listing, most specific first."""
    meta = entry.get("meta")
    provider = entry.get("top_provider")
    return [
        ("max_model_len", _positive(entry.get("max_model_len"))),  # vLLM: what it serves
        ("meta.n_ctx", _positive(meta.get("n_ctx")) if isinstance(meta, Mapping) else None),
        ("context_length", _positive(entry.get("context_length"))),  # OpenRouter
        (
            "top_provider.context_length",
            _positive(provider.get("context_length")) if isinstance(provider, Mapping) else None,
        ),
        ("context_window", _positive(entry.get("context_window"))),  # Groq
    ]


def _entry_for(listing: object, model: str) -> Mapping[str, Any] | None:
    data = listing.get("data") if isinstance(listing, Mapping) else None
    entries = [e for e in data if isinstance(e, Mapping)] if isinstance(data, list) else []
    for entry in entries:
        if entry.get("id") == model:
            return entry
    # A server of one model (llama.cpp names it by its file) answers whatever name is asked.
    return entries[0] if len(entries) == 1 else None


async def _get_json(client: openai.AsyncOpenAI, path: str, what: str) -> object:
    try:
        return await client.get(path, cast_to=object, options={"headers": {PROBE_HEADER: what}})
    except openai.APIError:
        return None  # not every server lists its models, and only llama.cpp has /props


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
