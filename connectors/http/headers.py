"""The request headers the HTTP connector sends: what the model may set, and the
operator's own (credentials) with the hosts they go to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import httpx

from bot.engine import ToolError

from .policy import HostRule, host_and_port

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
    """The headers one tool lets the model set, and the check of what it asked for.

    A header can change what a request does far more than its URL suggests:
    ``X-HTTP-Method-Override: DELETE`` turns the read tool's GET into a delete on many
    frameworks, ``Host`` / ``X-Forwarded-*`` fool virtual hosts and IP allowlists,
    ``Authorization`` / ``Cookie`` act as someone, and the framing headers smuggle
    requests. So only the headers an allowlist names pass, never one of ``_NEVER`` nor a
    configured one, and any other is refused with the list, never silently dropped: the
    model then knows what was (not) sent.
    """

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


class OperatorHeaders:
    """The configured headers (credentials) and the hosts each goes to, on every hop.

    ``everywhere`` goes to every allowed host, but follows a redirect only to the same
    origin (as httpx does with Authorization); ``per_host`` headers go only to the hosts
    their rule matches, so a key never follows a redirect to another host.
    """

    def __init__(
        self,
        everywhere: Mapping[str, str],
        per_host: Iterable[tuple[HostRule, Mapping[str, str]]],
    ) -> None:
        self.everywhere = dict(everywhere)
        # Wildcard entries first, so an exact entry's value wins where both match.
        self.per_host = sorted(
            ((rule, dict(headers)) for rule, headers in per_host), key=lambda pair: pair[0].exact
        )
        self.names = [*self.everywhere, *(name for _, h in self.per_host for name in h)]
        self.values = [
            *self.everywhere.values(),
            *(v for _, h in self.per_host for v in h.values()),
        ]
        self._lowered = {name.lower() for name in self.names}

    def apply(self, request: httpx.Request, same_origin: bool) -> None:
        """Give ``request`` exactly the configured headers its host gets."""
        for name in self._lowered:
            request.headers.pop(name, None)
        if same_origin:
            request.headers.update(self.everywhere)
        host, port = host_and_port(request.url)
        for rule, headers in self.per_host:
            if rule.matches(host, port):
                request.headers.update(headers)


__all__ = [
    "DEFAULT_REQUEST_HEADERS",
    "MAX_HEADERS",
    "WRITE_REQUEST_HEADERS",
    "HeaderPolicy",
    "OperatorHeaders",
    "check_name",
    "check_value",
    "is_framing",
    "never_settable",
]
