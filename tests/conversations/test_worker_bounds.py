"""What may join a run is bounded; the rest waits in order, or past a bound is refused.

A flood of messages in one conversation must neither grow the run's request past what
the model accepts nor vanish: each message is joined to the run (and read by it, or
handed back when the run ends), queued for a later turn, or refused so the sender can
be told. The worker counts joins with the rule the agent reads interrupts by.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.conversations import ConversationWorkers, Job
from bot.conversations.workers import Turn
from bot.engine.interrupts import InterruptLimits

from support.waiting import wait_until


class Runs:
    """Jobs whose runs wait until released, recording which turn ran what."""

    def __init__(self) -> None:
        self.release: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.turns: dict[str, Turn] = {}
        self.order: list[str] = []

    def job(self, message_id: str, text: str = "hi", key: str = "k") -> Job:
        self.release[message_id] = asyncio.Event()
        self.started[message_id] = asyncio.Event()

        async def run(turn: Turn) -> None:
            self.turns[message_id] = turn
            self.order.append(message_id)
            self.started[message_id].set()
            await self.release[message_id].wait()
            turn.interrupts.drain()  # the agent read every interrupt
            turn.close()

        return Job(key, message_id, text, run)


async def test_joining_is_bounded_in_count_and_the_rest_waits_in_order() -> None:
    workers = ConversationWorkers(4, join_limits=InterruptLimits(max_messages=3))
    runs = Runs()
    workers.submit(runs.job("m1"))
    await runs.started["m1"].wait()
    runs.turns["m1"].interrupts.bind(asyncio.current_task())  # type: ignore[arg-type]
    outcomes = [workers.submit(runs.job(f"m{i}")) for i in range(2, 7)]
    assert outcomes == ["joined", "joined", "joined", "queued", "queued"]
    assert [j.message_id for j in runs.turns["m1"].joined] == ["m2", "m3", "m4"]
    runs.release["m1"].set()
    await runs.started["m5"].wait()
    runs.release["m5"].set()
    await runs.started["m6"].wait()
    runs.release["m6"].set()
    await workers.close(1)
    assert runs.order == ["m1", "m5", "m6"]


async def test_joining_is_bounded_in_characters() -> None:
    limits = InterruptLimits(max_messages=10, max_chars=1_000, max_message_chars=1_000)
    workers = ConversationWorkers(4, join_limits=limits)
    runs = Runs()
    workers.submit(runs.job("m1"))
    await runs.started["m1"].wait()
    runs.turns["m1"].interrupts.bind(asyncio.current_task())  # type: ignore[arg-type]
    assert workers.submit(runs.job("long", "x" * 5_000)) == "joined"  # counts as 1,000
    assert workers.submit(runs.job("short", "one more")) == "queued"
    runs.release["m1"].set()
    await runs.started["short"].wait()
    runs.release["short"].set()
    await workers.close(1)


async def test_past_the_waiting_bound_a_message_is_refused() -> None:
    workers = ConversationWorkers(4, join_limits=InterruptLimits(max_messages=1), max_waiting=2)
    runs = Runs()
    assert workers.submit(runs.job("m1")) == "queued"  # an idle conversation starts
    await runs.started["m1"].wait()
    runs.turns["m1"].interrupts.bind(asyncio.current_task())  # type: ignore[arg-type]
    outcomes = [workers.submit(runs.job(f"m{i}")) for i in range(2, 7)]
    assert outcomes == ["joined", "queued", "queued", "refused", "refused"]
    # Another conversation is not affected.
    assert workers.submit(runs.job("other", key="k2")) == "queued"
    for message_id in ("m1", "m3", "m4", "other"):
        runs.release[message_id].set()
    await runs.started["m4"].wait()
    await workers.close(1)
    assert "m5" not in runs.order and "m6" not in runs.order


async def test_a_message_does_not_overtake_those_waiting_before_it() -> None:
    limits = InterruptLimits(max_messages=10, max_chars=1_000, max_message_chars=1_000)
    workers = ConversationWorkers(4, join_limits=limits)
    runs = Runs()
    workers.submit(runs.job("m1"))
    await runs.started["m1"].wait()
    runs.turns["m1"].interrupts.bind(asyncio.current_task())  # type: ignore[arg-type]
    assert workers.submit(runs.job("big", "b" * 900)) == "joined"
    assert workers.submit(runs.job("bigger", "c" * 900)) == "queued"
    # There would be room for this one in the run, but "bigger" came first.
    assert workers.submit(runs.job("tiny", "ok")) == "queued"
    runs.release["m1"].set()
    await runs.started["bigger"].wait()
    runs.release["bigger"].set()
    await runs.started["tiny"].wait()
    runs.release["tiny"].set()
    await workers.close(1)
    assert runs.order == ["m1", "bigger", "tiny"]


async def test_before_the_run_begins_only_what_keeps_its_question_whole_joins() -> None:
    # Messages that join a run waiting for a slot become part of its question, which
    # the agent cuts past the message cap: one that would be cut waits instead.
    limits = InterruptLimits(max_messages=10, max_chars=8_000, max_message_chars=1_000)
    workers = ConversationWorkers(1, join_limits=limits)
    runs = Runs()
    workers.submit(runs.job("busy", key="elsewhere"))
    await runs.started["busy"].wait()
    assert workers.submit(runs.job("m1", "q" * 600)) == "queued"  # waits for the slot
    await wait_until(lambda: workers.active_runs == 2)  # its turn has begun, without the slot
    assert workers.submit(runs.job("m2", "a" * 300)) == "joined"  # 901 characters
    assert workers.submit(runs.job("m3", "b" * 300)) == "queued"  # would be 1,202
    for message_id in ("busy", "m1", "m3"):
        runs.release[message_id].set()
    await runs.started["m3"].wait()
    await workers.close(1)
    assert [j.message_id for j in runs.turns["m1"].joined] == ["m2"]


@given(
    sizes=st.lists(st.integers(1, 3_000), max_size=40),
    max_messages=st.integers(1, 6),
    max_chars=st.integers(200, 4_000),
    max_waiting=st.integers(0, 6),
)
@settings(max_examples=100, deadline=None)
def test_every_message_is_joined_queued_or_refused_exactly_once(
    sizes: list[int], max_messages: int, max_chars: int, max_waiting: int
) -> None:
    limits = InterruptLimits(max_messages, max_chars, max_chars)

    async def scenario() -> None:
        workers = ConversationWorkers(2, join_limits=limits, max_waiting=max_waiting)
        runs = Runs()
        workers.submit(runs.job("first"))
        await runs.started["first"].wait()
        turn = runs.turns["first"]
        turn.interrupts.bind(asyncio.current_task())  # type: ignore[arg-type]
        jobs = [runs.job(f"m{i}", f"<m{i}>" + "t" * size) for i, size in enumerate(sizes)]
        outcomes = {job.message_id: workers.submit(job) for job in jobs}
        joined = [m for m, o in outcomes.items() if o == "joined"]
        queued = [m for m, o in outcomes.items() if o == "queued"]
        assert [j.message_id for j in turn.joined] == joined
        assert len(joined) <= max_messages
        assert sum(min(len(j.text), limits.message_cap) for j in turn.joined) <= max_chars
        assert len(queued) <= max_waiting
        # No message joins once one waits (it would be answered first), and a message is
        # refused only when as many as may wait are waiting.
        kinds = [outcomes[job.message_id] for job in jobs]
        accepted = [kind for kind in kinds if kind != "refused"]
        assert accepted == sorted(accepted, key=["joined", "queued"].index)
        for index, kind in enumerate(kinds):
            if kind == "refused":
                assert kinds[:index].count("queued") == max_waiting
        # The run reads what it may; the rest of what joined is handed back in order.
        read = turn.interrupts.drain()
        assert len(read) == len(joined)
        for message_id in ["first", *queued]:
            runs.release[message_id].set()
        assert await workers.close(1) == []
        assert runs.order == ["first", *queued]

    asyncio.run(scenario())
