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

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu.push_front import KEEPALIVE_SECONDS, MAX_HEAD_BYTES, PUSH_ANSWERER, PushFront
from bot.feishu.routes import MAX_BODY_BYTES, PushAnswerer
from bot.feishu.webhook import VerifiedEvent, WebhookVerifier
from bot.serving import start_site

from fakes.feishu_push import message_event, signed_request

TOKEN = "vt-front"
KEY = "ek-front"
HOST = "127.0.0.1"


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
    verifier = WebhookVerifier(verification_token=TOKEN, encrypt_key=KEY, max_age_seconds=300)
    app = web.Application()

    async def aiohttp_events(request: web.Request) -> web.Response:
        # Not reading the body: a declared length over the limit is answered at once.
        return web.json_response({"served_by": "aiohttp"}, status=418)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/feishu/events", aiohttp_events)
    app.router.add_get("/healthz", healthz)
    app[PUSH_ANSWERER] = PushAnswerer(verifier, recorder)
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


def push_bytes(
    message_id: str, *, extra: dict[str, str] | None = None, line: str | None = None
) -> bytes:
    envelope = message_event(message_id=message_id, chat_id="oc_1", verification_token=TOKEN)
    body, headers = signed_request(envelope, encrypt_key=KEY)
    return request_bytes(line or "POST /feishu/events HTTP/1.1", {**headers, **(extra or {})}, body)


def request_bytes(line: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    fields = {"Host": "bot", **headers}
    if body and "Transfer-Encoding" not in fields:
        fields.setdefault("Content-Length", str(len(body)))
    head = line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode() + body


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


async def test_a_plain_push_is_answered_by_the_front_and_recorded():
    recorder = Recorder()
    served = await start(recorder)
    try:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(push_bytes("om_1"))
        status, headers, body = await read_response(reader)
        writer.close()
    finally:
        await served.runner.cleanup()
    assert (status, body) == ACCEPTED
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert headers["server"].startswith("Python/") and "date" in headers
    assert recorder.message_ids == ["om_1"]


async def test_keep_alive_pushes_then_another_request_hands_the_connection_to_aiohttp():
    recorder = Recorder()
    served = await start(recorder)
    try:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        answers = []
        for data in (push_bytes("om_1"), push_bytes("om_2"), GET_HEALTHZ, push_bytes("om_3")):
            writer.write(data)
            status, _, body = await read_response(reader)
            answers.append((status, body))
        writer.close()
    finally:
        await served.runner.cleanup()
    # After the hand-off aiohttp serves the connection for good: om_3 went to its route.
    assert answers == [ACCEPTED, ACCEPTED, HEALTHY, AIOHTTP]
    assert recorder.message_ids == ["om_1", "om_2"]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(push_bytes("om_q", line="POST /feishu/events?x=1 HTTP/1.1"), 418, id="query"),
        pytest.param(push_bytes("om_q", line="POST /feishu/events HTTP/1.0"), 418, id="http-1.0"),
        # aiohttp's parser refuses a method in lower case.
        pytest.param(push_bytes("om_q", line="post /feishu/events HTTP/1.1"), 400, id="lowercase"),
        pytest.param(
            push_bytes("om_q", line="POST /feishu/eventsX HTTP/1.1"), 404, id="longer-path"
        ),
        pytest.param(push_bytes("om_q", extra={"Expect": "100-continue"}), 418, id="expect"),
        pytest.param(
            push_bytes("om_q", extra={"Content-Encoding": "identity"}), 418, id="encoding"
        ),
    ],
)
async def test_anything_but_a_plain_push_is_aiohttps(data, status):
    recorder = Recorder()
    served = await start(recorder)
    try:
        ((answered, _),) = await exchange(served.port, data, 1)
        assert answered == status
    finally:
        await served.runner.cleanup()
    assert recorder.events == []


async def test_a_chunked_or_compressed_push_goes_to_aiohttp_whole():
    recorder = Recorder()
    served = await start(recorder)
    envelope = message_event(message_id="om_c", chat_id="oc_1", verification_token=TOKEN)
    body, headers = signed_request(envelope, encrypt_key=KEY)
    chunked = request_bytes(
        "POST /feishu/events HTTP/1.1",
        {**headers, "Transfer-Encoding": "chunked"},
        f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
    )
    packed = gzip.compress(body)
    compressed = request_bytes(
        "POST /feishu/events HTTP/1.1", {**headers, "Content-Encoding": "gzip"}, packed
    )
    try:
        assert await exchange(served.port, chunked, 1) == [AIOHTTP]
        assert await exchange(served.port, compressed, 1) == [AIOHTTP]
    finally:
        await served.runner.cleanup()


async def test_a_body_over_the_limit_and_a_broken_head_are_aiohttps_to_refuse():
    recorder = Recorder()
    served = await start(recorder)
    too_large = request_bytes(
        "POST /feishu/events HTTP/1.1", {"Content-Length": str(MAX_BODY_BYTES + 1)}
    )
    broken = b"POST /feishu/events HTTP/1.1\r\nHost bot\r\nContent-Length: 2\r\n\r\n{}"
    long_head = request_bytes(
        "POST /feishu/events HTTP/1.1", {"X-Pad": "a" * (MAX_HEAD_BYTES + 10)}, b"{}"
    )
    try:
        # aiohttp's own answers: it reads the route's 418 only for what it can parse.
        ((status, _),) = await exchange(served.port, too_large, 1)
        assert status == 418  # the test route reads no limit; the real route answers 413
        ((status, _),) = await exchange(served.port, broken, 1)
        assert status == 400
        ((status, _),) = await exchange(served.port, long_head, 1)
        assert status == 400  # aiohttp's limit on a header line
    finally:
        await served.runner.cleanup()
    assert recorder.events == []


async def test_refusals_and_failures_are_answered_as_the_route_answers_them():
    recorder = Recorder()
    served = await start(recorder)
    envelope = message_event(message_id="om_f", chat_id="oc_1", verification_token=TOKEN)
    body, headers = signed_request(envelope, encrypt_key=KEY)
    forged = request_bytes(
        "POST /feishu/events HTTP/1.1", {**headers, "X-Lark-Signature": "0" * 64}, body
    )
    try:
        ((status, answer),) = await exchange(served.port, forged, 1)
        assert status == 401 and b"signature" in answer
        recorder.fail = True
        ((status, answer),) = await exchange(served.port, push_bytes("om_f"), 1)
        assert status == 500 and json.loads(answer)["msg"]
    finally:
        await served.runner.cleanup()
    assert recorder.events == []


async def test_connection_close_is_honoured():
    recorder = Recorder()
    served = await start(recorder)
    try:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(push_bytes("om_1", extra={"Connection": "close"}))
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the server closed
        writer.close()
    finally:
        await served.runner.cleanup()


async def test_a_client_that_leaves_before_the_answer_still_has_its_push_recorded():
    recorder = Recorder()
    recorder.hold = {"om_gone"}
    served = await start(recorder)
    try:
        _, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(push_bytes("om_gone"))
        await writer.drain()
        writer.close()
        await asyncio.sleep(0.05)
        recorder.gate.set()
        for _ in range(100):
            if recorder.events:
                break
            await asyncio.sleep(0.01)
        # The server is still well: the next client is answered.
        assert await exchange(served.port, push_bytes("om_next"), 1) == [ACCEPTED]
    finally:
        await served.runner.cleanup()
    assert recorder.message_ids == ["om_gone", "om_next"]


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
    verifier = WebhookVerifier(verification_token=TOKEN, encrypt_key=KEY, max_age_seconds=300)
    front = PushFront(
        PushAnswerer(verifier, recorder), aiohttp_server, clock=lambda: now[0], sweep_seconds=3600
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

STREAM = (
    (push_bytes("om_a"), ACCEPTED),
    (push_bytes("om_b"), ACCEPTED),
    (GET_HEALTHZ, HEALTHY),
    (push_bytes("om_c"), AIOHTTP),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(min_value=1, max_value=len(STREAM)),
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
)
def test_pipelined_requests_split_anywhere_get_the_same_answers_in_order(count, cuts):
    requests = STREAM[:count]
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
    assert recorded == [m for m in ("om_a", "om_b")[: min(count, 2)]]


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
            with_timeout = asyncio.wait_for(reader.read(), 10)
            await with_timeout
            writer.close()
            # Whatever that was, the next client is answered.
            return await exchange(served.port, push_bytes("om_ok"), 1)
        finally:
            await served.runner.cleanup()

    assert asyncio.run(run()) == [ACCEPTED]
