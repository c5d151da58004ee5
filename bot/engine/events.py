"""Run events: what a run did, as it happens, for cards, consoles and logs.

The same event types a web UI receives over Server-Sent Events:
``step`` (a tool call started or finished), ``answer`` (a delta of the answer: the
model's final reply as it streams in, or the synthesized answer), ``answer_withdrawn``
(answer text already sent is not the answer after all: take it back), ``compact`` (the
context was summarised) and ``done`` (the run ended).
Plan mode (``bot.engine.dag``) adds ``phase`` (planning, executing, analysing,
replanning, done) and ``plan_step`` (a step of the plan changed state); its step
agents' ``step`` events carry the plan step's id in ``plan_step``.

``EventSink`` delivers them to the caller's ``on_event`` in order, from a task of its
own, so a slow consumer never holds up the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .messages import Usage

logger = logging.getLogger(__name__)

StepStatus = Literal["ok", "error", "blocked", "cancelled"]
PlanPhase = Literal["planning", "executing", "analysing", "replanning", "done"]
PlanStepState = Literal["pending", "running", "completed", "failed", "skipped", "cancelled"]


@dataclass(frozen=True, slots=True)
class StepEvent:
    type: ClassVar[str] = "step"
    phase: Literal["started", "finished"]
    index: int
    iteration: int
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    observation: str | None = None
    status: StepStatus | None = None
    duration: float | None = None
    # In plan mode: the id of the plan step whose agent made this call (None otherwise).
    plan_step: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": self.type,
            "phase": self.phase,
            "index": self.index,
            "iteration": self.iteration,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "observation": self.observation,
            "status": self.status,
            "duration": self.duration,
        }
        if self.plan_step is not None:  # only in plan mode: ReAct consumers see no new key
            data["plan_step"] = self.plan_step
        return data


@dataclass(frozen=True, slots=True)
class AnswerEvent:
    type: ClassVar[str] = "answer"
    delta: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "delta": self.delta}


@dataclass(frozen=True, slots=True)
class AnswerWithdrawnEvent:
    """The last ``text`` of the answer sent so far is not the answer: remove it.

    A streamed reply's text goes out as ``answer`` deltas while it may be the final
    answer. It is withdrawn when the reply turned out to be tool calls (a note before
    them), when the run dropped it for a message the user sent meanwhile (a new answer
    follows), or when its stream broke and the call is made again. ``text`` is exactly
    what those deltas added, so a consumer cuts it off the end of its answer.
    """

    type: ClassVar[str] = "answer_withdrawn"
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


@dataclass(frozen=True, slots=True)
class CompactEvent:
    type: ClassVar[str] = "compact"
    tokens_before: int
    tokens_after: int
    messages_summarized: int
    summarized_by_model: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "messages_summarized": self.messages_summarized,
            "summarized_by_model": self.summarized_by_model,
        }


@dataclass(frozen=True, slots=True)
class DoneEvent:
    type: ClassVar[str] = "done"
    status: str
    iterations: int
    usage: Usage
    elapsed: float
    tool_calls: int
    model: str | None = None
    error: str | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "iterations": self.iterations,
            "usage": self.usage.as_dict(),
            "elapsed": round(self.elapsed, 3),
            "tool_calls": self.tool_calls,
            "model": self.model,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    """Plan mode moved to another phase; ``round`` counts re-plans (0 is the first plan)."""

    type: ClassVar[str] = "phase"
    phase: PlanPhase
    round: int = 0
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "phase": self.phase, "round": self.round, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class PlanStepEvent:
    """A plan step changed state; every step is announced ``pending`` once it is planned.

    ``reason`` says why a step failed, was skipped or cancelled; ``duration`` is set when
    it ended after running.
    """

    type: ClassVar[str] = "plan_step"
    step_id: str
    task: str
    state: PlanStepState
    round: int = 0
    dependencies: tuple[str, ...] = ()
    reason: str | None = None
    duration: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "step_id": self.step_id,
            "task": self.task,
            "state": self.state,
            "round": self.round,
            "dependencies": list(self.dependencies),
            "reason": self.reason,
            "duration": None if self.duration is None else round(self.duration, 3),
        }


RunEvent = (
    StepEvent
    | AnswerEvent
    | AnswerWithdrawnEvent
    | CompactEvent
    | DoneEvent
    | PhaseEvent
    | PlanStepEvent
)
EventCallback = Callable[[RunEvent], Awaitable[None] | None]


class EventSink:
    """Hands events to ``on_event`` one at a time, in order.

    ``emit`` never waits. A plain function is called inside ``emit``: a task, an event and
    a queue for every run cost more than such a consumer (a list's append, the console's
    publisher) does. A coroutine function, or a plain one that answers with an awaitable,
    gets its events through a task from then on, and ``aclose`` waits until every queued
    event was delivered. A consumer that raises is logged and keeps receiving the
    following events.
    """

    def __init__(self, on_event: EventCallback | None) -> None:
        self._on_event = on_event
        self._pending: deque[RunEvent] = deque()
        self._wakeup: asyncio.Event | None = None  # with the task
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._first: Awaitable[None] | None = None  # the task's first delivery, until it starts
        if on_event is not None and inspect.iscoroutinefunction(on_event):
            self._start(None, "")

    @property
    def active(self) -> bool:
        return self._on_event is not None

    def emit(self, event: RunEvent) -> None:
        if self._on_event is None or self._closed:
            return
        if self._wakeup is None:
            self._call(event)
            return
        self._pending.append(event)
        self._wakeup.set()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None and self._wakeup is not None:
            self._wakeup.set()
            await asyncio.shield(self._task)

    def abort(self) -> None:
        """Stop delivering (the run itself was cancelled from outside)."""
        self._closed = True
        first, self._first = self._first, None
        if inspect.iscoroutine(first):
            first.close()  # its task never started: no "never awaited" warning
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _invoke(self, event: RunEvent) -> Awaitable[None] | None:
        """``on_event(event)``: what it answered when that is awaitable, else None."""
        assert self._on_event is not None
        try:
            answer = self._on_event(event)
        except Exception:  # a broken consumer must not break the run
            logger.exception("on_event consumer failed on %s event", event.type)
            return None
        return answer if inspect.isawaitable(answer) else None

    def _call(self, event: RunEvent) -> None:
        answer = self._invoke(event)
        if answer is not None:
            # A callable object with an async __call__, say: this event's delivery, then
            # every later one, in order, in a task.
            self._start(answer, event.type)

    def _start(self, first: Awaitable[None] | None, first_kind: str) -> None:
        self._first = first
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._deliver(self._wakeup, first_kind))

    async def _deliver(self, wakeup: asyncio.Event, first_kind: str) -> None:
        first, self._first = self._first, None
        if first is not None:
            await _delivered(first, first_kind)
        pending = self._pending
        while True:
            await wakeup.wait()
            wakeup.clear()
            while pending:
                event = pending.popleft()
                answer = self._invoke(event)
                if answer is not None:
                    await _delivered(answer, event.type)
            if self._closed and not pending:
                return


async def _delivered(answer: Awaitable[None], kind: str) -> None:
    try:
        await answer
    except Exception:  # a broken consumer must not break the run
        logger.exception("on_event consumer failed on %s event", kind)
