"""Webhook throughput and ACK latency under redelivery, against the real server.

    python -m bench.webhook [--database sqlite|postgres|all] [--processes 1,2]
                            [--rate 200] [--duration 30] [--redeliver 0.3] [--repeat 1]
                            [--postgres-url URL] [--postgres-set NAME=VALUE]
                            [--check] [--keep DIR]

The server (``bench/webhook_server.py``: ``create_app`` with a no-op agent) runs in
processes of its own. This process plays Feishu: it posts encrypted, signed
``im.message.receive_v1`` events over loopback at a fixed rate (open loop: a slow
answer does not slow the sender), delivers a share of them a second time (half racing
the first delivery, half a few seconds later, as Feishu's retries do), and runs the
fake Feishu OpenAPI in a thread to receive the replies. It reports acknowledged events
per second, ACK latency percentiles, duplicate and missing replies, and CPU per message.

Configurations, side by side in one run, each on a fresh database: SQLite with one
server process (the baseline), and PostgreSQL with one and with two server processes.
With two, every delivery (a redelivery too) goes to one of them at random, as Feishu's
would reach any replica behind a load balancer; both share the database and the fake
Feishu. PostgreSQL runs when a URL is given (``--postgres-url``, or the environment's
LARKGATE_BENCH_POSTGRES_URL or LARKGATE_TEST_POSTGRES_URL); the role needs CREATEDB:
each run creates a database of its own and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import asyncpg
from sqlalchemy.engine import URL, make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fakes the tests use

from fakes.feishu_push import message_event, signed_request  # noqa: E402
from fakes.feishu_server import FakeFeishu  # noqa: E402

VERIFICATION_TOKEN = "vt-bench"
ENCRYPT_KEY = "ek-bench"
# Issue 14's targets: ACK p99 by backend, and the server's CPU on SQLite with one process.
P99_TARGET_MS = {"sqlite": 10.0, "postgres": 15.0}
CPU_TARGET_MS = 2.0  # server CPU per message, SQLite ×1
TRANSACTIONS_TARGET = 4.0  # the app's, per unique message, redeliveries and leases included
POSTGRES_URL_ENVS = ("LARKGATE_BENCH_POSTGRES_URL", "LARKGATE_TEST_POSTGRES_URL")
PROFILE = bool(os.environ.get("BENCH_PROFILE_SERVER"))
# Path to a py-spy binary: sample the servers while the load runs (workdir/server-N.txt).
PY_SPY = os.environ.get("BENCH_PY_SPY")
# More py-spy options, e.g. "--gil -r 1000" (the rate defaults to 200/s). --gil: only samples
# of the thread holding the GIL, so that a thread waiting for it is not charged with the
# frame it waits in.
PY_SPY_ARGS = os.environ.get("BENCH_PY_SPY_ARGS", "").split()
# Instructions a message (callgrind): the server runs under valgrind, instrumenting only while
# the load runs. Unlike CPU seconds, the count does not depend on what else the machine
# does, so two commits can be compared on a busy machine (at a low --rate: valgrind slows
# the server about 50-fold). Kernel work (syscalls) is not in it.
CALLGRIND = bool(os.environ.get("BENCH_CALLGRIND"))


def start_py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    command = [PY_SPY or "py-spy", "record", "-p", str(pid), "-o", str(out), "-f", "raw"]
    return subprocess.Popen(
        [*command, *(() if "-r" in PY_SPY_ARGS else ("-r", "200")), *PY_SPY_ARGS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Setup:
    """One configuration: a database kind and a number of server processes."""

    database: str  # "sqlite" | "postgres"
    processes: int

    @property
    def label(self) -> str:
        name = "SQLite" if self.database == "sqlite" else "PostgreSQL"
        return f"{name} ×{self.processes}"

    @property
    def slug(self) -> str:
        return f"{self.database}-{self.processes}"


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
    acked_by: Counter[int] = field(default_factory=Counter)  # server index -> HTTP 200s
    errors: int = 0
    # (sent at, seconds to the ACK, server index) of each acknowledged delivery
    timeline: list[tuple[float, float, int]] = field(default_factory=list)


@dataclass
class Run:
    """The figures of one run of one configuration."""

    posted: int
    unique: int
    acked: int
    other: dict[int, int]
    errors: int
    elapsed: float
    ms: list[float]
    server_cpu: float
    server_system_cpu: float  # the kernel's part of server_cpu
    postgres_cpu: float | None
    load_cpu: float  # this process: the sender and the fake Feishu
    machine_busy: float  # share of all cores busy during the run, 0..1
    other_cpu: float  # CPU of everything else on the machine meanwhile (other users' jobs)
    probe_ms: float  # speed_probe() just before the run
    duplicates: int
    missing: int
    acked_by: list[int]
    claims_by: dict[str, int]
    sessions: int | None = None  # PostgreSQL connections opened to the run's database
    transactions: int | None = None  # ... and transactions run in it
    # The app's own transactions, by the store operation that ran them (both backends).
    operations: Counter[str] = field(default_factory=Counter)
    instructions: int | None = None  # the servers', with BENCH_CALLGRIND

    @property
    def p50(self) -> float:
        return statistics.median(self.ms)

    def percentile(self, q: float) -> float:
        return percentile(self.ms, q)


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
        self._loop.close()

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


async def send_all(
    urls: list[str], deliveries: list[Delivery], seed: int = 11
) -> tuple[Results, float]:
    """Post every delivery on schedule, each to one of `urls` picked at random."""
    results = Results()
    pick = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(delivery: Delivery, target: int) -> None:
            started = time.perf_counter()
            try:
                async with session.post(
                    urls[target], data=delivery.body, headers=delivery.headers
                ) as r:
                    await r.read()
                    results.statuses[r.status] += 1
                    if r.status == 200:
                        results.acked_by[target] += 1
            except aiohttp.ClientError:
                results.errors += 1
                return
            results.latencies.append(time.perf_counter() - started)
            results.timeline.append((started - start, time.perf_counter() - started, target))

        tasks = []
        start = time.perf_counter()
        for delivery in deliveries:
            delay = start + delivery.at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            target = pick.randrange(len(urls))
            tasks.append(asyncio.create_task(post(delivery, target)))
        await asyncio.gather(*tasks)
        return results, time.perf_counter() - start


# -- CPU accounting (Linux /proc) ------------------------------------------------------


def _stat_fields(pid: int | str) -> list[str]:
    # Fields after the command name: state is [0], utime [11], stime [12], cutime [13], ...
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_system_cpu_seconds(pid: int) -> float:
    """The part of a process's CPU time spent in the kernel (syscalls: sockets, files)."""
    return int(_stat_fields(pid)[12]) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float | None:
    """CPU time of every PostgreSQL process on this machine, exited backends included.

    The live `postgres` processes' own time, plus the postmasters' reaped children (a
    backend that closed: its time moves into its parent's cutime and cstime). None when
    no PostgreSQL process is visible here.
    """
    stats: dict[str, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            stats[entry.name] = _stat_fields(entry.name)
        except OSError:  # gone meanwhile
            continue
    if not stats:
        return None
    ticks = 0
    for fields in stats.values():
        ticks += int(fields[11]) + int(fields[12])
        if fields[1] not in stats:  # a postmaster: its parent is not postgres
            ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def speed_probe() -> float:
    """Milliseconds of a fixed pure-Python workload, best of 5: this machine's speed drifts
    (up to 2× on shared VMs), and every figure here is CPU-bound, so runs are comparable
    only at similar probes."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        table: dict[int, int] = {}
        for i in range(200_000):
            table[i & 1023] = table.get(i & 1023, 0) + i
        best = min(best, time.perf_counter() - started)
    return best * 1000


def self_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


# -- databases ---------------------------------------------------------------------------


async def _admin(url: URL, statements: list[str]) -> list[list[asyncpg.Record]]:
    connection = await asyncpg.connect(
        user=url.username,
        password=url.password,
        host=url.host,
        port=url.port,
        database=url.database,
    )
    try:
        return [await connection.fetch(statement) for statement in statements]
    finally:
        await connection.close()


def local_postgres(url: URL) -> bool:
    return url.host in (None, "", "localhost", "127.0.0.1", "::1") or str(url.host).startswith("/")


@asynccontextmanager
async def fresh_database(
    setup: Setup, workdir: Path, postgres_url: URL | None, keep: bool, settings: list[str]
) -> AsyncIterator[str]:
    """The URL of an empty database for one run: a new SQLite file, or a new PostgreSQL
    database (dropped afterwards unless `keep`). The servers migrate it at start-up."""
    if setup.database == "sqlite":
        yield f"sqlite+aiosqlite:///{workdir}/bench.db"
        return
    assert postgres_url is not None
    name = f"larkgate_bench_{uuid.uuid4().hex[:10]}"
    # ALTER DATABASE ... SET: the servers' sessions start with these settings.
    alter = [f'ALTER DATABASE "{name}" SET {key} = {value}' for key, value in map(split, settings)]
    await _admin(postgres_url, [f'CREATE DATABASE "{name}"', *alter])
    try:
        yield postgres_url.set(database=name).render_as_string(hide_password=False)
    finally:
        if keep:
            print(f"  kept PostgreSQL database {name}", file=sys.stderr)
        else:
            await _admin(postgres_url, [f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])


def split(setting: str) -> tuple[str, str]:
    key, value = setting.split("=", 1)
    return key.strip(), value.strip()


async def postgres_activity(database_url: str) -> tuple[int, int] | None:
    """Connections opened to the database and transactions run in it, from PostgreSQL's
    cumulative statistics (flushed within a second or so; the run's tail allows it)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return None
    query = (
        "SELECT sessions, xact_commit + xact_rollback FROM pg_stat_database "
        f"WHERE datname = '{url.database}'"
    )
    (rows,) = await _admin(url, [query])
    return (rows[0][0], rows[0][1]) if rows else None


async def claims_by_owner(database_url: str) -> dict[str, int]:
    """Which process won each message's claim."""
    query = "SELECT owner, count(*) FROM message_claims GROUP BY owner ORDER BY owner"
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        with sqlite3.connect(url.database or "") as connection:
            return dict(connection.execute(query).fetchall())
    (rows,) = await _admin(url, [query])
    return {row[0]: row[1] for row in rows}


# -- the servers -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    fake: FakeFeishu, port: int, workdir: Path, database_url: str, owner: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FEISHU_APP_ID": fake.app_id,
        "FEISHU_APP_SECRET": fake.app_secret,
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_DOMAIN": fake.domain,
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",  # never called: the agent is a no-op
        "LLM_MODEL": "instant",
        "LARKGATE_MAX_CONCURRENT_RUNS": os.environ.get("BENCH_RUNS", "16"),
        # Off, as before the default turned on: every message has a sender of its own, so
        # none would be refused, but each would cost a rate-limit write to the database,
        # and the bench keeps measuring the workload its published numbers measured.
        "LARKGATE_RATE_LIMIT_PER_MINUTE": "0",
    }
    env["BENCH_TRANSACTIONS"] = str(workdir / f"{owner}.transactions.json")
    if PROFILE:
        env["BENCH_CPROFILE"] = str(workdir / f"{owner}.prof")
    log = (workdir / f"{owner}.log").open("wb")
    command = [sys.executable, "-m", "bench.webhook_server", "--port", str(port)]
    if CALLGRIND:
        out = workdir / f"{owner}.callgrind"
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        command = [*valgrind, f"--callgrind-out-file={out}", *command]
    command += ["--database-url", database_url, "--owner", owner]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


async def wait_healthy(base: str, server: subprocess.Popen[bytes], log: Path) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(6000 if CALLGRIND else 600):
            if server.poll() is not None:
                raise SystemExit(f"a server exited; see {log}:\n{tail(log)}")
            try:
                async with session.get(base + "/healthz") as resp:
                    body = await resp.json()
                    if resp.status == 200 and body.get("bot_open_id"):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"a server did not become healthy; see {log}")


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


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


async def run_once(
    args: argparse.Namespace, setup: Setup, postgres_url: URL | None, workdir: Path
) -> Run:
    feishu = FeishuThread()
    fake = feishu.start()
    servers: list[subprocess.Popen[bytes]] = []
    try:
        fresh = fresh_database(setup, workdir, postgres_url, bool(args.keep), args.postgres_set)
        async with fresh as url:
            try:
                return await load(args, setup, fake, feishu, url, workdir, servers)
            finally:  # before the database is dropped
                for server in servers:
                    server.kill()
                    server.wait(30)
    finally:
        feishu.stop()


async def load(
    args: argparse.Namespace,
    setup: Setup,
    fake: FakeFeishu,
    feishu: FeishuThread,
    url: str,
    workdir: Path,
    servers: list[subprocess.Popen[bytes]],
) -> Run:
    """Start the servers, send the load, measure, and stop the servers (into `servers`, so
    that the caller can kill them on a failure)."""
    bases = []
    # One after the other: the first migrates the new database, the others find
    # it at head (two migrations racing on an empty database would collide).
    for n in range(1, setup.processes + 1):
        port, owner = free_port(), f"server-{n}"
        base = f"http://127.0.0.1:{port}"
        servers.append(start_server(fake, port, workdir, url, owner))
        await wait_healthy(base, servers[-1], workdir / f"{owner}.log")
        bases.append(base)
    probe_ms = speed_probe()
    # Planned now, so that the events' timestamps are fresh whatever ran before.
    deliveries, unique = plan(args.rate, args.duration, args.redeliver)
    cpu_before = [process_cpu_seconds(s.pid) for s in servers]
    system_before = [process_system_cpu_seconds(s.pid) for s in servers]
    pg_before = postgres_cpu_seconds() if setup.database == "postgres" else None
    self_before = self_cpu_seconds()
    busy_before, total_before = machine_ticks()
    spies = [
        start_py_spy(s.pid, workdir / f"server-{n}.txt") for n, s in enumerate(servers, 1) if PY_SPY
    ]
    if CALLGRIND:
        for server in servers:
            on = ["callgrind_control", "-i", "on", str(server.pid)]
            await asyncio.to_thread(subprocess.run, on, check=True, capture_output=True)
    # This process measures the ACKs: a full collection in it (walking every object of the
    # runs before, which the fake Feishu keeps) stopped its clock-reading loop for 100+ ms
    # and was charged to the servers' latency, more with each run. Frozen for the run. And
    # no collection during it: what the run itself leaves (its requests, the fake's replies)
    # brought a full one ~17 s in, 46–115 ms long, that every run's slowest ACKs lined up
    # with (`timeline.json`), on SQLite and PostgreSQL alike. Uncollected, a run of 5,258
    # deliveries leaves ~30 MB.
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        results, elapsed = await send_all([b + "/feishu/events" for b in bases], deliveries)
    finally:
        gc.enable()
        gc.unfreeze()
    # Kept with --keep: when the slow ACKs came, and from which process (tails come in bursts).
    (workdir / "timeline.json").write_text(json.dumps(results.timeline))
    replies = await wait_replies(feishu, unique, within=600 if CALLGRIND else 60)
    instructions = (
        sum(callgrind_instructions(s.pid, workdir / f"server-{n}.callgrind")
            for n, s in enumerate(servers, 1))
        if CALLGRIND
        else None
    )  # fmt: skip
    server_cpu = sum(
        process_cpu_seconds(s.pid) - before for s, before in zip(servers, cpu_before, strict=True)
    )
    server_system_cpu = sum(
        process_system_cpu_seconds(s.pid) - before
        for s, before in zip(servers, system_before, strict=True)
    )
    pg_after = postgres_cpu_seconds() if pg_before is not None else None
    load_cpu = self_cpu_seconds() - self_before
    busy_after, total_after = machine_ticks()
    postgres_cpu = None if pg_after is None or pg_before is None else pg_after - pg_before
    busy_cpu = (busy_after - busy_before) / os.sysconf("SC_CLK_TCK")  # all cores
    for spy in spies:
        spy.send_signal(2)
        spy.wait(30)
    claims = await claims_by_owner(url)
    activity = await postgres_activity(url)
    for server in servers:
        server.terminate()
    for server in servers:
        server.wait(30)
    servers.clear()
    operations: Counter[str] = Counter()
    for n in range(1, setup.processes + 1):
        counted = workdir / f"server-{n}.transactions.json"
        if counted.exists():  # written at a clean shutdown
            operations.update(json.loads(counted.read_text()))
    acked = results.statuses.get(200, 0)
    return Run(
        posted=len(deliveries),
        unique=unique,
        acked=acked,
        other=dict(results.statuses - Counter({200: acked})),
        errors=results.errors,
        elapsed=elapsed,
        ms=[latency * 1000 for latency in results.latencies],
        server_cpu=server_cpu,
        server_system_cpu=server_system_cpu,
        postgres_cpu=postgres_cpu,
        load_cpu=load_cpu,
        machine_busy=(busy_after - busy_before) / max(1, total_after - total_before),
        other_cpu=max(0.0, busy_cpu - server_cpu - load_cpu - (postgres_cpu or 0.0)),
        probe_ms=probe_ms,
        duplicates=sum(1 for n in replies.values() if n > 1),
        missing=unique - len(replies),
        acked_by=[results.acked_by[i] for i in range(setup.processes)],
        claims_by=claims,
        sessions=activity[0] if activity else None,
        transactions=activity[1] if activity else None,
        operations=operations,
        instructions=instructions,
    )


def callgrind_instructions(pid: int, out: Path) -> int:
    """The instructions counted since collection was switched on (all threads)."""
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    total = 0
    for dump in out.parent.glob(out.name + "*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("totals:", "summary:")):
                total += int(line.split()[1])
                break
    return total


# -- the report ----------------------------------------------------------------------------


@dataclass
class Summary:
    """A configuration's runs: medians of the figures, sums of the misses."""

    setup: Setup
    runs: list[Run]

    def median(self, figure: str) -> float:
        return statistics.median(getattr(run, figure) for run in self.runs)

    def median_of(self, fn: object) -> float:
        return statistics.median(fn(run) for run in self.runs)  # type: ignore[operator]

    def total(self, figure: str) -> int:
        return sum(getattr(run, figure) for run in self.runs)

    @property
    def p99(self) -> float:
        return self.median_of(lambda r: r.percentile(0.99))

    @property
    def transactions_per_message(self) -> float:
        return self.median_of(lambda r: sum(r.operations.values()) / r.unique)

    @property
    def server_cpu_ms(self) -> float:
        return self.median_of(lambda r: r.server_cpu / r.unique * 1000)

    def checks(self) -> list[tuple[str, bool | None]]:
        """Each target, True or False; None where it does not apply to this configuration."""
        sqlite_one = self.setup.database == "sqlite" and self.setup.processes == 1
        return [
            (
                "p99 ACK ≤ 10 ms (SQLite) / 15 ms (PostgreSQL)",
                self.p99 <= P99_TARGET_MS[self.setup.database],
            ),
            (
                f"server CPU ≤ {CPU_TARGET_MS:g} ms/message (SQLite ×1)",
                self.server_cpu_ms <= CPU_TARGET_MS if sqlite_one else None,
            ),
            (
                f"≤ {TRANSACTIONS_TARGET:g} transactions/message",
                self.transactions_per_message <= TRANSACTIONS_TARGET,
            ),
            ("every delivery acknowledged", all(r.acked == r.posted for r in self.runs)),
            ("0 duplicate replies", self.total("duplicates") == 0),
            ("0 missing replies", self.total("missing") == 0),
        ]


def describe_run(setup: Setup, run: Run, index: int, repeat: int) -> str:
    """One line per run on stderr, while the benchmark goes on."""
    spread = ""
    if setup.processes > 1:
        claims = "/".join(str(n) for _, n in sorted(run.claims_by.items()))
        spread = f", ACKs by process {'/'.join(map(str, run.acked_by))}, claims won {claims}"
    pg = f", PostgreSQL {run.postgres_cpu:.1f} s CPU" if run.postgres_cpu is not None else ""
    return (
        f"  {setup.label} run {index}/{repeat}: {run.acked}/{run.posted} acked, "
        f"p50 {run.p50:.2f} p99 {run.percentile(0.99):.2f} max {max(run.ms):.1f} ms, "
        f"server {run.server_cpu:.1f} s CPU{pg}, machine {run.machine_busy:.0%} busy "
        f"(other jobs {run.other_cpu:.1f} s), speed probe {run.probe_ms:.1f} ms, "
        f"{run.duplicates} duplicated, {run.missing} missing{spread}"
    )


def report(args: argparse.Namespace, summaries: list[Summary], notes: list[str]) -> int:
    repeat = f", median of {args.repeat} runs" if args.repeat > 1 else ""
    print(f"webhook benchmark: {args.rate:g} events/s for {args.duration:g} s, "
          f"{args.redeliver:.0%} redelivered, no-op agent{repeat}")  # fmt: skip
    if args.postgres_set:
        print(f"  PostgreSQL settings: {', '.join(args.postgres_set)}")
    options = os.environ.get("BENCH_DB_OPTIONS")
    if options:
        print(f"  the servers' database options (BENCH_DB_OPTIONS): {options}")
    for note in notes:
        print(f"  note: {note}")
    first = summaries[0].runs[0]
    print(f"  {first.posted} deliveries of {first.unique} messages per run; ACK/s counts "
          f"until the last late redelivery (up to 5 s past the {args.duration:g} s)")  # fmt: skip
    print()

    def per_message(seconds: float | None, run: Run) -> float | None:
        return None if seconds is None else seconds / run.unique * 1000

    def ms_per_message(s: Summary, figure: str) -> str:
        values = [per_message(getattr(r, figure), r) for r in s.runs]
        present = [v for v in values if v is not None]
        return f"{statistics.median(present):.2f}" if present else "-"

    def optional(s: Summary, figure: str, form: str, per: bool = False) -> str:
        pairs = [(getattr(r, figure), r.unique if per else 1) for r in s.runs]
        present = [value / n for value, n in pairs if value is not None]
        return form.format(statistics.median(present)) if present else "-"

    def misses(s: Summary) -> str:
        other = Counter[int]()
        for r in s.runs:
            other.update(r.other)
        parts = [f"{n}×{status}" for status, n in sorted(other.items())]
        parts += [f"{s.total('errors')} conn. errors"] if s.total("errors") else []
        return ", ".join(parts) or "0"

    rows: list[tuple[str, list[str]]] = [
        (
            "acknowledged /s",
            [f"{s.median_of(lambda r: r.acked / r.elapsed):.1f}" for s in summaries],
        ),
        ("not acknowledged", [misses(s) for s in summaries]),
        ("ACK p50 ms", [f"{s.median('p50'):.2f}" for s in summaries]),
        ("ACK p90 ms", [f"{s.median_of(lambda r: r.percentile(0.9)):.2f}" for s in summaries]),
        ("ACK p99 ms", [f"{s.p99:.2f}" for s in summaries]),
        ("ACK max ms", [f"{s.median_of(lambda r: max(r.ms)):.1f}" for s in summaries]),
        ("server CPU ms/message", [ms_per_message(s, "server_cpu") for s in summaries]),
        ("  of which in the kernel", [ms_per_message(s, "server_system_cpu") for s in summaries]),
        (
            "server instructions/message (callgrind)",
            [optional(s, "instructions", "{:,.0f}", True) for s in summaries],
        ),
        ("PostgreSQL CPU ms/message", [ms_per_message(s, "postgres_cpu") for s in summaries]),
        ("load generator CPU ms/message", [ms_per_message(s, "load_cpu") for s in summaries]),
        (
            "app transactions/message",
            [f"{s.transactions_per_message:.2f}" for s in summaries],
        ),
        ("PostgreSQL connections opened", [optional(s, "sessions", "{:.0f}") for s in summaries]),
        (
            "PostgreSQL transactions/message",
            [optional(s, "transactions", "{:.1f}", True) for s in summaries],
        ),
        ("machine busy", [f"{s.median('machine_busy'):.0%}" for s in summaries]),
        ("other jobs' CPU ms/message", [ms_per_message(s, "other_cpu") for s in summaries]),
        ("speed probe ms (lower: faster)", [f"{s.median('probe_ms'):.1f}" for s in summaries]),
        ("duplicate replies", [str(s.total("duplicates")) for s in summaries]),
        ("missing replies", [str(s.total("missing")) for s in summaries]),
    ]
    rows = [row for row in rows if any(value != "-" for value in row[1])]  # no PostgreSQL
    checks = [s.checks() for s in summaries]
    shown = {True: "PASS", False: "FAIL", None: "-"}
    for i, (name, _) in enumerate(checks[0]):
        rows.append((name, [shown[c[i][1]] for c in checks]))
    verdicts = ["PASS" if all(ok is not False for _, ok in c) else "FAIL" for c in checks]
    rows.append(("all targets", verdicts))
    width = max(len(name) for name, _ in rows)
    columns = [s.setup.label for s in summaries]
    col = max(14, *(len(c) for c in columns), *(len(v) for _, vs in rows for v in vs))
    print(f"  {'':<{width}}  " + "  ".join(f"{c:>{col}}" for c in columns))
    for name, values in rows:
        print(f"  {name:<{width}}  " + "  ".join(f"{v:>{col}}" for v in values))
    print()
    print("  CPU per message: the server processes' own time; PostgreSQL's is apart (all its")
    print("  processes on this machine); the load generator is this process (sender and fake")
    print("  Feishu). Medians over runs; replies and misses are summed over runs.")
    print()
    print("  app transactions per message, by store operation (first run of each):")
    names = sorted({name for s in summaries for name in s.runs[0].operations})
    op_width = max([len(n) for n in names] + [10])
    for name in sorted(names, key=lambda n: -summaries[0].runs[0].operations[n]):
        values = [f"{s.runs[0].operations[name] / s.runs[0].unique:.2f}" for s in summaries]
        print(f"    {name:<{op_width}}  " + "  ".join(f"{v:>{col}}" for v in values))
    ok = all(v == "PASS" for v in verdicts)
    return 0 if ok or not args.check else 1


# -- the command -----------------------------------------------------------------------------


def setups(args: argparse.Namespace, postgres_url: URL | None, notes: list[str]) -> list[Setup]:
    databases = ["sqlite", "postgres"] if args.database == "all" else [args.database]
    if postgres_url is None and "postgres" in databases:
        if args.database == "postgres":
            raise SystemExit(
                "--database postgres needs --postgres-url or " + " / ".join(POSTGRES_URL_ENVS)
            )
        databases.remove("postgres")
        notes.append(
            "PostgreSQL skipped: no URL (--postgres-url, " + " or ".join(POSTGRES_URL_ENVS) + ")"
        )
    if postgres_url is not None and "postgres" in databases and not local_postgres(postgres_url):
        notes.append("PostgreSQL is not on this machine: its CPU is not measured")
    chosen: list[Setup] = []
    for database in databases:
        default = "1" if database == "sqlite" else "1,2"
        for text in (args.processes or default).split(","):
            chosen.append(Setup(database, int(text)))
    return chosen


SCALE_TARGET = 1.6  # two PostgreSQL processes sustain at least this many times one's rate


async def find_rates(
    args: argparse.Namespace, chosen: list[Setup], postgres_url: URL | None
) -> int:
    """Per configuration: raise the rate by ``--rate-step`` from ``--rate`` until ACK p99
    passes the configuration's target (or an event goes unacknowledged, or a reply is
    missing); report the last rate that held, side by side."""
    sustained: dict[Setup, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for setup in chosen:
            rate, held = args.rate, 0.0
            while rate <= args.max_rate:
                workdir = Path(tmp) / f"{setup.slug}-{rate:g}"
                workdir.mkdir(parents=True, exist_ok=True)
                run_args = argparse.Namespace(**{**vars(args), "rate": rate})
                result = await run_once(run_args, setup, postgres_url, workdir)
                print(describe_run(setup, result, 1, 1) + f" at {rate:g}/s", file=sys.stderr)
                ok = (
                    result.percentile(0.99) <= P99_TARGET_MS[setup.database]
                    and result.acked == result.posted
                    and result.missing == 0
                    and result.duplicates == 0
                )
                if not ok:
                    break
                held = rate
                rate = round(rate * args.rate_step, 1)
            sustained[setup] = held
    print(f"webhook benchmark, the highest rate each configuration sustains ({args.duration:g} s "
          f"a step, {args.redeliver:.0%} redelivered, ACK p99 within its target):")  # fmt: skip
    for setup, rate in sustained.items():
        print(f"  {setup.label:<16} {rate:>7.1f} events/s")
    one = next((r for s, r in sustained.items() if s == Setup("postgres", 1)), None)
    two = next((r for s, r in sustained.items() if s == Setup("postgres", 2)), None)
    if one and two:
        verdict = "PASS" if two >= SCALE_TARGET * one else "FAIL"
        print(f"  PostgreSQL ×2 / ×1: {two / one:.2f} (target ≥ {SCALE_TARGET:g})  {verdict}")
        return 1 if args.check and verdict == "FAIL" else 0
    return 0


async def run(args: argparse.Namespace) -> int:
    raw = args.postgres_url or next(
        (os.environ[e] for e in POSTGRES_URL_ENVS if os.environ.get(e)), None
    )
    postgres_url = make_url(raw) if raw else None
    notes: list[str] = []
    chosen = setups(args, postgres_url, notes)
    if args.find_rate:
        return await find_rates(args, chosen, postgres_url)
    runs: dict[Setup, list[Run]] = {setup: [] for setup in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        # Configurations take turns run by run: a slow spell of the machine is spread
        # over all of them instead of landing on one.
        for index in range(1, args.repeat + 1):
            for setup in chosen:
                root = Path(args.keep) if args.keep else Path(tmp)
                workdir = root / f"{setup.slug}-{index}"
                workdir.mkdir(parents=True, exist_ok=True)
                print(f"  {setup.label} run {index}/{args.repeat} ...", file=sys.stderr)
                result = await run_once(args, setup, postgres_url, workdir)
                runs[setup].append(result)
                print(describe_run(setup, result, index, args.repeat), file=sys.stderr)
    return report(args, [Summary(setup, runs[setup]) for setup in chosen], notes)


def processes_list(text: str) -> str:
    if not re.fullmatch(r"[1-9]\d*(,[1-9]\d*)*", text):
        raise argparse.ArgumentTypeError("a comma-separated list of process counts, e.g. 1,2")
    return text


def setting(text: str) -> str:
    if not re.fullmatch(r"\s*[a-z_.]+\s*=\s*[\w.-]+\s*", text):
        raise argparse.ArgumentTypeError("NAME=VALUE, e.g. synchronous_commit=off")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "all"], default="all",
                        help="all: SQLite, and PostgreSQL when a URL is available")  # fmt: skip
    parser.add_argument("--processes", type=processes_list,
                        help="server processes per configuration, e.g. 1,2 "
                        "(default: 1 on SQLite, 1,2 on PostgreSQL)")  # fmt: skip
    parser.add_argument("--postgres-url", help="a database on the server to use: each "
                        "run creates a database of its own next to it and drops it")  # fmt: skip
    parser.add_argument("--postgres-set", action="append", default=[], type=setting,
                        metavar="NAME=VALUE", help="a PostgreSQL setting for the runs' "
                        "databases, e.g. synchronous_commit=off (repeatable)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--redeliver", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--find-rate", action="store_true", help="raise the rate until "
                        "ACK p99 passes its target; report the rate each sustains")  # fmt: skip
    parser.add_argument("--rate-step", type=float, default=1.25, help="with --find-rate")
    parser.add_argument("--max-rate", type=float, default=2000.0, help="with --find-rate")
    parser.add_argument("--keep", help="keep the servers' databases and logs in this folder")
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
