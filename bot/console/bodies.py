"""The console's request bodies: read once, within a bound, and parsed as untrusted JSON.

Every console route is wrapped by the guard in ``routes.py``, which calls :func:`admit`
for every request that may carry a body, after the token check and before the handler.
It reads the body with its own bound (not aiohttp's ``client_max_size``, someone else's
setting) and parses it with the webhook's reader (``bot.feishu.untrusted_json``): a body
nested 100,000 deep, a lone surrogate, ``1e999``, a repeated key or a body that is not an
object is refused with a 400 and one short log line, an oversized one with a 413, before
any handler runs. Handlers read the parsed object with :func:`json_body`. The stream is
consumed by then, so a new handler that called ``request.json()`` itself would find an
empty body, never parse the hostile one with the stdlib's recursion.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from bot.feishu.untrusted_json import MAX_BYTES, UntrustedJson, load_object

logger = logging.getLogger(__name__)

# The untrusted-JSON reader's own bound, whose pre-scan keeps the parse of any body within
# it to milliseconds (the console's bodies are a few bytes: {"on": true}).
MAX_BODY_BYTES = MAX_BYTES
# Requests that never carry a body the console reads.
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})

_BODY = web.RequestKey("console_body", dict)


async def admit(request: web.Request) -> web.Response | None:
    """Read and parse ``request``'s body for :func:`json_body`; the refusal to answer
    with instead of running the handler, or None to run it."""
    if request.method in _BODILESS:
        return None
    raw = await _read_bounded(request)
    if isinstance(raw, web.Response):
        return raw
    if not raw.strip():
        return None  # no body: the routes that act on their path alone
    try:
        request[_BODY] = load_object(raw, max_bytes=MAX_BODY_BYTES)
    except UntrustedJson as exc:
        return _refused(request, 400, f"the body is not a JSON object we accept: {exc}")
    return None


def json_body(request: web.Request) -> dict[str, Any] | None:
    """The request's body as :func:`admit` parsed it; None when it had none."""
    return request.get(_BODY)


async def _read_bounded(request: web.Request) -> bytes | web.Response:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return _refused(request, 413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    body = bytearray()
    try:
        async for chunk in request.content.iter_any():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return _refused(request, 413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    # A bad chunk header, an undecodable Content-Encoding, a client gone mid-body: the
    # request is broken, not the server (left to aiohttp, each would log a traceback).
    except (HttpProcessingError, web.RequestPayloadError, ConnectionResetError):
        return _refused(request, 400, "the body could not be read")
    return bytes(body)


def _refused(request: web.Request, status: int, reason: str) -> web.Response:
    logger.warning(
        "console refused %s %s from %s: %s (HTTP %d)",
        request.method,
        request.path,
        request.remote,
        reason,
        status,
    )
    return web.json_response({"error": reason}, status=status)
