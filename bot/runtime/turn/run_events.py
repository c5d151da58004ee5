"""The run event hub: every turn's events, numbered, kept for a while, fanned out live.

A turn publishes what its run does (DESIGN §3): the engine's ``step`` and ``compact``
events (in plan mode also ``phase`` and ``plan_step``, and each ``step`` carries its plan
step's id in ``plan_step``), the ``answer`` deltas of the streamed answer, and one final
``done`` (iterations, token usage, elapsed seconds, status), published by the turn once
the answer is out and the run is recorded (the engine's own done event comes before
synthesis and is not passed on). Each event gets the next id of its run, from 1.

The hub keeps the channels of the last ``max_runs`` runs in memory (runs in progress are
never dropped), each with at most ``max_events`` events: a late subscriber gets a replay
of what is kept, then the live events, until ``done``. Past the cap a run's events still
reach live subscribers but are not kept (a replay skips them; ids show the gap); ``done``
is always kept. Nothing here is shared between processes: a run of another process is
known only from the ``runs`` table once it finished (the console serves it from there).

Publishing never waits: a subscriber is a bounded queue, and one that falls too far
behind is cut off (``Subscription.overflowed``) to reconnect with its last event id.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.engine import (
    AnswerWithdrawnEvent,
    CompactEvent,
    PhaseEvent,
    PlanStepEvent,
    RunEvent,
    StepEvent,
)

# Enough for the console's recent-runs list and a late look at any of them.
MAX_RUNS = 200
# A run with many tool calls and a long answer (a delta is a few tokens) stays well within.
MAX_EVENTS_PER_RUN = 5_000
# A subscriber this far behind is cut off rather than buffering without end.
SUBSCRIBER_QUEUE = 10_000


@dataclass(frozen=True, slots=True)
class PublishedEvent:
    id: int
    type: str
    data: Mapping[str, Any]


class Subscription:
    """A subscriber's view of one run: the replay first, then live events."""

    def __init__(self, channel: RunChannel, after: int, queue_size: int = SUBSCRIBER_QUEUE) -> None:
        self._channel = channel
        self._replay = deque(e for e in channel.events if e.id > after)
        self._queue: asyncio.Queue[PublishedEvent] = asyncio.Queue(queue_size)
        self._last = after
        self.overflowed = False

    def offer(self, event: PublishedEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True

    async def next(self, idle_seconds: float) -> PublishedEvent | None:
        """The next event not seen yet; None when ``idle_seconds`` passed without one, or when
        everything was handed out and the run ended or the subscription overflowed (then
        ``ended``; an overflowed subscriber reconnects with its last id)."""
        while self._replay:
            event = self._replay.popleft()
            if event.id > self._last:
                self._last = event.id
                return event
        while True:
            if self._queue.empty() and (self.overflowed or self._channel.finished):
                return None
            try:
                event = await asyncio.wait_for(self._queue.get(), idle_seconds)
            except TimeoutError:
                return None
            if event.id > self._last:
                self._last = event.id
                return event

    @property
    def ended(self) -> bool:
        """Everything up to ``done`` was handed out (or the subscriber was cut off)."""
        return (
            (self.overflowed or self._channel.finished) and not self._replay and self._queue.empty()
        )

    def close(self) -> None:
        self._channel.subscribers.discard(self)


@dataclass(eq=False)
class RunChannel:
    """One run's events and what the console lists about it while it runs."""

    run_id: str
    conversation_id: str | None
    scope_key: str
    message_id: str
    model: str
    started_at: float
    max_events: int = MAX_EVENTS_PER_RUN
    events: list[PublishedEvent] = field(default_factory=list)
    subscribers: set[Subscription] = field(default_factory=set)
    last_id: int = 0
    dropped: int = 0  # events past the cap, not kept for replays
    status: str = "running"
    finished_at: float | None = None
    total_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def publish(self, type_: str, data: Mapping[str, Any]) -> PublishedEvent | None:
        if self.finished:
            return None
        self.last_id += 1
        event = PublishedEvent(self.last_id, type_, data)
        if len(self.events) < self.max_events or type_ == "done":
            self.events.append(event)
        else:
            self.dropped += 1
        for subscriber in list(self.subscribers):
            subscriber.offer(event)
        return event

    def subscribe(self, after: int = 0, *, queue_size: int = SUBSCRIBER_QUEUE) -> Subscription:
        """Replay of the kept events with an id above ``after``, then the live ones (at most
        ``queue_size`` of them not yet read before the subscription is cut off)."""
        subscription = Subscription(self, after, queue_size)
        if not self.finished:
            self.subscribers.add(subscription)
        return subscription


class RunPublisher:
    """What a turn holds: publishes its run's events into the hub."""

    def __init__(self, channel: RunChannel, clock: Callable[[], float]) -> None:
        self.channel = channel
        self._clock = clock

    def on_event(self, event: RunEvent) -> None:
        """The engine's ``on_event``: steps, compactions, answer text taken back and, in
        plan mode, phases and plan steps. Its own ``done`` is not the end of the turn
        (``done`` below is), and answer text comes through ``answer`` from the live card,
        which sees every delta the user sees."""
        published = StepEvent | CompactEvent | PhaseEvent | PlanStepEvent | AnswerWithdrawnEvent
        if isinstance(event, published):
            self.channel.publish(event.type, event.to_dict())

    def answer(self, delta: str) -> None:
        if delta:
            self.channel.publish("answer", {"type": "answer", "delta": delta})

    def done(
        self,
        *,
        status: str,
        iterations: int = 0,
        usage: Mapping[str, int] | None = None,
        tool_calls: int = 0,
        error: str | None = None,
        conversation_id: str | None = None,
    ) -> None:
        channel = self.channel
        if channel.finished:
            return
        now = self._clock()
        usage = dict(usage or {})
        if conversation_id:
            channel.conversation_id = conversation_id
        channel.status = status
        channel.total_tokens = int(usage.get("total_tokens", 0))
        channel.publish(
            "done",
            {
                "type": "done",
                "run_id": channel.run_id,
                "status": status,
                "iterations": iterations,
                "usage": usage,
                "elapsed": round(max(0.0, now - channel.started_at), 3),
                "tool_calls": tool_calls,
                "model": channel.model or None,
                "error": error,
            },
        )
        channel.finished_at = now


class RunEventHub:
    def __init__(
        self,
        *,
        max_runs: int = MAX_RUNS,
        max_events: int = MAX_EVENTS_PER_RUN,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max_runs = max_runs
        self._max_events = max_events
        self._clock = clock
        self._runs: OrderedDict[str, RunChannel] = OrderedDict()

    def open(
        self,
        run_id: str,
        *,
        conversation_id: str | None,
        scope_key: str,
        message_id: str,
        model: str,
        started_at: float,
    ) -> RunPublisher:
        channel = RunChannel(
            run_id, conversation_id, scope_key, message_id, model, started_at, self._max_events
        )
        self._runs[run_id] = channel
        self._evict()
        return RunPublisher(channel, self._clock)

    def get(self, run_id: str) -> RunChannel | None:
        return self._runs.get(run_id)

    def live(self) -> list[RunChannel]:
        """The runs in progress here, newest first."""
        return [c for c in reversed(self._runs.values()) if not c.finished]

    def __len__(self) -> int:
        return len(self._runs)

    def _evict(self) -> None:
        """Forget the oldest finished runs past ``max_runs``; runs in progress stay.

        Walks from the oldest and stops once enough are gone: the oldest runs are nearly
        always finished, so this is O(1) a run instead of a scan of every run kept.
        """
        excess = len(self._runs) - self._max_runs
        if excess <= 0:
            return
        finished = []
        for run_id, channel in self._runs.items():
            if channel.finished:
                finished.append(run_id)
                if len(finished) == excess:
                    break
        for run_id in finished:
            del self._runs[run_id]
