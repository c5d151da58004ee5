"""PooledTransport on the wire, against servers that answer well, badly and hostilely.

The OpenAPI goes over one aiohttp session (:mod:`bot.network`); these are the guarantees
the hand-written HTTP/1.1 client's tests held, now held at the transport: keep-alive and
its bound, answers read whole (chunked, gzip, deflate), a cut-off or late answer never
taken for a good one, the answer cap, and ids that reach the server encoded.

Each test runs on asyncio's loop and on uvloop's (the one ``larkgate serve`` runs on).
The servers are raw asyncio servers on 127.0.0.1 that write exactly the bytes a test
gives them. A failure must be one of the exceptions the Feishu client maps to
``FeishuTransportError``: ``aiohttp.ClientError``, ``OSError`` (``TimeoutError`` is one)
or ``ValueError`` (``BodyTooLarge`` is one).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.model import BaseRequest, RawResponse, RequestOption

from bot.feishu.transport import BodyTooLarge, PooledTransport
from bot.network import Network

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}

# What FeishuClient turns into FeishuTransportError (with UnmarshalException, which the
# transport never raises: it does not unmarshal).
CLEAR_ERRORS = (aiohttp.ClientError, OSError, ValueError)


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            return runner.run(asyncio.wait_for(coroutine, 10))

    return run


@dataclass
class Request:
    head: list[str]
    body: bytes

    @property
    def line(self) -> str:
        return self.head[0]

    def header(self, name: str) -> str | None:
        for line in self.head[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


Handler = Callable[["Conn"], Awaitable[None]]


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    number: int
    server: Server

    async def read_request(self) -> Request | None:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")[:-2]
        request = Request(lines, b"")
        length = int(request.header("content-length") or 0)
        request.body = await self.reader.readexactly(length)
        self.server.requests.append(request)
        return request

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


@dataclass
class Server:
    handler: Handler
    connections: int = 0
    busy: int = 0
    most_busy: int = 0
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(Conn(reader, writer, self.connections, self))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def answer(body: bytes = b'{"code":0}', *, status: str = "200 OK", extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def chunked(payload: bytes, size: int = 1000) -> bytes:
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def echoing(conn: Conn) -> None:
    """Answers every request on the connection with its own body, keeping it alive."""
    while (request := await conn.read_request()) is not None:
        await conn.write(answer(request.body or b"{}"))


def transport(server: Server, **options: Any) -> PooledTransport:
    # No proxy, whatever the environment running the tests sets.
    options.setdefault("timeout", 2.0)
    return PooledTransport(server.url, network=Network(proxies={}), **options)


OPTION = RequestOption.builder().tenant_access_token("t").build()


def request(
    body: Any = None,
    *,
    method: HttpMethod = HttpMethod.POST,
    uri: str = "/open-apis/x",
    paths: dict[str, str] | None = None,
    queries: list[tuple[str, str]] | None = None,
) -> BaseRequest:
    """A request built as lark-oapi's generated builders build one."""
    builder = (
        BaseRequest.builder()
        .http_method(method)
        .uri(uri)
        .token_types({AccessTokenType.TENANT})
        .paths(paths or {})
        .queries(queries or [])
    )
    if body is not None:
        builder.body(body)
    return builder.build()


async def post(
    client: PooledTransport, body: Any = None, *, seconds: float | None = None
) -> RawResponse:
    return await client.send_raw(request(body), OPTION, seconds=seconds)


# -- keep-alive ---------------------------------------------------------------------------


def test_one_connection_serves_many_sequential_requests_in_order(run: Any) -> None:
    async def scenario() -> None:
        async with Server(echoing) as server:
            client = transport(server)
            for i in range(10):
                raw = await post(client, {"n": i})
                assert raw.status_code == 200
                assert json.loads(raw.content) == {"n": i}
            assert server.connections == 1
            first = server.requests[0]
            assert first.line == "POST /open-apis/x HTTP/1.1"
            assert first.header("authorization") == "Bearer t"
            assert first.header("content-type") == "application/json; charset=utf-8"
            assert (first.header("user-agent") or "").endswith(" larkgate")
            await client.aclose()

    run(scenario())


def test_at_most_max_connections_are_open_at_once(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        server = conn.server
        while await conn.read_request() is not None:
            server.busy += 1
            server.most_busy = max(server.most_busy, server.busy)
            await asyncio.sleep(0.05)
            server.busy -= 1
            await conn.write(answer())

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server, max_connections=2)
            answers = await asyncio.gather(*(post(client) for _ in range(8)))
            assert [a.status_code for a in answers] == [200] * 8
            assert server.most_busy == 2
            assert server.connections == 2
            await client.aclose()

    run(scenario())


def test_a_server_closing_an_idle_connection_costs_nothing(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answer())  # says keep-alive, then closes anyway

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            assert (await post(client)).status_code == 200
            await asyncio.sleep(0.05)
            assert (await post(client)).status_code == 200
            assert server.connections == 2
            await client.aclose()

    run(scenario())


def test_a_post_dropped_unanswered_on_a_reused_connection_is_not_sent_again(run: Any) -> None:
    # A reply sent twice is a message posted twice: a POST that may have been acted on is
    # reported, not resent behind the caller's back (the caller resends with its uuid).
    received: list[int] = []

    async def handle(conn: Conn) -> None:
        await conn.read_request()
        received.append(conn.number)
        await conn.write(answer())
        if conn.number == 1:
            # The next request arrives and is dropped unanswered, as by a server closing
            # an idle connection at that very moment.
            await conn.read_request()
            received.append(conn.number)
            conn.writer.transport.abort()

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            assert (await post(client)).status_code == 200
            with pytest.raises(CLEAR_ERRORS):
                await post(client)
            assert received == [1, 1]
            await client.aclose()

    run(scenario())


# -- answers read whole -------------------------------------------------------------------


def test_chunked_gzip_and_deflate_answers_are_read_whole(run: Any) -> None:
    payload = b'{"code":0,"data":{"items":[' + b'"x",' * 3000 + b'"y"]}}'
    raw_deflate = zlib.compressobj(wbits=-15)
    bodies = [
        (b"Transfer-Encoding: chunked\r\n", chunked(payload)),
        (b"Content-Encoding: gzip\r\n", gzip.compress(payload)),
        (b"Content-Encoding: deflate\r\n", zlib.compress(payload)),
        (b"Content-Encoding: deflate\r\n", raw_deflate.compress(payload) + raw_deflate.flush()),
        (
            b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
            chunked(gzip.compress(payload), 100),
        ),
    ]

    async def handle(conn: Conn) -> None:
        for extra, body in bodies:
            await conn.read_request()
            length = b"" if b"chunked" in extra else b"Content-Length: %d\r\n" % len(body)
            await conn.write(b"HTTP/1.1 200 OK\r\n" + extra + length + b"\r\n" + body)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            for _ in bodies:
                raw = await post(client)
                assert (raw.status_code, raw.content) == (200, payload)
            assert server.connections == 1
            assert server.requests[0].header("accept-encoding") is not None
            await client.aclose()

    run(scenario())


@pytest.mark.parametrize(
    "cut_off",
    [
        pytest.param(answer(b'{"code":0,"data":{"message_id":"om_1"}}')[:-5], id="length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(b'{"code":0,"data":{"message_id":"om_1"}}', 10)[:-12],
            id="chunked",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 200\r\n\r\n"
            + gzip.compress(b'{"code":0,"data":{}}')[:-8],
            id="gzip",
        ),
    ],
)
def test_an_answer_cut_off_mid_body_is_an_error_not_a_short_body(run: Any, cut_off: bytes) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(cut_off)  # and the connection closes

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            with pytest.raises(aiohttp.ClientPayloadError):
                await post(client)
            await client.aclose()

    run(scenario())


# -- late answers -------------------------------------------------------------------------


@pytest.mark.parametrize("late", ["head", "body"])
def test_a_timed_out_answer_is_never_read_as_the_next_one(run: Any, late: str) -> None:
    async def handle(conn: Conn) -> None:
        while (request := await conn.read_request()) is not None:
            written = answer(request.body)
            if request.body == b'"slow"':
                # The head (or the head and half the body) now, the rest too late.
                split = written.index(b"\r\n\r\n") + 4 + (2 if late == "body" else 0)
                if late == "body":
                    await conn.write(written[:split])
                await asyncio.sleep(0.4)
                written = written if late == "head" else written[split:]
            await conn.write(written)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            assert (await post(client, "warm")).content == b'"warm"'
            with pytest.raises(TimeoutError):
                await post(client, "slow", seconds=0.2)
            await asyncio.sleep(0.3)  # the late bytes arrive on the first connection
            raw = await post(client, "next")
            assert (raw.status_code, raw.content) == (200, b'"next"')
            assert server.connections == 2
            await client.aclose()

    run(scenario())


def test_a_cancelled_request_is_never_read_as_the_next_one(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        while (request := await conn.read_request()) is not None:
            await asyncio.sleep(0.15)
            await conn.write(answer(request.body))

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server)
            task = asyncio.create_task(post(client, "first"))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.2)
            assert (await post(client, "second")).content == b'"second"'
            assert server.connections == 2
            await client.aclose()

    run(scenario())


# -- limits and refusals ------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["length", "chunked", "length-then-stall"])
def test_an_answer_over_max_answer_bytes_is_refused(run: Any, framing: str) -> None:
    big = b'{"code":0,"data":"' + b"x" * 2000 + b'"}'

    async def handle(conn: Conn) -> None:
        await conn.read_request()
        if framing == "chunked":
            await conn.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            await conn.write(chunked(big, 300))
        elif framing == "length":
            await conn.write(answer(big))
        else:
            # 100 MB declared, 2 KB sent, then nothing: refused on what came, not after
            # waiting for the rest.
            await conn.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n" + big)
            await asyncio.sleep(3)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server, max_answer_bytes=1000, timeout=2.0)
            started = asyncio.get_running_loop().time()
            with pytest.raises(BodyTooLarge) as refused:
                await post(client)
            assert asyncio.get_running_loop().time() - started < 1.0
            assert isinstance(refused.value, ValueError)
            assert refused.value.limit == 1000
            assert refused.value.read > 1000
            declared = {"chunked": None, "length": len(big), "length-then-stall": 100_000_000}
            assert refused.value.declared == declared[framing]
            await client.aclose()

    run(scenario())


def test_an_answer_at_max_answer_bytes_is_read(run: Any) -> None:
    body = b'{"code":0,"data":"' + b"x" * (1000 - 20) + b'"}'
    assert len(body) == 1000

    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answer(body))

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server, max_answer_bytes=1000)
            assert (await post(client)).content == body
            await client.aclose()

    run(scenario())


def test_a_refused_connection_is_an_error(run: Any) -> None:
    async def scenario() -> None:
        async with Server(echoing) as server:
            pass  # closed: its port now refuses
        client = transport(server)
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await post(client)
        assert isinstance(refused.value, OSError)
        await client.aclose()

    run(scenario())


# -- what reaches the server --------------------------------------------------------------


def test_path_parameters_and_queries_reach_the_server_encoded(run: Any) -> None:
    async def scenario() -> None:
        async with Server(echoing) as server:
            client = transport(server)
            built = request(
                {"content": "{}"},
                uri="/open-apis/im/v1/messages/:message_id/reply",
                paths={"message_id": "om_a/b?c d#名%2F"},
                queries=[("receive_id_type", "chat_id"), ("q", "a b&c=d/名+")],
            )
            raw = await client.send_raw(built, OPTION)
            assert raw.status_code == 200
            assert server.requests[0].line == (
                "POST /open-apis/im/v1/messages/om_a%2Fb%3Fc%20d%23%E5%90%8D%252F/reply"
                "?receive_id_type=chat_id&q=a%20b%26c%3Dd%2F%E5%90%8D%2B HTTP/1.1"
            )
            assert json.loads(server.requests[0].body) == {"content": "{}"}
            await client.aclose()

    run(scenario())


# -- whatever the server writes -----------------------------------------------------------


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda status, headers, body: (
                f"HTTP/1.1 {status}\r\n".encode() + headers + b"\r\n" + body
            ),
            st.sampled_from(
                ["200 OK", "204 No Content", "100 Continue", "000 Zero", "999 X", "abc"]
            ),
            st.lists(
                st.sampled_from(
                    [
                        b"Content-Length: 5\r\n",
                        b"Content-Length: -1\r\n",
                        b"Content-Length: 5\r\nContent-Length: 6\r\n",
                        b"Transfer-Encoding: chunked\r\n",
                        b"Content-Encoding: gzip\r\n",
                        b"Content-Encoding: br\r\n",
                        b"Connection: close\r\n",
                        b"Upgrade: websocket\r\nConnection: upgrade\r\n",
                        b"X: \x00\xff\r\n",
                    ]
                ),
                max_size=3,
            ).map(b"".join),
            st.binary(max_size=60),
        ),
    )
)
def test_any_bytes_end_in_an_answer_or_a_clear_error(run: Any, written: bytes) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(written)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = transport(server, timeout=1.0)
            sending = asyncio.ensure_future(post(client))
            # Our own bound, apart from the transport's: a TimeoutError from the transport
            # is a clear error, a send still running after it is a hang.
            done, _ = await asyncio.wait({sending}, timeout=3.0)
            assert done, "the transport hung past its own timeout"
            try:
                raw = sending.result()
            except CLEAR_ERRORS:
                pass
            else:
                # Any three digits: aiohttp reads "HTTP/1.1 000" as status 0 and the
                # transport passes it on (a client-side 0 is then no Feishu JSON, or a code).
                assert 0 <= raw.status_code <= 999
                assert isinstance(raw.content, bytes)
            await client.aclose()

    run(scenario())
