"""Logging for operators: text or JSON lines, the turn's ids on each line, no secrets.

- Context: the runtime binds the ids of the turn it runs (:func:`bind_log_context`:
  conversation scope key, run id, message id) in context variables, so every line logged
  inside the turn (tasks it starts included) carries them: as fields in JSON, and as
  `` [conv=… run=… msg=…]`` after the message in text.
- JSON (``LARKGATE_LOG_FORMAT=json``): one object a line with ``ts`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message``, ``exc_info`` (the formatted traceback) when there
  is one, and ``conversation`` / ``run`` / ``message_id`` when known.
- Redaction: :class:`RedactingFilter` rewrites each record before any formatter sees it:
  the secret settings' values and the connectors' secrets (as they are, URL-encoded,
  JSON-escaped or HTML-escaped: ``connectors/secret_masking.py``), tenant/user access
  tokens (``t-…``, ``u-…``), ``Bearer`` and ``Authorization`` values, credentials in URLs
  and values of secret-named fields become ``***``, in the message, its args, the
  traceback and the stack. A secret-named field is ``password``, ``apikey``, any
  ``…_token`` / ``…-secret`` / ``…_password`` / ``…_signature``, or an ``api_key`` /
  ``access-key`` / ``X-Api-Key`` -like key, followed by ``:`` or ``=`` (query strings,
  headers, JSON, ``k=v``); the bare words ``token``, ``key``, ``secret``, ``sig`` and
  ``signature`` count only as ``key=…`` or a quoted JSON key, so prose that mentions a
  key, or ``monkey=…``, is left alone.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Literal

from connectors.secret_masking import MASK, SecretMasker

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_conversation: ContextVar[str | None] = ContextVar("larkgate_log_conversation", default=None)
_run: ContextVar[str | None] = ContextVar("larkgate_log_run", default=None)
_message: ContextVar[str | None] = ContextVar("larkgate_log_message", default=None)
# (record attribute, JSON field, text label, variable)
_FIELDS = (
    ("conversation", "conversation", "conv", _conversation),
    ("run", "run", "run", _run),
    ("message_id", "message_id", "msg", _message),
)


# -- context ------------------------------------------------------------------------------


def bind_log_context(
    *, conversation: str | None = None, run: str | None = None, message: str | None = None
) -> None:
    """Set the ids every later line in this task (and the tasks it starts) carries."""
    for variable, value in ((_conversation, conversation), (_run, run), (_message, message)):
        if value is not None:
            variable.set(value)


@contextmanager
def log_scope() -> Iterator[None]:
    """Whatever is bound inside is unbound on the way out (a worker runs many turns)."""
    tokens = [(variable, variable.set(variable.get())) for *_, variable in _FIELDS]
    try:
        yield
    finally:
        for variable, token in reversed(tokens):
            variable.reset(token)


def log_context() -> dict[str, str]:
    """The ids bound now, by JSON field name."""
    return {field: value for _, field, _, variable in _FIELDS if (value := variable.get())}


class ContextFilter(logging.Filter):
    """Copies the bound ids onto the record (unless the call passed its own in ``extra``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for attribute, _, _, variable in _FIELDS:
            if getattr(record, attribute, None) is None:
                setattr(record, attribute, variable.get())
        return True


# -- redaction ----------------------------------------------------------------------------

_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")
_AUTHORIZATION = re.compile(
    r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?!bearer\s)((?:basic|token)\s+)?[^\s'\",;}]+"
)
_ACCESS_TOKEN = re.compile(r"\b[tu]-[A-Za-z0-9_\-]{16,}")
_URL_PASSWORD = re.compile(r"(://[^/\s:@'\"]+:)[^@\s/'\"]+@")
# Field names whose value is a secret wherever it is written: "password", "apikey",
# compounds ending in token / secret / password / signature (access_token, client-secret,
# x-amz-security-token) and keys that are credentials (api_key, Access-Key, X-Api-Key).
_STRONG_NAME = (
    r"(?:password|passwd|apikey"
    r"|(?:[a-z0-9]+[_-])+(?:token|secret|password|passwd|signature)"
    r"|(?:[a-z0-9]+[_-])*(?:api|access|secret|private|encrypt|encryption|signing|client|app"
    r"|auth|master|license|subscription|session)[_-]?key)"
)
# Bare words that are secrets only as "word=value" or a quoted key ("token": "…"): in
# prose "the key: …" is not one.
_WEAK_NAME = r"(?:token|key|secret|sig|signature)"
# A quoted value (to its closing quote) or a bare one (to a separator).
_VALUE = r"""(?!\*\*\*)(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s'",;}&)\]>]+)"""
_NOT_AFTER_NAME_CHAR = r"(?<![A-Za-z0-9_-])"
_SECRET_FIELD = re.compile(
    rf"(?i){_NOT_AFTER_NAME_CHAR}(?P<field>(?P<q>[\"']?){_STRONG_NAME}(?P=q)\s*[:=]\s*"
    rf"|(?P<wq>[\"']){_WEAK_NAME}(?P=wq)\s*[:=]\s*|{_WEAK_NAME}=){_VALUE}"
)


def _mask_field(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[0] in "\"'" else ""
    return match.group("field") + quote + MASK + quote


class Redactor:
    """Replaces secrets in text by ``***``: known values first, then shapes of secrets."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Known values in any encoding (values under 6 characters are left to the shapes:
        # masking "1" or "true" everywhere would garble every line).
        self._known = SecretMasker(secrets)

    def __call__(self, text: str) -> str:
        text = self._known.mask(text)
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
        text = _AUTHORIZATION.sub(lambda m: m.group(1) + (m.group(2) or "") + MASK, text)
        text = _ACCESS_TOKEN.sub(MASK, text)
        text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)
        return _SECRET_FIELD.sub(_mask_field, text)


_TRACEBACKS = logging.Formatter()


class RedactingFilter(logging.Filter):
    """Rewrites a record so no secret reaches a formatter: the message is rendered with
    its args and redacted (``args`` become None), the traceback and stack too."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # bad args: keep what there is, still redacted
            message = f"{record.msg!s} {record.args!r}"
        record.msg = self._redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True


# -- formats ------------------------------------------------------------------------------


class TextFormatter(logging.Formatter):
    """The classic line, with `` [conv=… run=… msg=…]`` after the message inside a turn."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        ids = [
            f"{label}={value}"
            for attribute, _, label, _ in _FIELDS
            if (value := getattr(record, attribute, None))
        ]
        return f"{line} [{' '.join(ids)}]" if ids else line


class JsonFormatter(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for attribute, field, _, _ in _FIELDS:
            value = getattr(record, attribute, None)
            if value:
                entry[field] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


# -- set-up -------------------------------------------------------------------------------


def build_handler(
    fmt: LogFormat = "text", secrets: Iterable[str] = (), stream: IO[str] | None = None
) -> logging.Handler:
    """A stream handler (stderr by default) with the context, redaction and format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactingFilter(Redactor(secrets)))
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler._larkgate = True  # type: ignore[attr-defined]  # replaced on the next call
    return handler


def configure_logging(
    level: str | int,
    fmt: LogFormat = "text",
    secrets: Iterable[str] = (),
    *,
    stream: IO[str] | None = None,
    force: bool = False,
) -> logging.Handler | None:
    """Install the handler on the root logger (replacing one installed before); returns it.

    Like ``logging.basicConfig``, it does nothing (and returns None) when the root logger
    already has handlers of someone else's, e.g. an embedding program's or pytest's,
    unless ``force``.
    """
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_larkgate", False)]
    if len(ours) < len(root.handlers) and not force:
        return None
    for old in ours:
        root.removeHandler(old)
        old.close()
    handler = build_handler(fmt, secrets, stream)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
