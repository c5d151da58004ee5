"""The run event hub, and the SSE stream's heartbeat (the e2e tests cover the rest)."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from bot.console import CONSOLE, Console, add_console
from bot.engine import CompactEvent, StepEvent
from bot.engine.messages import Usage
from bot.runtime.turn.run_events import RunEventHub, RunPublisher

from support.servers import serving


def open_run(hub: RunEventHub, run_id: str = "r1") -> RunPublisher:
    return hub.open(
        run_id,
        conversation_id=None,
        scope_key="dm:ou_x",
        message_id="om_1",
        model="m",
        started_at=100.0,
    )


def step(phase: str = "started") -> StepEvent:
    return StepEvent(
        phase, 0, 1, "c1", "lookup", {"q": 1}, status="ok" if phase != "started" else None
    )  # type: ignore[arg-type]


async def drain(subscription, idle: float = 0.05) -> list[Any]:
    events = []
    while (event := await subscription.next(idle)) is not None:
        events.append(event)
    return events


async def test_events_are_numbered_per_run_and_done_ends_the_run():
    hub = RunEventHub(clock=lambda: 102.5)
    run = open_run(hub)
    other = open_run(hub, "r2")
    run.on_event(step())
    run.on_event(CompactEvent(10, 5, 2, False))
    other.answer("x")
    run.answer("")  # nothing to say: no event
    run.answer("hi")
    run.on_event(step("finished"))
    run.done(status="completed", iterations=2, usage=Usage(1, 2, 3).as_dict(), tool_calls=1)
    run.answer("late")  # after done: dropped
    channel = hub.get("r1")
    assert channel is not None
    assert [(e.id, e.type) for e in channel.events] == [
        (1, "step"),
        (2, "compact"),
        (3, "answer"),
        (4, "step"),
        (5, "done"),
    ]
    done = channel.events[-1].data
    assert done["elapsed"] == 2.5 and done["usage"]["total_tokens"] == 3
    assert done["model"] == "m" and done["status"] == "completed"
    assert [c.run_id for c in hub.live()] == ["r2"]
    assert [e.id for e in hub.get("r2").events] == [1]


async def test_a_subscriber_gets_the_replay_then_live_events_once():
    hub = RunEventHub()
    run = open_run(hub)
    run.answer("a")
    run.answer("b")
    channel = hub.get("r1")
    subscription = channel.subscribe(after=1)
    run.answer("c")
    run.done(status="completed")
    events = await drain(subscription)
    assert [(e.id, e.data.get("delta")) for e in events] == [(2, "b"), (3, "c"), (4, None)]
    assert subscription.ended
    subscription.close()
    assert not channel.subscribers
    # After the end: a replay only, and nothing past the last id.
    assert await drain(channel.subscribe(after=4)) == []


async def test_the_event_cap_keeps_the_start_and_done_but_live_subscribers_get_all():
    hub = RunEventHub(max_events=3)
    run = open_run(hub)
    subscription = hub.get("r1").subscribe()
    for n in range(6):
        run.answer(str(n))
    run.done(status="completed")
    channel = hub.get("r1")
    assert [e.id for e in channel.events] == [1, 2, 3, 7] and channel.dropped == 3
    assert [e.id for e in await drain(subscription)] == [1, 2, 3, 4, 5, 6, 7]


async def test_only_finished_runs_are_evicted_oldest_first():
    hub = RunEventHub(max_runs=2)
    first = open_run(hub, "a")
    open_run(hub, "b")
    first_done = open_run(hub, "c")
    assert len(hub) == 3  # nothing finished: nothing to drop
    first_done.done(status="completed")
    first.done(status="completed")
    open_run(hub, "d")
    assert hub.get("a") is None and hub.get("c") is None and len(hub) == 2
    open_run(hub, "e")
    assert [c.run_id for c in hub.live()] == ["e", "d", "b"]


async def test_a_subscriber_that_falls_behind_is_cut_off():
    hub = RunEventHub()
    run = open_run(hub)
    subscription = hub.get("r1").subscribe(queue_size=2)
    for n in range(3):
        run.answer(str(n))
    assert subscription.overflowed
    assert [e.id for e in await drain(subscription)] == [1, 2]
    assert subscription.ended


async def test_the_stream_sends_heartbeats_while_the_run_is_quiet():
    hub = RunEventHub()
    run = open_run(hub)
    app = web.Application()
    add_console(app, "secret")
    app[CONSOLE] = Console(hub, runs=None, governance=None, heartbeat_seconds=0.05)  # type: ignore[arg-type]
    async with serving(app) as served:
        async with aiohttp.ClientSession() as session:
            url = f"{served.url}/api/runs/r1/events"
            async with session.get(url, headers={"Authorization": "Bearer secret"}) as resp:
                assert await resp.content.readline() == b": heartbeat\n"
                run.answer("hi")
                run.done(status="completed")
                body = (await resp.content.read()).decode()
        assert 'event: answer\nid: 1\ndata: {"type":"answer","delta":"hi"}\n\n' in body
        assert body.rstrip().split("\n\n")[-1].startswith("event: done\nid: 2\n")
