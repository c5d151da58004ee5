"""The HTTP routes Feishu calls: ``POST /feishu/events`` and ``POST /feishu/card``.

Both verify with ``WebhookVerifier`` and hand the verified event to a callable the
composition root provides. The event route answers as soon as that callable returns,
which must be quick (it only records the event; the work happens in the background):
Feishu redelivers anything not answered with 200 within 3 seconds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .webhook import Challenge, Refused, VerifiedEvent, WebhookVerifier

logger = logging.getLogger(__name__)

EventHandler = Callable[[VerifiedEvent], Awaitable[None]]
CardHandler = Callable[[VerifiedEvent], Awaitable[Mapping[str, Any]]]

# Feishu payloads are small; anything bigger is not from Feishu.
MAX_BODY_BYTES = 1 << 20
EVENTS_PATH = "/feishu/events"
# Every accepted push gets the same answer: encoded once, not by json_response each time.
_ACCEPTED = b'{"msg": "success"}'


class PushAnswerer:
    """What ``POST /feishu/events`` answers to a body and its headers (the HTTP route
    below; the long connection answers its frames with the same verification)."""

    def __init__(self, verifier: WebhookVerifier, handle: EventHandler) -> None:
        self._verifier = verifier
        self._handle = handle

    async def answer(
        self, body: bytes | Refused, headers: Mapping[str, str], remote: str | None
    ) -> tuple[int, bytes]:
        """The HTTP status and the JSON body to answer with."""
        opened = body if isinstance(body, Refused) else self._verifier.open(body, headers)
        if isinstance(opened, Refused):
            _log_refusal(EVENTS_PATH, remote, opened)
            return opened.status, _json({"msg": opened.reason})
        if isinstance(opened, Challenge):
            return 200, _json({"challenge": opened.challenge})
        try:
            await self._handle(opened)
        except Exception:
            # Not recorded: answer 500 so Feishu delivers it again later.
            logger.exception(
                "event %s (%s) could not be recorded", opened.event_id, opened.event_type
            )
            return 500, _json({"msg": "temporarily unable to accept the event"})
        return 200, _ACCEPTED


def events_handler(answerer: PushAnswerer) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def post_events(request: web.Request) -> web.Response:
        body = await _read_bounded(request)
        status, answer = await answerer.answer(body, request.headers, request.remote)
        return web.Response(
            status=status, body=answer, content_type="application/json", charset="utf-8"
        )

    return post_events


def card_handler(
    verifier: WebhookVerifier, handle: CardHandler
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def post_card(request: web.Request) -> web.Response:
        opened = await _open(request, verifier)
        if isinstance(opened, web.Response):
            return opened
        if isinstance(opened, Challenge):
            return web.json_response({"challenge": opened.challenge})
        try:
            answer = await handle(opened)
        except Exception:
            logger.exception("card callback %s failed", opened.event_id)
            answer = {"toast": {"type": "error", "content": "Something went wrong; try again."}}
        # Always 200 with a JSON object: anything else shows the user error 200671/200672.
        return web.json_response(dict(answer))

    return post_card


async def _open(
    request: web.Request, verifier: WebhookVerifier
) -> Challenge | VerifiedEvent | web.Response:
    body = await _read_bounded(request)
    if isinstance(body, Refused):
        opened: Challenge | VerifiedEvent | Refused = body
    else:
        opened = verifier.open(body, request.headers)
    if isinstance(opened, Refused):
        _log_refusal(request.path, request.remote, opened)
        return web.json_response({"msg": opened.reason}, status=opened.status)
    return opened


def _log_refusal(path: str, remote: str | None, refused: Refused) -> None:
    logger.warning("refused %s from %s: %s (HTTP %d)", path, remote, refused.reason, refused.status)


def _json(value: Mapping[str, Any]) -> bytes:
    """As ``web.json_response`` encodes it."""
    return json.dumps(value).encode()


async def _read_bounded(request: web.Request) -> bytes | Refused:
    """The body, or why it was not read: larger than MAX_BODY_BYTES (by Content-Length,
    or while reading a chunked or compressed body that declares none), or broken.

    Not ``request.read()``: its bound is the application's ``client_max_size``, which
    is someone else's setting to raise.
    """
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return Refused(413, "body too large")
    body = bytearray()
    try:
        content = request.content
        if content.is_eof():
            # All of it arrived with the head (a push is one small request): taken as it
            # lies in the buffer, without an iterator and a wait a chunk.
            whole = content.read_nowait()
            return Refused(413, "body too large") if len(whole) > MAX_BODY_BYTES else whole
        async for chunk in content.iter_any():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return Refused(413, "body too large")
    # A bad chunk header, undecodable Content-Encoding, or a client gone mid-body: the
    # request is broken, not the server (left to aiohttp, each would log a traceback).
    except (HttpProcessingError, web.RequestPayloadError) as exc:
        return Refused(400, f"body unreadable: {_first_line(exc)}")
    except ConnectionResetError:
        return Refused(400, "body unreadable: the connection was lost")
    return bytes(body)


def _first_line(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return str(text).strip().splitlines()[0][:200] if str(text).strip() else type(exc).__name__
