"""The push front (``bot.feishu.push_front``), spoken to over real sockets.

The app under test answers ``POST /feishu/events`` through aiohttp with 418, and its
``PushAnswerer`` (the front's) with the real verification and a recording handler: a
200 proves the front answered, a 418 that aiohttp did (a hand-off). A real app answers
the same at both; what is tested here is who reads which bytes, and that no byte is
lost, answered twice or answered out of order, however the bytes arrive.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu.push_front import KEEPALIVE_SECONDS, MAX_HEAD_BYTES, PUSH_ANSWERER, PushFront
from bot.feishu.routes import MAX_BODY_BYTES, PushAnswerer
from bot.feishu.webhook import VerifiedEvent, WebhookVerifier
from bot.serving import start_site

from fakes.feishu_push import message_event, signed_request
from support.waiting import wait_until

TOKEN = "vt-front"
KEY = "ek-front"
HOST = "127.0.0.1"
# The verifier's clock and the pushes' timestamps: one fixed instant, so a signature
# never goes stale however slow the machine (the age check: tests/e2e/test_webhook.py).
NOW = 1_700_000_000


def verifier() -> WebhookVerifier:
    return WebhookVerifier(
        verification_token=TOKEN, encrypt_key=KEY, max_age_seconds=300, clock=lambda: NOW
    )


class Recorder:
    """The answerer's handler: records each event; may be told to fail, or to hold the
    messages in ``hold`` until ``gate`` is set."""

    def __init__(self) -> None:
        self.events: list[VerifiedEvent] = []
        self.gate = asyncio.Event()
        self.hold: set[str] = set()
        self.fail = False

    async def __call__(self, event: VerifiedEvent) -> None:
        if event.envelope["event"]["message"]["message_id"] in self.hold:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError("the ledger is down")
        self.events.append(event)

    @property
    def message_ids(self) -> list[str]:
        return [e.envelope["event"]["message"]["message_id"] for e in self.events]


def make_app(recorder: Recorder) -> web.Application:
    app = web.Application()

    async def aiohttp_events(request: web.Request) -> web.Response:
        # Not reading the body: a declared length over the limit is answered at once.
        return web.json_response({"served_by": "aiohttp"}, status=418)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/feishu/events", aiohttp_events)
    app.router.add_get("/healthz", healthz)
    app[PUSH_ANSWERER] = PushAnswerer(verifier(), recorder)
    return app


class Served:
    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self.runner = runner
        self.port = port


async def start(recorder: Recorder, shutdown_timeout: float = 5.0) -> Served:
    runner = web.AppRunner(make_app(recorder), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await start_site(runner, HOST, 0, shutdown_timeout=shutdown_timeout)
    return Served(runner, runner.addresses[0][1])


@pytest.fixture
async def front() -> AsyncIterator[tuple[Recorder, int]]:
    """A served test app: its recorder and its port."""
    recorder = Recorder()
    served = await start(recorder)
    yield recorder, served.port
    await served.runner.cleanup()


def signed(message_id: str) -> tuple[bytes, dict[str, str]]:
    """A push's encrypted body and its headers, signed at ``NOW``."""
    envelope = message_event(message_id=message_id, chat_id="oc_1", verification_token=TOKEN)
    return signed_request(envelope, encrypt_key=KEY, timestamp=NOW)


def push_bytes(
    message_id: str, *, extra: dict[str, str] | None = None, line: str | None = None
) -> bytes:
    body, headers = signed(message_id)
    return request_bytes(line or PUSH_LINE, {**headers, **(extra or {})}, body)


def request_bytes(line: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    fields = {"Host": "bot", **headers}
    if body and "Transfer-Encoding" not in fields:
        fields.setdefault("Content-Length", str(len(body)))
    head = line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode() + body


PUSH_LINE = "POST /feishu/events HTTP/1.1"
GET_HEALTHZ = request_bytes("GET /healthz HTTP/1.1", {})


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """The next final answer (an interim 100 Continue is skipped)."""
    while True:
        status, headers, body = await _read_one(reader)
        if status >= 200:
            return status, headers, body


async def _read_one(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), status_line
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


async def exchange(port: int, data: bytes, answers: int) -> list[tuple[int, bytes]]:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(data)
        await writer.drain()
        got = []
        for _ in range(answers):
            status, _, body = await asyncio.wait_for(read_response(reader), 10)
            got.append((status, body))
        return got
    finally:
        writer.close()


ACCEPTED = (200, b'{"msg": "success"}')
AIOHTTP = (418, b'{"served_by": "aiohttp"}')
HEALTHY = (200, b'{"ok": true}')


async def test_a_plain_push_is_answered_by_the_front_and_recorded(front):
    recorder, port = front
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(push_bytes("om_1"))
    status, headers, body = await read_response(reader)
    writer.close()
    assert (status, body) == ACCEPTED
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert headers["server"].startswith("Python/") and "date" in headers
    assert recorder.message_ids == ["om_1"]


async def test_keep_alive_pushes_then_another_request_hands_the_connection_to_aiohttp(front):
    recorder, port = front
    reader, writer = await asyncio.open_connection(HOST, port)
    answers = []
    for data in (push_bytes("om_1"), push_bytes("om_2"), GET_HEALTHZ, push_bytes("om_3")):
        writer.write(data)
        status, _, body = await read_response(reader)
        answers.append((status, body))
    writer.close()
    # After the hand-off aiohttp serves the connection for good: om_3 went to its route.
    assert answers == [ACCEPTED, ACCEPTED, HEALTHY, AIOHTTP]
    assert recorder.message_ids == ["om_1", "om_2"]


@pytest.mark.parametrize(
    ("how", "status"),
    [
        pytest.param({"line": "POST /feishu/events?x=1 HTTP/1.1"}, 418, id="query"),
        pytest.param({"line": "POST /feishu/events HTTP/1.0"}, 418, id="http-1.0"),
        # aiohttp's parser refuses a method in lower case.
        pytest.param({"line": "post /feishu/events HTTP/1.1"}, 400, id="lowercase"),
        pytest.param({"line": "POST /feishu/eventsX HTTP/1.1"}, 404, id="longer-path"),
        pytest.param({"extra": {"Expect": "100-continue"}}, 418, id="expect"),
        pytest.param({"extra": {"Content-Encoding": "identity"}}, 418, id="encoding"),
    ],
)
async def test_anything_but_a_plain_push_is_aiohttps(front, how, status):
    recorder, port = front
    ((answered, _),) = await exchange(port, push_bytes("om_q", **how), 1)
    assert answered == status
    assert recorder.events == []


async def test_a_chunked_or_compressed_push_goes_to_aiohttp_whole(front):
    recorder, port = front
    body, headers = signed("om_c")
    chunked = request_bytes(
        PUSH_LINE,
        {**headers, "Transfer-Encoding": "chunked"},
        f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
    )
    compressed = request_bytes(
        PUSH_LINE, {**headers, "Content-Encoding": "gzip"}, gzip.compress(body)
    )
    assert await exchange(port, chunked, 1) == [AIOHTTP]
    assert await exchange(port, compressed, 1) == [AIOHTTP]
    assert recorder.events == []


async def test_a_body_over_the_limit_a_broken_head_and_a_long_one_are_handed_to_aiohttp(front):
    """The front reads none of them: aiohttp answers (the real route refuses the length
    with 413 without reading the body: tests/e2e/test_hostile_bodies.py)."""
    recorder, port = front
    too_large = request_bytes(PUSH_LINE, {"Content-Length": str(MAX_BODY_BYTES + 1)})
    broken = PUSH_LINE.encode() + b"\r\nHost bot\r\nContent-Length: 2\r\n\r\n{}"
    long_head = request_bytes(PUSH_LINE, {"X-Pad": "a" * (MAX_HEAD_BYTES + 10)}, b"{}")
    assert await exchange(port, too_large, 1) == [AIOHTTP]
    ((status, _),) = await exchange(port, broken, 1)
    assert status == 400  # aiohttp's parser
    ((status, _),) = await exchange(port, long_head, 1)
    assert status == 400  # aiohttp's limit on a header line
    assert recorder.events == []


async def test_refusals_and_failures_are_answered_as_the_route_answers_them(front):
    recorder, port = front
    body, headers = signed("om_f")
    forged = request_bytes(PUSH_LINE, {**headers, "X-Lark-Signature": "0" * 64}, body)
    ((status, answer),) = await exchange(port, forged, 1)
    assert status == 401 and b"signature" in answer
    recorder.fail = True
    ((status, answer),) = await exchange(port, push_bytes("om_f"), 1)
    assert status == 500 and json.loads(answer)["msg"]
    assert recorder.events == []


async def test_connection_close_is_honoured(front):
    _, port = front
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(push_bytes("om_1", extra={"Connection": "close"}))
    status, headers, _ = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the server closed
    writer.close()


async def test_a_client_that_leaves_before_the_answer_still_has_its_push_recorded(front):
    recorder, port = front
    recorder.hold = {"om_gone"}
    _, writer = await asyncio.open_connection(HOST, port)
    writer.write(push_bytes("om_gone"))
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.05)
    recorder.gate.set()
    await wait_until(lambda: recorder.events)
    # The server is still well: the next client is answered.
    assert await exchange(port, push_bytes("om_next"), 1) == [ACCEPTED]
    assert recorder.message_ids == ["om_gone", "om_next"]


async def test_a_client_sending_ahead_of_its_answer_is_paused_not_buffered(front):
    """A flood pipelined behind a push that is still being answered: past about 1 MiB the
    front stops reading (the client's writes back up) instead of holding it all."""
    recorder, port = front
    recorder.hold = {"om_held"}
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(push_bytes("om_held") + b"x" * (64 << 20))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.drain(), 1.0)
    recorder.gate.set()
    status, _, _ = await asyncio.wait_for(read_response(reader), 5)
    assert status == 200  # answered, then reading resumes: the rest is aiohttp's (a 400)
    assert recorder.message_ids == ["om_held"]
    writer.transport.abort()


async def test_shutdown_lets_a_push_in_progress_finish_and_answer():
    recorder = Recorder()
    recorder.hold = {"om_slow"}
    served = await start(recorder)
    reader, writer = await asyncio.open_connection(HOST, served.port)
    writer.write(push_bytes("om_slow"))
    await writer.drain()
    await asyncio.sleep(0.05)
    idle_reader, idle_writer = await asyncio.open_connection(HOST, served.port)
    idle_writer.write(push_bytes("om_idle"))
    assert (await read_response(idle_reader))[0] == 200
    stopping = asyncio.create_task(served.runner.cleanup())
    await asyncio.sleep(0.05)
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # idle: closed at once
    recorder.gate.set()
    status, headers, _ = await asyncio.wait_for(read_response(reader), 5)
    await stopping
    assert status == 200 and headers["connection"] == "close"
    assert recorder.message_ids == ["om_idle", "om_slow"]
    # And nothing new is taken in once the site stopped.
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(HOST, served.port)
    writer.close()
    idle_writer.close()


async def test_a_push_still_unanswered_after_the_grace_is_cancelled_not_left_running():
    recorder = Recorder()
    recorder.hold = {"om_stuck"}  # its claim never returns
    served = await start(recorder, shutdown_timeout=0.2)
    reader, writer = await asyncio.open_connection(HOST, served.port)
    writer.write(push_bytes("om_stuck"))
    await writer.drain()
    await asyncio.sleep(0.05)
    await asyncio.wait_for(served.runner.cleanup(), 5)
    # No answer (Feishu delivers it again), and nothing runs on after the app stopped.
    assert await asyncio.wait_for(reader.read(), 5) == b""
    recorder.gate.set()
    await asyncio.sleep(0.05)
    assert recorder.events == []
    writer.close()


async def test_idle_and_trickling_connections_are_closed_after_the_keepalive():
    recorder = Recorder()
    now = [1000.0]

    async def never(_: web.Request) -> web.Response:
        raise AssertionError("not handed off")

    aiohttp_server = web.Server(never)
    front = PushFront(
        PushAnswerer(verifier(), recorder), aiohttp_server, clock=lambda: now[0], sweep_seconds=3600
    )
    server = await asyncio.get_running_loop().create_server(front.protocol, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        answered_r, answered_w = await asyncio.open_connection(HOST, port)
        answered_w.write(push_bytes("om_1"))
        assert (await read_response(answered_r))[0] == 200
        trickle_r, trickle_w = await asyncio.open_connection(HOST, port)
        trickle_w.write(push_bytes("om_2")[:40])
        await trickle_w.drain()
        await asyncio.sleep(0.05)
        now[0] += KEEPALIVE_SECONDS - 1
        trickle_w.write(b"X")  # a byte now and then does not keep a request alive
        await trickle_w.drain()
        await asyncio.sleep(0.05)
        front.close_stale()
        assert len(front.connections) == 2
        now[0] += 2
        front.close_stale()
        assert await asyncio.wait_for(answered_r.read(), 5) == b""
        assert await asyncio.wait_for(trickle_r.read(), 5) == b""
        answered_w.close()
        trickle_w.close()
    finally:
        server.close()
        await front.close(1)
    assert recorder.message_ids == ["om_1"]


# -- however the bytes arrive ---------------------------------------------------------


def stream() -> list[tuple[bytes, tuple[int, bytes]]]:
    """Four pipelined requests and their answers: two pushes, a hand-off, then a push
    that aiohttp's route answers."""
    return [
        (push_bytes("om_a"), ACCEPTED),
        (push_bytes("om_b"), ACCEPTED),
        (GET_HEALTHZ, HEALTHY),
        (push_bytes("om_c"), AIOHTTP),
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(min_value=1, max_value=4),
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
)
def test_pipelined_requests_split_anywhere_get_the_same_answers_in_order(count, cuts):
    requests = stream()[:count]
    data = b"".join(r for r, _ in requests)
    pieces, at = [], 0
    for cut in sorted(set(c for c in cuts if c < len(data))):
        pieces.append(data[at:cut])
        at = cut
    pieces.append(data[at:])

    async def run() -> tuple[list[tuple[int, bytes]], list[str]]:
        recorder = Recorder()
        served = await start(recorder)
        try:
            reader, writer = await asyncio.open_connection(HOST, served.port)
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            got = []
            for _ in requests:
                status, _, body = await asyncio.wait_for(read_response(reader), 10)
                got.append((status, body))
            writer.close()
            return got, recorder.message_ids
        finally:
            await served.runner.cleanup()

    got, recorded = asyncio.run(run())
    assert got == [answer for _, answer in requests]
    assert recorded == ["om_a", "om_b"][:count]  # om_c came after the hand-off


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.binary(max_size=300), keep=st.integers(min_value=0, max_value=40))
def test_hostile_bytes_never_break_the_server(garbage, keep):
    # Starts like a push (any prefix of its request line), then anything at all.
    data = push_bytes("om_x")[:keep] + garbage

    async def run() -> list[tuple[int, bytes]]:
        recorder = Recorder()
        served = await start(recorder)
        try:
            reader, writer = await asyncio.open_connection(HOST, served.port)
            writer.write(data)
            await writer.drain()
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 10)  # whatever answer, then the close
            writer.close()
            # Whatever that was, the next client is answered.
            return await exchange(served.port, push_bytes("om_ok"), 1)
        finally:
            await served.runner.cleanup()

    assert asyncio.run(run()) == [ACCEPTED]
