"""The HTTP connector's transport: sockets only to checked addresses, bodies read within a
cap, and every redirect hop checked before it is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import ssl
import typing
import zlib
from collections.abc import Callable, Iterable

import httpcore
import httpx

from bot.engine import ToolError

from .policy import BlockedDestination, HostPolicy, UnresolvedHost, host_and_port


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to addresses the policy checked, never re-resolving.

    The policy resolves the host itself and the socket goes to one of the addresses it
    checked (TLS still verifies the host name): nothing resolves the name a second time,
    so DNS rebinding cannot swap the address after the check, and decimal, octal or hex
    IPv4 spellings are judged by what they resolve to.
    """

    def __init__(self, policy: HostPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._policy.addresses(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except UnresolvedHost as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedDestination("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore exceptions as httpx ones (most specific first), as httpx's own transport does.
_EXCEPTIONS: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


def _as_httpx(exc: Exception) -> Exception:
    for source, target in _EXCEPTIONS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> typing.AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            await closer()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The verifying TLS context, built once: loading the CA bundle costs tens of ms."""
    return httpx.create_ssl_context()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose sockets go through the policy."""

    def __init__(self, policy: HostPolicy, *, max_connections: int = 20) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections // 2,
            keepalive_expiry=5.0,
            network_backend=_PinnedBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def decode_content(raw: bytes, content_encoding: str, limit: int) -> tuple[bytes, bool]:
    """``raw`` decompressed (gzip, deflate) to at most ``limit`` bytes; whether it was cut.

    A body cut short on the wire decompresses as far as it goes. An encoding we did not
    ask for is left as it is (and shows up as binary).
    """
    data, cut = raw, False
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        if coding in ("gzip", "x-gzip"):
            wbits = 16 + zlib.MAX_WBITS
        elif coding == "deflate":
            # zlib-wrapped as the RFC says, or raw deflate as some servers send.
            wbits = zlib.MAX_WBITS if data[:1] == b"\x78" else -zlib.MAX_WBITS
        else:
            return data, cut
        decompressor = zlib.decompressobj(wbits)
        try:
            output = decompressor.decompress(data, limit)
        except zlib.error:
            return data, cut
        cut = cut or bool(decompressor.unconsumed_tail)
        data = output
    return data, cut


async def read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The body, reading at most ``cap`` bytes off the wire and, once decompressed,
    keeping at most as many (so a gzip bomb stays small)."""
    chunks: list[bytes] = []
    size = 0
    truncated = False
    async for chunk in response.aiter_raw():
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            truncated = True
            break
        chunks.append(chunk)
        size += len(chunk)
    raw = b"".join(chunks)
    body, cut = decode_content(raw, response.headers.get("content-encoding", ""), cap)
    return body, truncated or cut


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    """The last hop of a request: what was sent, what came back, and the hops before it."""

    request: httpx.Request
    response: httpx.Response
    body: bytes
    truncated: bool
    redirects: list[str]


async def send_checked(
    client: httpx.AsyncClient,
    request: httpx.Request,
    policy: HostPolicy,
    *,
    max_redirects: int,
    max_bytes: int,
    prepare: Callable[[httpx.Request, bool], None],
) -> Exchange:
    """Send ``request``, following redirects (up to ``max_redirects``) only to URLs the
    policy allows, each checked before it is sent; ``prepare(request, same_origin)``
    sets each hop's configured headers. With ``max_redirects = 0`` the 3xx is the answer.
    """
    redirects: list[str] = []
    origin = (request.url.scheme, *host_and_port(request.url))
    while True:
        policy.check_url(request.url)
        here = (request.url.scheme, *host_and_port(request.url))
        prepare(request, here == origin)
        response = await client.send(request, stream=True)
        try:
            next_request = response.next_request
            if next_request is not None and max_redirects > 0:
                _check_redirect(policy, request, next_request, len(redirects), max_redirects)
                redirects.append(str(request.url))
                request = next_request
                continue
            body, truncated = await read_capped(response, max_bytes)
        finally:
            await response.aclose()
        return Exchange(request, response, body, truncated, redirects)


def _check_redirect(
    policy: HostPolicy, request: httpx.Request, target: httpx.Request, hops: int, limit: int
) -> None:
    if hops >= limit:
        raise ToolError(f"too many redirects (more than {limit}); last to {target.url}")
    try:
        policy.check_url(target.url)
    except ToolError as exc:
        raise ToolError(
            f"{request.url} redirected to {target.url}, which is not allowed: {exc}"
        ) from exc


__all__ = ["Exchange", "PinnedTransport", "decode_content", "read_capped", "send_checked"]
