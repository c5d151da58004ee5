"""Structured output from any model, degrading gracefully.

``structured_llm_call`` tries, in order and as the model's abilities allow:

1. ``native``: one forced function call whose parameters are the schema;
2. ``json_mode``: ``response_format={"type": "json_object"}``, one reformat retry;
3. ``plain_text``: JSON found in free text by ``extract_json`` (or ``regex_fallback``),
   one reformat retry.

A level succeeds when it yields a JSON object that ``parse_fn`` (if given) accepts,
i.e. returns something other than None without raising: a reply that parses is the
answer, one call. Only replies that do not parse move on (a reformat retry, the next
level). When every level fails the call returns ``default_value`` with level
``"default"``, or raises ``StructuredOutputError`` when no default was given. Usage adds
up across all calls.

A failed request is not a reply that did not parse. A timeout, a connection error, a
server error or a refusal (auth, rate limit, a prompt too long for the model) would
fail the same way at every level, so it ends the call at once, as if every level had
failed: the provider already retried it within its bounds (and the turn's model
deadline, ``bot.engine.model_deadline``), and walking three levels with retries each
multiplied a hung model's silence by five. The one refusal that moves on is a level's own
feature refused (HTTP 400/422 to the forced function call or ``response_format``, or
an endpoint saying it takes no tools, whatever the status): the next level sends a
request without it. An endpoint answer that is not a
completion at all (``LLMResponseError``) counts as a reply that did not parse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from .json_extract import extract_json
from .llm import LLM, LLMContextOverflow, LLMError, LLMRequestError, LLMResponseError
from .llm_errors import classify_error
from .messages import Message, MessageLike, Usage, as_messages

logger = logging.getLogger(__name__)

T = TypeVar("T")
Level = Literal["native", "json_mode", "plain_text", "default"]

_MISSING: Any = object()

# How servers refuse a parameter they do not support (tools, tool_choice, response_format).
_FEATURE_REFUSED = frozenset({400, 422})

_REFORMAT_PROMPT = (
    "Your previous reply could not be parsed. Reply again with only one JSON object "
    "that matches this schema, with no prose and no code fences:\n{schema}"
)
_JSON_INSTRUCTION = "Reply with only one JSON object that matches this schema:\n{schema}"


class StructuredOutputError(ValueError):
    """No level produced a usable object and no ``default_value`` was given."""


@dataclass(frozen=True, slots=True)
class StructuredCallResult(Generic[T]):
    value: T
    raw: str
    level: Level
    usage: Usage


@dataclass(slots=True)
class _Attempt:
    data: dict[str, Any] | None
    raw: str


async def structured_llm_call(
    llm: LLM,
    messages: Sequence[MessageLike],
    schema: Mapping[str, Any],
    *,
    function_name: str = "respond",
    parse_fn: Callable[[dict[str, Any]], T | None] | None = None,
    default_value: Any = _MISSING,
    regex_fallback: Callable[[str], dict[str, Any] | None] | None = None,
    max_tokens: int | None = None,
) -> StructuredCallResult[Any]:
    """Ask ``llm`` for an object matching ``schema``; see the module docstring.

    ``max_tokens`` bounds each reply of the text levels (JSON mode, plain text): a small
    local model held to a JSON grammar can write whitespace until its context is full,
    minutes of a one-slot server. The native level is left unbounded (some providers'
    reasoning models refuse ``max_tokens`` and take only their own parameter).
    """
    call = _StructuredCall(
        llm, as_messages(messages), dict(schema), function_name, regex_fallback, max_tokens
    )
    abilities = llm.abilities
    levels: list[Level] = []
    if abilities.get("tool_call") and abilities.get("tool_choice", True):
        levels.append("native")
    if abilities.get("json_mode"):
        levels.append("json_mode")
    levels.append("plain_text")

    failure: LLMError | None = None
    for level in levels:
        try:
            attempt = await call.attempt(level, retry_of=None)
            value = _accept(attempt, parse_fn)
            if value is _MISSING and level != "native" and attempt.raw:
                attempt = await call.attempt(level, retry_of=attempt.raw)
                value = _accept(attempt, parse_fn)
        except LLMError as exc:
            logger.warning("structured call %s, level %s: %s", function_name, level, exc)
            if not _moves_on(exc, level):
                failure = exc
                break
            continue
        if value is not _MISSING:
            return StructuredCallResult(value, attempt.raw, level, call.usage)
        logger.debug("structured call %s: level %s failed", function_name, level)

    if default_value is not _MISSING:
        return StructuredCallResult(default_value, call.last_raw, "default", call.usage)
    if failure is not None:
        raise StructuredOutputError(
            f"no structured output for {function_name}: the model call failed: {failure}"
        ) from failure
    raise StructuredOutputError(
        f"no structured output for {function_name}; last reply: {call.last_raw[:200]!r}"
    )


def _moves_on(exc: LLMError, level: Level) -> bool:
    """Whether a failed request at ``level`` lets the next level try (see the module
    docstring): a malformed answer, or the level's own feature refused."""
    if isinstance(exc, LLMResponseError):
        return True
    if not isinstance(exc, LLMRequestError) or isinstance(exc, LLMContextOverflow):
        return False
    if level == "native" and classify_error(exc.status_code, message=str(exc)) == "tools":
        return True  # e.g. llama.cpp without --jinja says so with a 500
    return exc.status_code in _FEATURE_REFUSED and level != "plain_text"


def _accept(attempt: _Attempt, parse_fn: Callable[[dict[str, Any]], Any] | None) -> Any:
    if attempt.data is None:
        return _MISSING
    if parse_fn is None:
        return attempt.data
    try:
        value = parse_fn(attempt.data)
    except Exception:  # a parse_fn that rejects the data means "try the next level"
        logger.debug("parse_fn rejected %.200s", attempt.raw, exc_info=True)
        return _MISSING
    return _MISSING if value is None else value


class _StructuredCall:
    def __init__(
        self,
        llm: LLM,
        messages: list[Message],
        schema: dict[str, Any],
        function_name: str,
        regex_fallback: Callable[[str], dict[str, Any] | None] | None,
        max_tokens: int | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.llm = llm
        self.messages = messages
        self.schema = schema
        self.schema_text = json.dumps(schema, ensure_ascii=False)
        self.function_name = function_name
        self.regex_fallback = regex_fallback
        self.usage = Usage()
        self.last_raw = ""

    async def attempt(self, level: Level, *, retry_of: str | None) -> _Attempt:
        """One request at ``level``; a failed request raises its ``LLMError``."""
        if level == "native":
            return await self._native()
        return await self._text(level, retry_of)

    async def _native(self) -> _Attempt:
        tool = {
            "type": "function",
            "function": {
                "name": self.function_name,
                "description": "Return the result as structured data.",
                "parameters": self.schema,
            },
        }
        response = await self.llm.chat(
            self.messages,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": self.function_name}},
        )
        self.usage += response.usage
        for call in response.tool_calls:
            if call.name == self.function_name and call.parse_error is None:
                raw = call.raw_arguments or json.dumps(dict(call.arguments), ensure_ascii=False)
                self.last_raw = raw
                return _Attempt(dict(call.arguments), raw)
        # Some servers ignore tool_choice and answer in content.
        self.last_raw = response.content or self.last_raw
        return _Attempt(extract_json(response.content), response.content)

    async def _text(self, level: Level, retry_of: str | None) -> _Attempt:
        messages = [*self.messages, Message.user(_JSON_INSTRUCTION.format(schema=self.schema_text))]
        if retry_of is not None:
            messages += [
                Message.assistant(retry_of),
                Message.user(_REFORMAT_PROMPT.format(schema=self.schema_text), kind="reformat"),
            ]
        response = await self.llm.chat(
            messages,
            response_format={"type": "json_object"} if level == "json_mode" else None,
            max_tokens=self.max_tokens,
        )
        self.usage += response.usage
        content = response.content or ""
        if content:
            self.last_raw = content
        data = extract_json(content)
        if data is None and level == "plain_text" and self.regex_fallback is not None:
            try:
                data = self.regex_fallback(content)
            except Exception:  # a failing fallback is just no result
                logger.debug("regex_fallback failed", exc_info=True)
                data = None
        return _Attempt(data, content)
