"""The request headers the model may set on the HTTP connector's calls.

A header can change what a request does far more than its URL suggests:
``X-HTTP-Method-Override: DELETE`` turns the read tool's GET into a delete on many
frameworks, ``Host`` / ``X-Forwarded-*`` fool virtual hosts and IP allowlists,
``Authorization`` / ``Cookie`` act as someone, and the framing headers
(``Content-Length``, ``Transfer-Encoding``, ``Connection``) smuggle requests. So the
model may set only the headers an allowlist names (by default content negotiation
and conditional or partial requests), and any other header is refused with the list,
never silently dropped: the model then knows what was (not) sent.

Some headers may never be set by the model, whatever the allowlist says; configured
headers (the connector's own credentials) may not be overridden either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from bot.engine import ToolError

# What the read tool (and the write tool) accept by default.
DEFAULT_REQUEST_HEADERS = (
    "Accept",
    "Accept-Language",
    "Cache-Control",
    "If-Match",
    "If-Modified-Since",
    "If-None-Match",
    "If-Range",
    "If-Unmodified-Since",
    "Range",
)
# What only the write tool adds: it sends a body, and may make a retry safe.
WRITE_REQUEST_HEADERS = ("Content-Type", "Idempotency-Key")

# Framing, hop-by-hop and transport headers: the HTTP client owns them. Neither the
# model nor the configuration may set them.
_FRAMING = frozenset(
    {
        "accept-encoding",  # only encodings the body reader can bound
        "connection",
        "content-encoding",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Never settable by the model, whatever the allowlist says: the above, and identity,
# client address, target rewriting and method overrides.
_NEVER = _FRAMING | {
    "authorization",
    "cookie",
    "forwarded",
    "true-client-ip",
    "x-client-ip",
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
    "x-original-url",
    "x-real-ip",
    "x-rewrite-url",
}
_NEVER_PREFIXES = ("proxy-", "x-forwarded-", "sec-")
# RFC 9110 token characters: printable ASCII without separators.
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
# Printable ASCII and horizontal tab; no CR, LF, NUL or other controls.
_VALUE = re.compile(r"[\t\x20-\x7e]*")
MAX_VALUE_CHARS = 4096
MAX_HEADERS = 20


def check_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a valid header name (ASCII token, ≤64 chars)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid header name {name!r}: use ASCII letters, digits and -, up to 64 characters"
        )


def check_value(name: str, value: str) -> None:
    """Raise ValueError unless ``value`` is printable ASCII without line breaks."""
    if not isinstance(value, str):
        raise ValueError(f"header {name}: the value must be text")
    if "\r" in value or "\n" in value:
        raise ValueError(f"header {name} contains a line break")
    if not _VALUE.fullmatch(value):
        raise ValueError(
            f"header {name} contains control or non-ASCII characters; percent-encode them"
        )
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"header {name} is longer than {MAX_VALUE_CHARS} characters")


def is_framing(name: str) -> bool:
    """Whether ``name`` is a header the HTTP client itself must own."""
    lowered = name.lower()
    return lowered in _FRAMING or lowered.startswith("proxy-")


def never_settable(name: str) -> bool:
    """Whether no allowlist may let the model set ``name``."""
    lowered = name.lower()
    return lowered in _NEVER or lowered.startswith(_NEVER_PREFIXES)


class HeaderPolicy:
    """The headers one tool lets the model set, and the check of what it asked for."""

    def __init__(self, allowed: Iterable[str], configured: Iterable[str] = ()) -> None:
        self._configured = {name.lower() for name in configured}
        names: dict[str, str] = {}
        for name in allowed:
            lowered = name.lower()
            if not never_settable(name) and lowered not in self._configured:
                names.setdefault(lowered, name)
        self._allowed = names

    @property
    def allowed(self) -> list[str]:
        return sorted(self._allowed.values(), key=str.lower)

    def describe(self) -> str:
        return ", ".join(self.allowed) or "none"

    def check(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The headers to send; a ToolError naming the problem (and the allowed ones)."""
        if len(headers) > MAX_HEADERS:
            raise ToolError(f"at most {MAX_HEADERS} headers; nothing was sent")
        refused: list[str] = []
        seen: set[str] = set()
        checked: dict[str, str] = {}
        for name, value in headers.items():
            try:
                check_name(name)
                check_value(name, value)
            except ValueError as exc:
                raise ToolError(f"{exc}; nothing was sent") from None
            lowered = name.lower()
            if lowered in seen:
                raise ToolError(f"header {name} is given twice; nothing was sent")
            seen.add(lowered)
            if lowered in self._configured:
                raise ToolError(
                    f"the {name} header is set by the connector's configuration and cannot"
                    " be changed; nothing was sent"
                )
            if lowered not in self._allowed:
                refused.append(name)
                continue
            checked[self._allowed[lowered]] = value
        if refused:
            raise ToolError(
                f"{'this header is' if len(refused) == 1 else 'these headers are'} not allowed:"
                f" {', '.join(refused)}; nothing was sent. Headers this tool may set:"
                f" {self.describe()}"
            )
        return checked


__all__ = [
    "DEFAULT_REQUEST_HEADERS",
    "MAX_HEADERS",
    "WRITE_REQUEST_HEADERS",
    "HeaderPolicy",
    "check_name",
    "check_value",
    "is_framing",
    "never_settable",
]
