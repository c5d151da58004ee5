"""The keep-alive HTTP/1.1 client against servers that answer well, badly and hostilely.

Each test runs on asyncio's loop and on uvloop's (the one ``larkgate serve`` runs on):
the client is a protocol of its own, and the two loops' transports differ. The servers
are raw asyncio servers on 127.0.0.1 that write exactly the bytes a test gives them.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import urllib.parse
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu import http1
from bot.feishu.http1 import MAX_HEAD_BYTES, Http1Client, HttpResponse, ResponseInvalid

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


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


async def echoing(conn: Conn) -> None:
    """Answers every request on the connection with its own body, keeping it alive."""
    while (request := await conn.read_request()) is not None:
        conn.server.requests.append(request)
        await conn.write(answer(request.body or b"{}"))


def echo_server() -> Server:
    return Server(echoing)


async def post(client: Http1Client, url: str, body: bytes = b"{}", **kw: Any) -> HttpResponse:
    return await client.request(
        "POST",
        url + "/open-apis/x",
        headers={"Content-Type": "application/json"},
        body=body,
        seconds=kw.pop("seconds", 2.0),
        **kw,
    )


# -- answers that are fine ---------------------------------------------------------------


def test_one_connection_serves_many_requests_in_order(run: Any) -> None:
    async def scenario() -> None:
        async with echo_server() as server:
            client = Http1Client()
            for i in range(5):
                response = await post(client, server.url, f'{{"n":{i}}}'.encode())
                assert response.status == 200
                assert response.body == f'{{"n":{i}}}'.encode()
                assert response.headers["Content-Type"] == "application/json"
            assert server.connections == 1
            first = server.requests[0]
            assert first.line == "POST /open-apis/x HTTP/1.1"
            assert first.header("host") == server.url.removeprefix("http://")
            assert first.header("content-length") == "7"
            assert first.header("accept-encoding") == "gzip, deflate"
            await client.aclose()

    run(scenario())


def test_chunked_gzip_and_deflate_answers_are_read_whole(run: Any) -> None:
    payload = b'{"code":0,"data":{"items":[' + b'"x",' * 3000 + b'"y"]}}'
    chunks = [payload[i : i + 1000] for i in range(0, len(payload), 1000)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    raw_deflate = zlib.compressobj(wbits=-15)
    bodies = [
        (b"Transfer-Encoding: chunked\r\n", chunked),
        (b"Content-Encoding: gzip\r\n", gzip.compress(payload)),
        (b"Content-Encoding: deflate\r\n", zlib.compress(payload)),
        (b"Content-Encoding: deflate\r\n", raw_deflate.compress(payload) + raw_deflate.flush()),
    ]

    async def handle(conn: Conn) -> None:
        for extra, body in bodies:
            await conn.read_request()
            length = b"" if b"chunked" in extra else b"Content-Length: %d\r\n" % len(body)
            await conn.write(b"HTTP/1.1 200 OK\r\n" + extra + length + b"\r\n" + body)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            for _ in bodies:
                assert (await post(client, server.url)).body == payload
            assert server.connections == 1
            await client.aclose()

    run(scenario())


def test_an_answer_delimited_by_close_is_read_and_the_connection_not_reused(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            assert (await post(client, server.url)).body == b"until the end"
            assert (await post(client, server.url)).body == b"until the end"
            assert server.connections == 2

    run(scenario())


def test_connection_close_and_http_1_0_answers_are_not_reused(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        if conn.number == 1:
            await conn.write(answer(extra="Connection: close\r\n"))
        else:
            await conn.write(answer().replace(b"HTTP/1.1", b"HTTP/1.0"))
        await asyncio.sleep(0.5)  # the server would keep it open: the client must not

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            for _ in range(3):
                assert (await post(client, server.url)).status == 200
            assert server.connections == 3

    run(scenario())


def test_interim_1xx_answers_are_skipped(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
        )
        await conn.write(answer(b"final", status="201 Created"))

    async def scenario() -> None:
        async with Server(handle) as server:
            response = await post(Http1Client(), server.url)
            assert (response.status, response.body) == (201, b"final")
            assert "Link" not in response.headers

    run(scenario())


def test_repeated_headers_are_joined(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answer(extra="X-Tt-Logid: a\r\nX-Tt-Logid: b\r\n"))

    async def scenario() -> None:
        async with Server(handle) as server:
            response = await post(Http1Client(), server.url)
            assert response.headers["X-Tt-Logid"] == "a, b"

    run(scenario())


def test_get_with_query_and_no_body_sends_no_length(run: Any) -> None:
    async def scenario() -> None:
        async with echo_server() as server:
            client = Http1Client()
            await client.request(
                "GET", server.url + "/open-apis/y?page_size=20&q=a%20b", headers={}, seconds=2
            )
            request = server.requests[0]
            assert request.line == "GET /open-apis/y?page_size=20&q=a%20b HTTP/1.1"
            assert request.header("content-length") is None

    run(scenario())


def test_at_most_max_connections_are_open_at_once(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        while await conn.read_request() is not None:
            server.busy += 1
            server.most_busy = max(server.most_busy, server.busy)
            await asyncio.sleep(0.05)
            server.busy -= 1
            await conn.write(answer())

    server = Server(handle)

    async def scenario() -> None:
        async with server:
            client = Http1Client(max_connections=2)
            answers = await asyncio.gather(*(post(client, server.url) for _ in range(8)))
            assert [a.status for a in answers] == [200] * 8
            assert server.most_busy == 2
            assert server.connections == 2

    run(scenario())


# -- answers that are late, cut off or gone ---------------------------------------------


def test_a_timed_out_answer_is_never_read_as_the_next_one(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        while (request := await conn.read_request()) is not None:
            if request.body == b"slow":
                await asyncio.sleep(0.3)
            await conn.write(answer(request.body))

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            with pytest.raises(TimeoutError):
                await post(client, server.url, b"slow", seconds=0.1)
            await asyncio.sleep(0.4)  # the late answer arrives on the closed connection
            assert (await post(client, server.url, b"next")).body == b"next"
            assert server.connections == 2

    run(scenario())


def test_a_cancelled_request_closes_its_connection(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        while (request := await conn.read_request()) is not None:
            await asyncio.sleep(0.2)
            await conn.write(answer(request.body))

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            task = asyncio.create_task(post(client, server.url, b"first"))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await post(client, server.url, b"second")).body == b"second"
            assert server.connections == 2

    run(scenario())


def test_an_answer_cut_off_mid_body_is_an_error(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answer(b'{"code":0,"data":{}}')[:-5])

    async def scenario() -> None:
        async with Server(handle) as server:
            with pytest.raises(ConnectionResetError):
                await post(Http1Client(), server.url)

    run(scenario())


def test_a_server_closing_an_idle_connection_costs_nothing(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answer())  # says keep-alive, then closes anyway

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            await post(client, server.url)
            await asyncio.sleep(0.05)
            assert (await post(client, server.url)).status == 200
            assert server.connections == 2

    run(scenario())


@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("POST", False)])
def test_a_reused_connection_closed_unanswered_is_retried_only_when_idempotent(
    run: Any, method: str, retried: bool
) -> None:
    received: list[int] = []

    async def handle(conn: Conn) -> None:
        await conn.read_request()
        received.append(conn.number)
        await conn.write(answer())
        if conn.number == 1:
            # The next request arrives, and the server drops it unanswered, as a server
            # closing an idle connection at that moment does.
            await conn.read_request()
            received.append(conn.number)
            conn.writer.transport.abort()

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            await client.request(method, server.url + "/x", headers={}, seconds=2)
            if retried:
                response = await client.request(method, server.url + "/x", headers={}, seconds=2)
                assert response.status == 200
                assert received == [1, 1, 2]
            else:
                with pytest.raises(ConnectionError):
                    await client.request(method, server.url + "/x", headers={}, seconds=2)
                assert received == [1, 1]  # sent once: it may have been acted on

    run(scenario())


def test_bytes_nobody_asked_for_retire_an_idle_connection(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        while (request := await conn.read_request()) is not None:
            await conn.write(answer(request.body))
            if conn.number == 1:
                await conn.write(answer(b"smuggled"))

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            assert (await post(client, server.url, b"one")).body == b"one"
            await asyncio.sleep(0.05)
            assert (await post(client, server.url, b"two")).body == b"two"
            assert server.connections == 2

    run(scenario())


# -- limits and refusals ----------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        conn.writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
        await conn.writer.drain()
        await asyncio.sleep(1)

    async def scenario() -> None:
        async with Server(handle) as server:
            with pytest.raises(ResponseInvalid, match="declares 100000000"):
                await post(Http1Client(), server.url, max_body=1000)

    run(scenario())


def test_bodies_heads_and_inflation_over_their_limits_are_refused(run: Any) -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)  # 5 MB of zeros in a few kilobytes
    big_chunk = b"%x\r\n%s\r\n" % (5000, b"x" * 5000)
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + big_chunk * 3,
        b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
        + bomb,
        b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nxx",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope",
    ]
    matches = ["body over 10000", "head over", "inflates past", "did not ask for", "inflate"]

    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(answers[conn.number - 1])
        await asyncio.sleep(0.5)

    async def scenario() -> None:
        async with Server(handle) as server:
            client = Http1Client()
            for match in matches:
                with pytest.raises(ResponseInvalid, match=match):
                    await post(client, server.url, max_body=10_000)

    run(scenario())


def test_a_header_line_that_never_ends_is_refused_before_the_timeout(run: Any) -> None:
    async def handle(conn: Conn) -> None:
        await conn.read_request()
        await conn.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        for _ in range(40):  # 40 x 8 KiB, and never a line end
            await conn.write(b"a" * 8192)
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with Server(handle) as server:
            started = asyncio.get_running_loop().time()
            with pytest.raises(ResponseInvalid, match="head over"):
                await post(Http1Client(), server.url, seconds=4.0)
            assert asyncio.get_running_loop().time() - started < 3.0

    run(scenario())


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nX-Injected: 1"},
        {"X-Evil": "a\nb"},
        {"Bad Name": "x"},
        {"X-Nul": "a\x00"},
        {"X-Wide": "名字"},
    ],
)
def test_headers_that_would_split_the_request_are_refused_unsent(
    run: Any, headers: dict[str, str]
) -> None:
    async def scenario() -> None:
        async with echo_server() as server:
            with pytest.raises(ValueError, match=r"cannot be sent|latin-1"):
                await Http1Client().request("POST", server.url, headers=headers, seconds=2)
            assert server.requests == []

    run(scenario())


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/x", "http:///nohost", "http://example.com/a b", "http://h:99999/"],
)
def test_urls_it_cannot_send_to_are_refused(run: Any, url: str) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match=r"(?i)URL|target|port"):
            await Http1Client().request("GET", url, headers={}, seconds=2)

    run(scenario())


def test_a_refused_connection_is_an_os_error(run: Any) -> None:
    async def scenario() -> None:
        async with Server(lambda conn: asyncio.sleep(0)) as server:
            url = server.url
        with pytest.raises(ConnectionRefusedError):
            await Http1Client().request("GET", url, headers={}, seconds=2)

    run(scenario())


def test_aclose_closes_every_connection_and_the_client_opens_new_ones(run: Any) -> None:
    async def scenario() -> None:
        async with echo_server() as server:
            client = Http1Client()
            await post(client, server.url)
            await client.aclose()
            await post(client, server.url)
            assert server.connections == 2

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
            st.sampled_from(["200 OK", "204 No Content", "100 Continue", "999 X", "abc"]),
            st.lists(
                st.sampled_from(
                    [
                        b"Content-Length: 5\r\n",
                        b"Content-Length: -1\r\n",
                        b"Content-Length: 5\r\nContent-Length: 6\r\n",
                        b"Transfer-Encoding: chunked\r\n",
                        b"Content-Encoding: gzip\r\n",
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
            client = Http1Client()
            try:
                response = await post(client, server.url, seconds=1.0)
            except (ResponseInvalid, OSError):
                pass  # TimeoutError and a reset are OSErrors
            else:
                assert 200 <= response.status <= 999
            await client.aclose()

    run(scenario())


_NETLOCS = [
    "open.feishu.cn",
    "OPEN.Feishu.CN",
    "127.0.0.1:8080",
    "[::1]:8443",
    "user@example.com",
    "example.com:443",
    "example.com:99999",  # a bad port
    "",  # no host
]


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTPS", "ftp"]),
    netloc=st.sampled_from(_NETLOCS),
    rest=st.text(alphabet="/?#=&%abc_:.", max_size=30),
)
def test_the_origin_read_once_is_what_every_split_of_its_urls_gives(scheme, netloc, rest):
    # The origin is kept by (scheme, netloc) after its first URL: later URLs must get what
    # a fresh parse gives them, and a URL refused once is refused every time.
    url = f"{scheme}://{netloc}{'/' if rest[:1] not in ('/', '?', '#') else ''}{rest}"
    parts = urllib.parse.urlsplit(url)
    try:
        fresh = http1._origin(parts, url)
    except ValueError as refused:
        for _ in range(2):
            with pytest.raises(ValueError, match=re.escape(str(refused))):
                http1._split(url)
        return
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    for _ in range(2):
        assert http1._split(url) == (fresh, target)
