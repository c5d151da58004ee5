"""A keep-alive HTTP/1.1 client for the OpenAPI's JSON calls, on asyncio and llhttp.

A reply is one OpenAPI call a message, and aiohttp's client spent more CPU on it than
the bot's whole turn: 230 µs a request and its answer on loopback with uvloop, against
70 µs here (``bench/README.md``). The parsing is llhttp's, through ``httptools`` (status
line, headers, Content-Length and chunked bodies, the keep-alive rules); TLS is asyncio's
with the default context aiohttp used; what this module adds is the pool, the limits and
the timeouts. Uploads (multipart) and downloads (streamed with a cap) stay on aiohttp.

Hostile or broken answers end as exceptions that the Feishu client already reports as
"no usable answer": :class:`ResponseInvalid` (a ``ValueError``: unparsable, over a limit)
and ``OSError`` (a connection that was refused, reset or closed mid-answer, or a timeout,
``TimeoutError`` being one). A connection is only reused after a complete answer that
allows it; after a timeout, a cancellation or any error it is closed, so no late byte of
one answer can be read as the next one's.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import urllib.parse
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import httptools

# What one answer may be: Feishu's JSON envelopes are kilobytes; a head or a body past
# these is not an OpenAPI answer, and memory is not the attacker's to fill.
MAX_HEAD_BYTES = 64 * 1024
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
# Idle keep-alive connections older than this are closed rather than reused: a server
# closes idle connections on its own clock, and a request written into one it is just
# closing fails. aiohttp's connector used the same 15 s.
IDLE_SECONDS = 15.0
# Retried once on a fresh connection when a reused one closed before answering, as
# aiohttp did: a server may close an idle connection as the request goes out. Not POST
# or PATCH: a request that may have been acted on is not sent twice by the transport.
_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# A header value may not end the header early (CR, LF) or smuggle a NUL.
_UNSAFE_VALUE = re.compile(r"[\r\n\x00]")
_UNSAFE_TARGET = re.compile(r"[\x00-\x20\x7f]")
# The answer's headers that decide how it is read, by lower-case name.
_FRAMING = frozenset({"content-length", "transfer-encoding", "content-encoding"})


class ResponseInvalid(ValueError):
    """The server's bytes are not an HTTP answer we accept."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, answering one request at a time."""

    def __init__(self, on_lost: Callable[[_Connection], None]) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[HttpResponse] | None = None
        self._max_body = DEFAULT_MAX_BODY_BYTES
        self._headers: dict[str, str] = {}
        self._framing: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self._head_bytes = 0
        self._head_received = 0  # bytes received while the head was incomplete
        self._body_bytes = 0
        self._headers_done = False
        self._close_delimited = False
        self._keep_alive = False
        self.closed = False
        self.answered_any = False  # a byte of the current answer arrived
        self.idle_since = time.monotonic()

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # Bytes nobody asked for: whatever they are, this connection is not reusable.
            self.close()
            return
        self.answered_any = True
        if not self._headers_done:
            # llhttp buffers a header line until it ends: a line that never ends must not
            # grow without bound before on_header can count it.
            self._head_received += len(data)
            if self._head_received > 2 * MAX_HEAD_BYTES:
                self._fail(ResponseInvalid(f"answer head over {MAX_HEAD_BYTES} bytes"))
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ResponseInvalid("the server switched protocols"))
        except httptools.HttpParserError as exc:
            # A limit a callback below enforced travels as the parser error's context.
            cause = exc.__context__
            self._fail(
                cause
                if isinstance(cause, ResponseInvalid)
                else ResponseInvalid(f"not an HTTP/1.1 answer: {exc}")
            )

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost settles the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost(self)
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers_done and self._close_delimited:
            # No length and not chunked: the body is everything until the server closes.
            self._settle(waiter)
            return
        waiter.set_exception(
            ConnectionResetError(
                "the connection closed before the answer was complete"
                + (f" ({exc})" if exc else "")
            )
        )

    # -- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None or self._waiter.done():
            # A second answer in the bytes of the first: not ours to read, and this
            # connection is no longer in step with its requests.
            raise ResponseInvalid("an answer nobody asked for")
        self._headers = {}
        self._framing = {}
        self._chunks = []
        self._head_bytes = 0
        self._body_bytes = 0
        self._headers_done = False

    def on_status(self, status: bytes) -> None:
        self._count_head(len(status))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        # Repeated fields are one comma-separated list (RFC 9110 5.3).
        previous = self._headers.get(key)
        if previous is not None:
            text = f"{previous}, {text}"
        self._headers[key] = text
        lowered = key.lower()
        if lowered in _FRAMING:
            self._framing[lowered] = text

    def on_headers_complete(self) -> None:
        self._headers_done = True
        length = self._framing.get("content-length")
        declared = int(length) if length and length.isascii() and length.isdigit() else None
        if declared is not None and declared > self._max_body:
            raise ResponseInvalid(f"answer declares {declared} bytes, over {self._max_body}")
        # Asked now: llhttp knows the answer's keep-alive rule only while it is in it.
        self._keep_alive = self._parser.should_keep_alive()
        chunked = "chunked" in self._framing.get("transfer-encoding", "").lower()
        self._close_delimited = (
            length is None and not chunked and self._parser.get_status_code() not in (204, 304)
        )

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._max_body:
            raise ResponseInvalid(f"answer body over {self._max_body} bytes")
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() < 200:
            # 1xx interim answers (100 Continue, 103 Early Hints): the final one follows.
            self._headers_done = False
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._settle(waiter)

    # -- use ---------------------------------------------------------------------------

    async def exchange(self, request: bytes, max_body: int) -> HttpResponse:
        assert self._transport is not None
        if not self.usable():
            raise ConnectionResetError("the connection closed while idle")
        self._max_body = max_body
        self._waiter = asyncio.get_running_loop().create_future()
        self.answered_any = False
        self._head_received = 0
        self._transport.write(request)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def usable(self) -> bool:
        return not self.closed and self._transport is not None and not self._transport.is_closing()

    def reusable(self) -> bool:
        """After an answer: whether the next request may go on this connection."""
        return self.usable() and not self._close_delimited and self._keep_alive

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ResponseInvalid(f"answer head over {MAX_HEAD_BYTES} bytes")

    def _settle(self, waiter: asyncio.Future[HttpResponse]) -> None:
        body = b"".join(self._chunks)
        self._chunks = []
        encoding = self._framing.get("content-encoding")
        try:
            if encoding:
                body = _decoded(body, encoding.strip().lower(), self._max_body)
        except ResponseInvalid as exc:
            waiter.set_exception(exc)
            self.close()
            return
        waiter.set_result(HttpResponse(self._parser.get_status_code(), self._headers, body))

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()


class Http1Client:
    """Keep-alive connections per origin (scheme, host, port), at most ``max_connections``
    of them busy at once per origin; a request waits for one beyond that."""

    def __init__(
        self,
        *,
        max_connections: int = 32,
        ssl_context: ssl.SSLContext | None = None,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._max_connections = max_connections
        self._ssl = ssl_context
        self._idle_seconds = idle_seconds
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._slots: dict[_Origin, asyncio.Semaphore] = {}
        self._open: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        seconds: float,
        max_body: int = DEFAULT_MAX_BODY_BYTES,
    ) -> HttpResponse:
        """One exchange within ``seconds`` (waiting for a connection and connecting included)."""
        self._bind_loop()
        origin, target = _split(url)
        wire = _serialize(method, target, origin, headers, body)
        async with asyncio.timeout(seconds):
            slots = self._slots.get(origin)
            if slots is None:
                slots = self._slots[origin] = asyncio.Semaphore(self._max_connections)
            async with slots:
                connection = self._take_idle(origin)
                if connection is not None:
                    try:
                        return await self._exchange(origin, connection, wire, max_body)
                    except ConnectionError:
                        if method not in _IDEMPOTENT or connection.answered_any:
                            raise
                        # The reused connection closed before a byte of answer: once more.
                connection = await self._connect(origin)
                return await self._exchange(origin, connection, wire, max_body)

    async def aclose(self) -> None:
        """Close every connection (an exchange still on one fails); a later request
        opens new ones."""
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()

    def _bind_loop(self) -> None:
        # Connections and semaphores belong to one event loop; a client used from another
        # (a test's new loop, a restarted app) starts afresh instead of failing.
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._open = set()
            self._idle = {}
            self._slots = {}

    async def _exchange(
        self, origin: _Origin, connection: _Connection, wire: bytes, max_body: int
    ) -> HttpResponse:
        try:
            response = await connection.exchange(wire, max_body)
        except BaseException:
            # A timeout, a cancellation, a broken answer: what the connection still
            # holds belongs to nobody, so it goes.
            self._discard(connection)
            raise
        if connection.reusable() and connection in self._open:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(connection)
        else:
            self._discard(connection)
        return response

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        """The connection closed (either end): out of the pool, idle or not."""
        self._open.discard(connection)
        for idle in self._idle.values():
            if connection in idle:
                idle.remove(connection)

    def _take_idle(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely closed
            if connection.usable() and now - connection.idle_since < self._idle_seconds:
                return connection
            self._discard(connection)
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = origin.scheme == "https"
        if tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        _, connection = await loop.create_connection(
            lambda: _Connection(self._forget),
            origin.host,
            origin.port,
            ssl=self._ssl if tls else None,
            server_hostname=origin.host if tls else None,
        )
        self._open.add(connection)
        return connection


# The origins met, by (scheme, netloc) as urlsplit gives them: the OpenAPI's repeats on
# every call, and reading it again (hostname, port) cost more than splitting the URL.
_ORIGINS: dict[tuple[str, str], _Origin] = {}
_MAX_ORIGINS = 64


def _split(url: str) -> tuple[_Origin, str]:
    parts = urllib.parse.urlsplit(url)
    key = (parts.scheme, parts.netloc)
    origin = _ORIGINS.get(key)
    if origin is None:
        origin = _origin(parts, url)
        if len(_ORIGINS) < _MAX_ORIGINS:
            _ORIGINS[key] = origin
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return origin, target


def _origin(parts: urllib.parse.SplitResult, url: str) -> _Origin:
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:200]!r}")
    port = parts.port or (443 if scheme == "https" else 80)  # a bad port: ValueError
    return _Origin(scheme, parts.hostname, port)


def _serialize(
    method: str, target: str, origin: _Origin, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    if method not in _METHODS:
        raise ValueError(f"unsupported HTTP method {method!r}")
    if _UNSAFE_TARGET.search(target):
        raise ValueError("the request target contains spaces or control characters")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {origin.host_header}"]
    asks_encoding = False
    for name, value in headers.items():
        if not _TOKEN.match(name) or _UNSAFE_VALUE.search(value):
            raise ValueError(f"header {name[:60]!r} cannot be sent as it is")
        lowered = name.lower()
        if lowered not in ("host", "content-length", "transfer-encoding", "connection"):
            lines.append(f"{name}: {value}")
            asks_encoding = asks_encoding or lowered == "accept-encoding"
    if not asks_encoding:
        lines.append("Accept-Encoding: gzip, deflate")  # what aiohttp asked for, and inflated
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")  # non-Latin-1: ValueError
    return head + body if body else head


def _decoded(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body, inflated to at most ``limit`` bytes (a small bomb stays small)."""
    if encoding in ("identity", ""):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ResponseInvalid(f"answer in an encoding we did not ask for: {encoding[:40]!r}")
    # wbits 47: zlib or gzip, told apart by their headers; "deflate" is meant to be
    # zlib-wrapped, but some servers send it raw (wbits -15).
    plain = _inflate(body, 47, limit)
    if plain is None and encoding == "deflate":
        plain = _inflate(body, -15, limit)
    if plain is None:
        raise ResponseInvalid(f"answer's {encoding} body does not inflate")
    return plain


def _inflate(body: bytes, wbits: int, limit: int) -> bytes | None:
    inflater = zlib.decompressobj(wbits)
    try:
        plain = inflater.decompress(body, limit + 1)
    except zlib.error:
        return None
    if len(plain) > limit:
        raise ResponseInvalid(f"answer body inflates past {limit} bytes")
    return plain if inflater.eof else None  # a cut-off stream is not an answer
