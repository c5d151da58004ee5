"""Serial per conversation, concurrent across conversations, interrupts, stop, shutdown."""

from __future__ import annotations

import asyncio

from bot.conversations import ConversationWorkers, Job
from bot.conversations.workers import Turn

from support.waiting import wait_until


class Recorder:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.ended: dict[str, asyncio.Event] = {}
        self.turns: dict[str, Turn] = {}

    def job(self, key: str, message_id: str, text: str = "hi") -> Job:
        self.gates[message_id] = asyncio.Event()
        self.started[message_id] = asyncio.Event()
        self.ended[message_id] = asyncio.Event()

        async def run(turn: Turn) -> None:
            self.turns[message_id] = turn
            self.log.append(f"start {message_id}")
            self.started[message_id].set()
            await self.gates[message_id].wait()
            self.log.append(f"end {message_id}")
            self.ended[message_id].set()

        return Job(key, message_id, text, run)


async def test_messages_of_one_conversation_run_one_at_a_time_in_order():
    workers = ConversationWorkers(max_concurrent_runs=4)
    rec = Recorder()
    first = rec.job("k", "m1")
    assert workers.submit(first) == "queued"
    await rec.started["m1"].wait()
    # While m1 runs, m2 joins it instead of queueing.
    assert workers.submit(rec.job("k", "m2", "also this")) == "joined"
    turn = rec.turns["m1"]
    assert [j.message_id for j in turn.joined] == ["m2"]
    assert turn.interrupts.drain() == ["also this"]
    rec.gates["m1"].set()
    await wait_until(rec.ended["m1"].is_set)  # its turn is over: m3 cannot join it
    assert workers.submit(rec.job("k", "m3")) == "queued"
    await rec.started["m3"].wait()
    rec.gates["m3"].set()
    await workers.close(1)
    assert rec.log == ["start m1", "end m1", "start m3", "end m3"]


async def test_conversations_run_concurrently_up_to_the_limit():
    workers = ConversationWorkers(max_concurrent_runs=2)
    rec = Recorder()
    for key in ("a", "b", "c"):
        workers.submit(rec.job(key, f"m{key}"))
    await rec.started["ma"].wait()
    await rec.started["mb"].wait()
    await wait_until(lambda: workers.active_runs == 3)  # mc's turn has begun...
    assert not rec.started["mc"].is_set()  # ...and waits for a slot
    rec.gates["ma"].set()
    await rec.started["mc"].wait()
    rec.gates["mb"].set()
    rec.gates["mc"].set()
    assert await workers.close(1) == []


async def test_stop_reaches_the_running_turn_and_drops_what_waited():
    workers = ConversationWorkers(max_concurrent_runs=1)
    rec = Recorder()
    workers.submit(rec.job("busy", "b1"))
    await rec.started["b1"].wait()
    workers.submit(rec.job("k", "m1"))  # waits for the only slot
    await wait_until(lambda: workers.active_runs == 2)  # m1's turn is waiting for it
    result = workers.stop("k", "stopped by /stop")
    assert result.stopped is True
    rec.gates["b1"].set()
    await wait_until(rec.started["m1"].is_set)
    # m1 was stopped before it started: its run is still called, told so, and ends at once.
    assert rec.turns["m1"].stopped_before_start == "stopped by /stop"
    rec.gates["m1"].set()
    assert workers.stop("nobody", "x").stopped is False
    await workers.close(1)


async def test_close_hands_back_unfinished_jobs():
    workers = ConversationWorkers(max_concurrent_runs=1)
    rec = Recorder()
    workers.submit(rec.job("a", "m1"))
    await rec.started["m1"].wait()
    workers.submit(rec.job("a", "m2"))  # joins m1
    workers.submit(rec.job("b", "m3"))  # waits for the slot
    unfinished = await workers.close(0.05)
    assert sorted(j.message_id for j in unfinished) == ["m1", "m2", "m3"]


async def test_messages_that_join_after_the_last_read_get_their_own_turn():
    workers = ConversationWorkers(max_concurrent_runs=2)
    rec = Recorder()
    workers.submit(rec.job("k", "m1"))
    await rec.started["m1"].wait()
    turn = rec.turns["m1"]
    workers.submit(rec.job("k", "m2", "read by the agent"))
    assert turn.interrupts.drain() == ["read by the agent"]  # the agent read m2
    workers.submit(rec.job("k", "m3", "too late"))  # after the agent's last read
    assert [j.message_id for j in turn.close()] == ["m3"]
    assert [j.message_id for j in turn.joined] == ["m2"]
    # Closed: a message arriving now queues instead of joining.
    assert workers.submit(rec.job("k", "m4")) == "queued"
    rec.gates["m1"].set()
    await rec.started["m3"].wait()
    rec.gates["m3"].set()
    await rec.started["m4"].wait()
    rec.gates["m4"].set()
    await workers.close(1)
    assert [line for line in rec.log if line.startswith("start")] == [
        "start m1",
        "start m3",
        "start m4",
    ]


class SharedLock:
    """The cross-process conversation lock, as two worker pools on one database see it."""

    def __init__(self) -> None:
        self.holders: dict[str, int] = {}
        self.released = asyncio.Event()
        self.events: list[str] = []

    def for_process(self, pid: int):
        lock = self

        class ProcessLock:
            async def acquire(self, key: str) -> None:
                while lock.holders.get(key, pid) != pid:
                    lock.released.clear()
                    await lock.released.wait()
                lock.holders[key] = pid
                lock.events.append(f"{pid} acquire {key}")

            async def release(self, key: str) -> None:
                if lock.holders.get(key) == pid:
                    del lock.holders[key]
                lock.events.append(f"{pid} release {key}")
                lock.released.set()

        return ProcessLock()


async def test_a_conversation_runs_in_one_process_at_a_time():
    shared = SharedLock()
    one = ConversationWorkers(4, lock=shared.for_process(1))
    two = ConversationWorkers(4, lock=shared.for_process(2))
    rec = Recorder()
    one.submit(rec.job("k", "m1"))
    await rec.started["m1"].wait()
    # The next message lands on the other process: it waits for the first to finish.
    two.submit(rec.job("k", "m2"))
    two.submit(rec.job("other", "m3"))  # another conversation is not held up
    await rec.started["m3"].wait()
    await wait_until(lambda: two.active_runs == 2)  # m2's turn has begun: it waits for the lock
    assert not rec.started["m2"].is_set()
    rec.gates["m1"].set()
    await rec.started["m2"].wait()
    rec.gates["m2"].set()
    rec.gates["m3"].set()
    await one.close(1.0)
    await two.close(1.0)
    assert rec.log.index("end m1") < rec.log.index("start m2")
    assert shared.holders == {}
    assert shared.events[:2] == ["1 acquire k", "2 acquire other"]
