"""One plan step running: its own ReAct agent, its own stop switch, its own time limit.

Each step's agent is bound to a private ``InterruptQueue``: stopping a step (``/stop``,
or its time limit) goes through ``InterruptQueue.stop``, the mechanism ``ReActAgent``
already settles cleanly, so even a stopped step returns its tool calls and a consistent
result. The user's queue stays with the plan-mode run, which reads follow-ups from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..agent import ReActAgent
from ..events import CompactEvent, EventCallback, EventSink, PlanStepState, RunEvent, StepEvent
from ..interrupts import InterruptQueue
from ..messages import ImagePart, Message
from ..result import AgentResult, Step
from .plan import PlanStep
from .report import StepReport
from .step_agents import StepAgents
from .step_clock import StepClock


@dataclass(frozen=True, slots=True)
class StepOutcome:
    report: StepReport
    tool_steps: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class StepRunContext:
    """What every step of a run shares: the bot's ``deps``, the run id, the events, and
    what the user sent with the question (documents, images), which any step may need:
    a step sees neither the conversation nor the question, only its task."""

    agents: StepAgents
    sink: EventSink
    deps: Any
    run_id: str
    timeout: float
    documents: tuple[Message, ...] = ()
    images: tuple[ImagePart, ...] = ()


class RunningStep:
    """A step's agent running in a task of its own; ``stop`` ends it with a result."""

    def __init__(self, step: PlanStep, question: str, context: StepRunContext, round_: int) -> None:
        self.step = step
        self.started = time.perf_counter()
        self._queue = InterruptQueue()
        self._context = context
        self._round = round_
        self._clock = StepClock(context.timeout, self._expire)
        agent = context.agents.for_step(step, self._clock, question)
        self.task: asyncio.Task[StepOutcome] = asyncio.get_running_loop().create_task(
            self._run(agent, question), name=f"plan-step-{step.id}"
        )

    def stop(self, reason: str) -> None:
        # Not yet bound (the task has not started): nothing ran, so a plain cancel is exact.
        if not self._queue.stop(reason):
            self.task.cancel(reason)

    def cancelled_outcome(self, reason: str) -> StepOutcome:
        """The outcome of a step whose task was cancelled before its agent started."""
        self._clock.close()
        return StepOutcome(StepReport(self.step, "cancelled", reason=reason))

    def failed_outcome(self, reason: str) -> StepOutcome:
        self._clock.close()
        return StepOutcome(StepReport(self.step, "failed", reason=reason))

    def _expire(self) -> None:
        self.stop(f"timed out after {self._clock.limit:g} s")

    async def _run(self, agent: ReActAgent, question: str) -> StepOutcome:
        context = self._context
        try:
            result = await agent.run(
                question,
                history=context.documents,
                images=context.images,
                interrupt_queue=self._queue,
                on_event=self._forwarder() if context.sink.active else None,
                deps=context.deps,
                run_id=f"{context.run_id}:{self._round}:{self.step.id}",
            )
        finally:
            self._clock.close()
        return StepOutcome(
            self._report(result),
            tuple(replace(s, plan_step=self.step.id) for s in result.steps),
        )

    def _report(self, result: AgentResult) -> StepReport:
        state, reason = _state_of(result, self._clock.expired)
        return StepReport(
            self.step,
            state,
            result=result.answer,
            reason=reason,
            duration=time.perf_counter() - self.started,
            model=result.model,
            tool_calls=len(result.steps),
            iterations=result.iterations,
            usage=result.usage,
        )

    def _forwarder(self) -> EventCallback:
        sink, step_id = self._context.sink, self.step.id

        def forward(event: RunEvent) -> None:
            # The step's own ``done`` is not the run's, and steps write no answer.
            if isinstance(event, StepEvent):
                sink.emit(replace(event, plan_step=step_id))
            elif isinstance(event, CompactEvent):
                sink.emit(event)

        return forward


def _state_of(result: AgentResult, timed_out: bool) -> tuple[PlanStepState, str | None]:
    if result.status == "completed":
        return "completed", None
    if result.status == "cancelled":
        if timed_out:
            return "failed", result.error
        return "cancelled", result.error
    return "failed", result.error or result.status


def inputs_of(step: PlanStep, done: Sequence[StepReport]) -> list[tuple[str, str, str]]:
    """(id, task, result) of ``step``'s dependencies, in the order it lists them."""
    by_id = {report.step.id: report for report in done}
    return [(dep, by_id[dep].step.task, by_id[dep].result) for dep in step.dependencies]
