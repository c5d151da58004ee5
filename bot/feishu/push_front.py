"""The push front: plain ``POST /feishu/events`` requests answered without aiohttp's
per-request machinery, every other request served by aiohttp exactly as before.

Why: on a quiet server each request runs cold, and aiohttp's path through a request
(its protocol, a task, the request and response objects, the router, the writer) cost
about 300 µs of CPU a request on a 2-core VM at 260 requests a second, against about
60 µs for a protocol that parses the same request with llhttp and writes the answer.
Pushes are most of what a bot's server is asked, redeliveries included. In the server,
where a whole turn runs between two pushes, the front took 4.7% of the instructions a
message (bench/README.md, "Results after the push front").

How: every connection starts here. A request whose head is a plain push, its request
line exactly ``POST /feishu/events HTTP/1.1`` and its body framed by a Content-Length
within ``MAX_BODY_BYTES``, with no Transfer-Encoding, Content-Encoding, Expect or
Upgrade, is answered here by the route's own ``PushAnswerer`` (the same verification,
the same answers). Anything else, from its first byte on, hands the connection to
aiohttp: its ``RequestHandler`` takes the transport and every byte not answered yet,
and serves the connection for the rest of its life. Bytes are only consumed here once
their request is answered, so a hand-off loses nothing, and whatever is not a plain
push meets all of aiohttp's checks and limits, as it did before the front existed.

The head is parsed by llhttp (``httptools``), as aiohttp's own parser does; a head it
refuses is handed off too, so the client gets aiohttp's 400. Connections idle (or
trickling a request) longer than ``KEEPALIVE_SECONDS`` are closed, as aiohttp closes
idle keep-alive connections; on shutdown the front closes what is idle, lets the pushes
in progress answer within the grace, cancels the rest (Feishu delivers them again), and
closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import cast

import httptools
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time  # aiohttp's own Date, cached a second
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict

from .routes import EVENTS_PATH, MAX_BODY_BYTES, PushAnswerer

logger = logging.getLogger(__name__)

PUSH_ANSWERER = web.AppKey("push_answerer", PushAnswerer)

REQUEST_LINE = f"POST {EVENTS_PATH} HTTP/1.1\r\n".encode()
_HEAD_END = b"\r\n\r\n"
# A head longer than this is not a push: aiohttp gets it (and its own limits apply).
MAX_HEAD_BYTES = 16_384
# aiohttp's default keep-alive timeout: an idle connection is closed after it, and so is
# one whose request has been arriving for longer (a request trickled byte by byte).
KEEPALIVE_SECONDS = 75.0
SWEEP_SECONDS = 5.0
# While a push is being answered, a client may send ahead; beyond this much, reading
# pauses until the answer is out.
MAX_PENDING_BYTES = MAX_BODY_BYTES + MAX_HEAD_BYTES
# Headers that make a push something the front does not read itself.
_NOT_PLAIN = frozenset({"transfer-encoding", "content-encoding", "expect", "upgrade"})

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class PushFront:
    """The connections of one listening socket: the protocol factory for it, the idle
    sweep, and the shutdown that lets answers in progress finish."""

    def __init__(
        self,
        answerer: PushAnswerer,
        aiohttp_protocol: ProtocolFactory,
        *,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
        sweep_seconds: float = SWEEP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.answerer = answerer
        self.aiohttp_protocol = aiohttp_protocol
        self.keepalive_seconds = keepalive_seconds
        self.clock = clock
        self.closing = False
        self.connections: set[PushConnection] = set()
        self.answering: set[asyncio.Task[None]] = set()
        self._sweep_seconds = sweep_seconds
        self._sweeper: asyncio.Task[None] | None = None

    def protocol(self) -> PushConnection:
        """The factory ``loop.create_server`` calls for each accepted connection."""
        return PushConnection(self)

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self, grace_seconds: float) -> None:
        """After the listener closed: close what is idle, let the answers in progress
        finish (at most ``grace_seconds``), then close everything."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for connection in list(self.connections):
            if not connection.busy:
                connection.close()
        if self.answering:
            _, late = await asyncio.wait(set(self.answering), timeout=grace_seconds)
            for task in late:  # not answered: Feishu delivers it again (to a replica)
                task.cancel()
        for connection in list(self.connections):
            connection.close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_seconds)
            self.close_stale()

    def close_stale(self) -> None:
        """Close the connections idle, or sending one request, for too long."""
        oldest = self.clock() - self.keepalive_seconds
        for connection in list(self.connections):
            if not connection.busy and connection.since < oldest:
                connection.close()


class _Head:
    """One request head, collected from llhttp's callbacks."""

    __slots__ = ("complete", "headers")

    def __init__(self) -> None:
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        # As aiohttp's parser decodes them, so the answerer sees the same strings.
        self.headers.add(name.decode("latin-1"), value.decode("utf-8", "surrogateescape"))

    def on_headers_complete(self) -> None:
        self.complete = True


class _Push:
    """A plain push's head: where its body starts and ends, and what follows the answer."""

    __slots__ = ("body_end", "head_end", "headers", "keep_alive")

    def __init__(
        self, headers: CIMultiDict[str], head_end: int, length: int, keep_alive: bool
    ) -> None:
        self.headers = headers
        self.head_end = head_end
        self.body_end = head_end + length
        self.keep_alive = keep_alive


class PushConnection(asyncio.Protocol):
    """One client connection, until it closes or is handed to aiohttp."""

    def __init__(self, front: PushFront) -> None:
        self._front = front
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._push: _Push | None = None  # the head of the push being read, once parsed
        self._remote: str | None = None
        self._eof = False
        self._paused = False
        self.busy = False  # a push is being answered
        self.since = front.clock()  # of the last answer, or of the request's first byte

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        if self._front.closing:
            transport.close()
            return
        self._front.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if not self._buffer and not self.busy:
            self.since = self._front.clock()  # a new request starts arriving
        self._buffer += data
        if self.busy:
            if len(self._buffer) > MAX_PENDING_BYTES and not self._paused:
                self._paused = True
                self._transport_or_raise().pause_reading()
            return
        self._advance()

    def eof_received(self) -> bool | None:
        self._eof = True
        # Answering: keep the transport open for the answer, then close. Otherwise what
        # is buffered is part of a request that can no longer complete.
        return True if self.busy else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._front.connections.discard(self)
        self._transport = None

    # -- reading -----------------------------------------------------------------------

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _advance(self) -> None:
        """Answer the next request in the buffer if it is a complete plain push; hand the
        connection to aiohttp if it is anything else; wait for more bytes otherwise."""
        if self._transport is None or self._transport.is_closing():
            return
        buffer = self._buffer
        if not buffer:
            return
        push = self._push
        if push is None:
            if not buffer.startswith(REQUEST_LINE[: len(buffer)]):
                self._hand_off()
                return
            head_end = buffer.find(_HEAD_END, 0, MAX_HEAD_BYTES)
            if head_end < 0:
                if len(buffer) >= MAX_HEAD_BYTES:
                    self._hand_off()
                return
            push = self._push = _plain_push(bytes(buffer[: head_end + 4]))
            if push is None:
                self._hand_off()
                return
        if len(buffer) < push.body_end:
            return  # the body is still arriving
        body = bytes(buffer[push.head_end : push.body_end])
        del buffer[: push.body_end]
        self._push = None
        self.busy = True
        task = asyncio.get_running_loop().create_task(self._answer(body, push))
        self._front.answering.add(task)
        task.add_done_callback(self._front.answering.discard)

    async def _answer(self, body: bytes, push: _Push) -> None:
        try:
            status, payload = await self._front.answerer.answer(body, push.headers, self._remote)
        except Exception:  # the answerer catches the handler's failures; this is a bug
            logger.exception("answering a push failed")
            status, payload = 500, b'{"msg": "internal error"}'
        transport = self._transport
        if transport is None or transport.is_closing():
            return  # the client left; a push not answered 200 is delivered again
        close = not push.keep_alive or self._eof or self._front.closing
        transport.write(_response(status, payload, close=close))
        self.busy = False
        self.since = self._front.clock()
        if close:
            transport.close()
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self._advance()  # a request sent ahead of the answer

    def _hand_off(self) -> None:
        """From now on aiohttp serves this connection, starting with the buffered bytes."""
        transport = self._transport_or_raise()
        self._front.connections.discard(self)
        self._transport = None
        handler = self._front.aiohttp_protocol()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._buffer:
            pending = bytes(self._buffer)
            self._buffer.clear()
            cast(asyncio.Protocol, handler).data_received(pending)
        if self._eof:
            cast(asyncio.Protocol, handler).eof_received()

    def _transport_or_raise(self) -> asyncio.Transport:
        assert self._transport is not None
        return self._transport


def _plain_push(head: bytes) -> _Push | None:
    """The push that `head` starts, or None when it is not a plain one (aiohttp's then)."""
    collected = _Head()
    parser = httptools.HttpRequestParser(collected)
    try:
        parser.feed_data(head)
    except httptools.HttpParserError:
        return None  # aiohttp's parser refuses it too, with its own 400
    if not collected.complete or parser.should_upgrade():
        return None
    headers = collected.headers
    if any(name in headers for name in _NOT_PLAIN):
        return None
    lengths = headers.getall("content-length", ())
    if len(lengths) != 1:
        return None
    length = lengths[0].strip()
    if not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY_BYTES:
        return None  # aiohttp answers what is too large (413) or malformed
    return _Push(headers, len(head), int(length), parser.should_keep_alive())


def _response(status: int, body: bytes, *, close: bool) -> bytes:
    """The answer as aiohttp's ``web.Response`` of a JSON body writes it."""
    connection = "Connection: close\r\n" if close else ""
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Date: {rfc822_formatted_time()}\r\n"
        f"Server: {SERVER_SOFTWARE}\r\n"
        f"{connection}\r\n"
    )
    return head.encode("latin-1") + body


class PushSite(web.BaseSite):
    """A TCP site whose connections start at the push front (see the module)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        shutdown_timeout: float = 60.0,
        backlog: int = 128,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        answerer = runner.app.get(PUSH_ANSWERER)
        if answerer is None:
            raise ValueError("the app has no push answerer (app[PUSH_ANSWERER])")
        self._answerer = answerer
        self._host = host
        self._port = port
        self._sock = sock  # an already bound socket, instead of host and port
        self._bound_port: int | None = None
        self._shutdown_timeout = shutdown_timeout
        self._reuse_address = reuse_address
        self._reuse_port = reuse_port
        self._front: PushFront | None = None

    @property
    def port(self) -> int:
        return self._bound_port if self._bound_port is not None else self._port

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        front = self._front = PushFront(self._answerer, server)
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(
                front.protocol, sock=self._sock, backlog=self._backlog
            )
        else:
            self._server = await loop.create_server(
                front.protocol,
                self._host,
                self._port,
                backlog=self._backlog,
                reuse_address=self._reuse_address,
                reuse_port=self._reuse_port,
            )
        front.start()
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        await super().stop()
        if self._front is not None:
            await self._front.close(self._shutdown_timeout)
