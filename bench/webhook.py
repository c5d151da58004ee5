"""Webhook throughput and ACK latency under redelivery, against the real server.

    python -m bench.webhook [--rate 200] [--duration 30] [--redeliver 0.3] [--check]

The server (``bench/webhook_server.py``: ``create_app`` on SQLite with a no-op agent)
runs in its own process. This process plays Feishu: it posts encrypted, signed
``im.message.receive_v1`` events over loopback at a fixed rate (open loop: a slow
answer does not slow the sender), delivers a share of them a second time (half racing
the first delivery, half a few seconds later, as Feishu's retries do), and runs the
fake Feishu OpenAPI in a thread to receive the replies. It reports acknowledged events
per second, ACK latency percentiles, and duplicate and missing replies.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fakes the tests use

from fakes.feishu_push import message_event, signed_request  # noqa: E402
from fakes.feishu_server import FakeFeishu  # noqa: E402

VERIFICATION_TOKEN = "vt-bench"
ENCRYPT_KEY = "ek-bench"
P99_TARGET_MS = 10.0
PROFILE = bool(os.environ.get("BENCH_PROFILE_SERVER"))
# Path to a py-spy binary: sample the server while the load runs (workdir/server.speedscope).
PY_SPY = os.environ.get("BENCH_PY_SPY")


def start_py_spy(pid: int, workdir: Path) -> subprocess.Popen[bytes]:
    out = workdir / "server.txt"
    return subprocess.Popen(
        [PY_SPY or "py-spy", "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "200"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@dataclass
class Delivery:
    at: float  # seconds after the start
    message_id: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0


class FeishuThread:
    """The fake Feishu OpenAPI on its own event loop, so replies do not stall the sender."""

    def __init__(self) -> None:
        self.fake = FakeFeishu(bot_open_id="ou_bot")
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FakeFeishu:
        self._thread.start()
        self._ready.wait(10)
        return self.fake

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def replies(self) -> Counter[str]:
        future = asyncio.run_coroutine_threadsafe(self._replies(), self._loop)
        return future.result(10)

    async def _replies(self) -> Counter[str]:
        return Counter(m.reply_to for m in self.fake.sent if m.reply_to)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self.fake.start())
        self._ready.set()
        self._loop.run_forever()


def plan(
    rate: float, duration: float, redeliver: float, seed: int = 7
) -> tuple[list[Delivery], int]:
    rng = random.Random(seed)
    count = int(rate * duration)
    deliveries: list[Delivery] = []
    for i in range(count):
        at = i / rate
        message_id = f"om_bench_{i}"
        # One conversation per message: a message sent while its conversation is busy
        # joins the run in progress and gets no reply of its own, which would blur the
        # "one reply per message" count.
        envelope = message_event(
            message_id=message_id,
            chat_id=f"oc_dm_{i}",
            sender_open_id=f"ou_user_{i}",
            text=f"question {i}",
            verification_token=VERIFICATION_TOKEN,
        )
        body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
        deliveries.append(Delivery(at, message_id, body, headers))
        if rng.random() < redeliver:
            later = at + (rng.uniform(0.0, 0.01) if rng.random() < 0.5 else rng.uniform(1, 5))
            body2, headers2 = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
            # A late redelivery may fall after the last first delivery, as Feishu's do.
            deliveries.append(Delivery(later, message_id, body2, headers2))
    deliveries.sort(key=lambda d: d.at)
    return deliveries, count


async def send_all(url: str, deliveries: list[Delivery]) -> tuple[Results, float]:
    results = Results()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(delivery: Delivery) -> None:
            started = time.perf_counter()
            try:
                async with session.post(url, data=delivery.body, headers=delivery.headers) as r:
                    await r.read()
                    results.statuses[r.status] += 1
            except aiohttp.ClientError:
                results.errors += 1
                return
            results.latencies.append(time.perf_counter() - started)

        tasks = []
        start = time.perf_counter()
        for delivery in deliveries:
            delay = start + delivery.at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(post(delivery)))
        await asyncio.gather(*tasks)
        return results, time.perf_counter() - start


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(fake: FakeFeishu, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FEISHU_APP_ID": fake.app_id,
        "FEISHU_APP_SECRET": fake.app_secret,
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_DOMAIN": fake.domain,
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",  # never called: the agent is a no-op
        "LLM_MODEL": "instant",
        "DATABASE_URL": f"sqlite+aiosqlite:///{workdir}/bench.db",
        "LARKGATE_MAX_CONCURRENT_RUNS": os.environ.get("BENCH_RUNS", "16"),
    }
    if PROFILE:
        env["BENCH_CPROFILE"] = str(workdir / "server.prof")
    log = (workdir / "server.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "bench.webhook_server", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def wait_healthy(base: str, server: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if server.poll() is not None:
                raise SystemExit("the server exited; see its log")
            try:
                async with session.get(base + "/healthz") as resp:
                    body = await resp.json()
                    if resp.status == 200 and body.get("bot_open_id"):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("the server did not become healthy")


async def wait_replies(feishu: FeishuThread, expected: int, within: float) -> Counter[str]:
    deadline = time.monotonic() + within
    replies = feishu.replies()
    while len(replies) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        replies = feishu.replies()
    await asyncio.sleep(1.0)  # late duplicates would show up now
    return feishu.replies()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> int:
    deliveries, unique = plan(args.rate, args.duration, args.redeliver)
    feishu = FeishuThread()
    fake = feishu.start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        server = start_server(fake, port, workdir)
        try:
            await wait_healthy(base, server)
            cpu_before = process_cpu_seconds(server.pid)
            spy = start_py_spy(server.pid, workdir) if PY_SPY else None
            results, elapsed = await send_all(base + "/feishu/events", deliveries)
            replies = await wait_replies(feishu, unique, within=60)
            server_cpu = process_cpu_seconds(server.pid) - cpu_before
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
        finally:
            server.terminate()
            server.wait(30)
            feishu.stop()
    return report(args, results, elapsed, unique, len(deliveries), replies, server_cpu)


def report(
    args: argparse.Namespace,
    results: Results,
    elapsed: float,
    unique: int,
    posted: int,
    replies: Counter[str],
    server_cpu: float,
) -> int:
    ms = [latency * 1000 for latency in results.latencies]
    acked = results.statuses.get(200, 0)
    duplicates = sum(1 for n in replies.values() if n > 1)
    missing = unique - len(replies)
    p50, p99 = statistics.median(ms), percentile(ms, 0.99)
    print(f"webhook benchmark: {args.rate:g} events/s for {args.duration:g} s, "
          f"{args.redeliver:.0%} redelivered; server on SQLite with a no-op agent")  # fmt: skip
    print(f"  posted            {posted} ({unique} unique messages)")
    print(f"  acknowledged      {acked} (HTTP 200) in {elapsed:.1f} s = {acked / elapsed:.1f}/s "
          f"(late redeliveries run past the {args.duration:g} s of first deliveries)")  # fmt: skip
    print(f"  other answers     {dict(results.statuses - Counter({200: acked}))}, "
          f"connection errors {results.errors}")  # fmt: skip
    print(f"  ACK latency ms    p50 {p50:.2f}  p90 {percentile(ms, 0.9):.2f}  "
          f"p99 {p99:.2f}  max {max(ms):.2f}")  # fmt: skip
    per_message = server_cpu / unique * 1000
    print(f"  server CPU        {server_cpu:.1f} s = {per_message:.2f} ms per message")
    print(f"  replies           {sum(replies.values())} for {len(replies)} messages: "
          f"{duplicates} duplicated, {missing} missing")  # fmt: skip
    checks = [
        (f"p99 ACK ≤ {P99_TARGET_MS:g} ms", p99 <= P99_TARGET_MS),
        ("every delivery acknowledged", acked == posted),
        ("0 duplicate replies", duplicates == 0),
        ("0 missing replies", missing == 0),
    ]
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) or not args.check else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--redeliver", type=float, default=0.3)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--keep", help="keep the server's database and log in this folder")
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
