"""DAGAgent: plan mode, a drop-in for ``ReActAgent`` where the bot runs a turn.

``run()`` takes exactly ``ReActAgent.run``'s arguments and, like it, always returns a
consistent ``AgentResult``: a stop ends it ``cancelled``, a bug ends it ``error``.
Without a usable plan it answers as ``ReActAgent`` would (logged as a warning). In
``mode="auto"`` a ``ModeSelector`` picks ReAct or a plan per question first.
``stream_answer()`` writes the answer from the steps' results, with ReAct's synthesis.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, Literal, Unpack

from ..events import DoneEvent, EventCallback, EventSink, PhaseEvent, RunEvent
from ..hooks import Hook
from ..interrupts import InterruptLimits, InterruptQueue, cap_text
from ..llm import LLM
from ..loop import fallback_summary
from ..messages import ImagePart, Message, MessageLike, Usage, as_messages
from ..model_registry import ModelRegistry
from ..result import AgentResult, RunStatus
from ..tools import Tool, ToolRegistry
from .analyzer import PlanAnalyzer
from .events_relay import relay
from .executor import DAGExecutor
from .mode import ModeChoice, ModeSelector
from .outcome import RunFacts, plan_result
from .plan import PlanError
from .planner import DAGPlanner
from .rounds import PlanParts, PlanRun
from .settings import DAGSettings
from .step_agents import ReActOptions, StepAgents
from .step_run import StepRunContext

logger = logging.getLogger(__name__)

AgentMode = Literal["dag", "auto"]


@dataclass(frozen=True, slots=True)
class _Request:
    query: str
    history: list[Message]
    images: tuple[ImagePart, ...]
    interrupts: InterruptQueue | None
    on_event: EventCallback | None
    deps: Any
    run_id: str


class DAGAgent:
    """Plans a goal into steps, runs independent steps in parallel, judges, re-plans.

    ``models`` gives each step its model by the step's ``model_hint`` (an LLM alone is a
    registry of one). ``tools`` and ``hooks`` are those every step's ReAct agent gets, so
    approvals and read-only mode apply to each step; ``options`` are ReActAgent's
    keyword options, for the steps and for the ReAct fallback alike.
    """

    def __init__(
        self,
        models: ModelRegistry | LLM,
        tools: ToolRegistry | Iterable[Tool] = (),
        *,
        hooks: Sequence[Hook] = (),
        mode: AgentMode = "dag",
        settings: DAGSettings | None = None,
        selector: ModeSelector | None = None,
        today: Callable[[], date] = date.today,
        **options: Unpack[ReActOptions],
    ) -> None:
        self.models = models if isinstance(models, ModelRegistry) else ModelRegistry(models)
        self.llm = self.models.default
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.settings = settings or DAGSettings()
        self.agents = StepAgents(self.models, self.tools, hooks, **options)
        # The ReAct agent of this run's fallback and of auto mode's "react"; its
        # synthesis writes plan mode's answers too.
        self.react = self.agents.fallback()
        self.interrupt_limits = options.get("interrupt_limits") or InterruptLimits()
        s = self.settings
        self.parts = PlanParts(
            DAGPlanner(
                self.models.get(s.planner_hint), self.tools, max_steps=s.max_steps, today=today
            ),
            DAGExecutor(max_concurrency=s.max_concurrency, dependency_chars=s.dependency_chars),
            PlanAnalyzer(self.models.get(s.analyzer_hint), threshold=s.confidence_threshold),
            s.max_replans,
        )
        if selector is None and mode == "auto":
            selector = ModeSelector(self.models.get(s.selector_hint))
        self.selector = selector

    async def run(
        self,
        query: str,
        *,
        history: Sequence[MessageLike] | None = None,
        images: Sequence[ImagePart] = (),
        interrupt_queue: InterruptQueue | None = None,
        on_event: EventCallback | None = None,
        deps: Any = None,
        run_id: str | None = None,
    ) -> AgentResult:
        """Answer ``query`` with a plan (see the class); never raises for model, tool or
        hook failures. ``interrupt_queue.stop()`` ends the run ``cancelled``; a message
        put into it during the run re-plans with it. Arguments as ``ReActAgent.run``."""
        if not all(isinstance(image, ImagePart) for image in images):
            raise TypeError("images must be ImagePart values")
        request = _Request(
            cap_text(query, self.interrupt_limits.message_cap),
            [_as_history(m) for m in as_messages(history)] if history is not None else [],
            tuple(images),
            interrupt_queue,
            on_event,
            deps,
            run_id or uuid.uuid4().hex,
        )
        extra = Usage()
        if self.selector is not None:
            chosen = await self._choose(request)
            if isinstance(chosen, AgentResult):
                return chosen  # stopped while the mode was being chosen
            logger.info("run %s: %s mode (%s)", request.run_id, chosen.mode, chosen.reason)
            if chosen.mode == "react":
                return await self._react(request, chosen.usage, ())
            extra = chosen.usage
        return await self._plan(request, extra)

    async def stream_answer(
        self,
        query: str,
        result: AgentResult,
        *,
        on_event: EventCallback | None = None,
        fallback: bool = True,
    ) -> AsyncIterator[str]:
        """Stream the answer written from ``result`` (ReAct's synthesis, on its trace:
        for a plan, the steps' results)."""
        async for delta in self.react.stream_answer(
            query, result, on_event=on_event, fallback=fallback
        ):
            yield delta

    # -- internals ---------------------------------------------------------------------

    async def _plan(self, request: _Request, extra: Usage) -> AgentResult:
        started = time.perf_counter()
        sink = EventSink(request.on_event)
        run = self._new_run(request, sink)
        run.usage += extra
        task = asyncio.current_task()
        queue = request.interrupts
        if queue is not None and task is not None:
            queue.bind(task, self.interrupt_limits)
        status: RunStatus = "completed"
        error: str | None = None
        try:
            await run.run(request.query)
        except PlanError as exc:
            if queue is not None and task is not None:
                queue.unbind(task)
            return await self._without_plan(request, run.usage, exc, sink)
        except asyncio.CancelledError:
            stop_reason = queue.stop_reason if queue is not None else None
            if stop_reason is None or task is None or task.uncancel() > 0:
                sink.abort()
                raise
            run.settle_stopped()
            status, error = "cancelled", stop_reason
        except Exception as exc:  # an engine bug must still yield a result
            logger.exception("plan run %s failed", request.run_id)
            run.settle_stopped()
            status, error = "error", f"internal error: {type(exc).__name__}"
        finally:
            if queue is not None and task is not None:
                queue.unbind(task)
        result = plan_result(run, self._facts(request, status, error, started))
        sink.emit(PhaseEvent("done", len(run.rounds) - 1 if run.rounds else 0, result.status))
        sink.emit(_done(result))
        await sink.aclose()
        return result

    async def _choose(self, request: _Request) -> ModeChoice | AgentResult:
        """Auto mode's choice, with the run's queue bound meanwhile: the choice may be a
        model call, and a ``/stop`` during it must end the run, not be lost between it
        and the run that follows (each binds the queue only when it starts)."""
        assert self.selector is not None
        queue, task = request.interrupts, asyncio.current_task()
        if queue is None or task is None:
            return await self.selector.choose(request.query)
        started = time.perf_counter()
        queue.bind(task, self.interrupt_limits)
        try:
            return await self.selector.choose(request.query)
        except asyncio.CancelledError:
            reason = queue.stop_reason
            if reason is None or task.uncancel() > 0:
                raise
        finally:
            queue.unbind(task)
        return await self._stopped_before_work(request, reason, started)

    async def _stopped_before_work(
        self, request: _Request, reason: str, started: float
    ) -> AgentResult:
        result = AgentResult(
            answer=fallback_summary([], "cancelled", reason),
            messages=[
                *request.history,
                Message.user(request.query, pinned=True, kind="query", images=request.images),
            ],
            iterations=0,
            steps=[],
            usage=Usage(),
            elapsed=time.perf_counter() - started,
            status="cancelled",
            error=reason,
            mode=self.react.mode,
            tools=tuple(self.tools.names()),
            run_id=request.run_id,
            model=getattr(self.llm, "model", None),
        )
        sink = EventSink(request.on_event)
        sink.emit(_done(result))
        await sink.aclose()
        return result

    async def _without_plan(
        self, request: _Request, spent: Usage, exc: PlanError, sink: EventSink
    ) -> AgentResult:
        logger.warning("run %s: no usable plan (%s); answering with ReAct", request.run_id, exc)
        sink.emit(PhaseEvent("executing", 0, "no usable plan: answering without one"))
        await sink.aclose()  # our events first, then the ReAct run's
        return await self._react(
            request, spent, (PhaseEvent("done", 0, "answered without a plan"),)
        )

    async def _react(
        self, request: _Request, spent: Usage, before_done: tuple[RunEvent, ...]
    ) -> AgentResult:
        result = await self.react.run(
            request.query,
            history=request.history,
            images=request.images,
            interrupt_queue=request.interrupts,
            on_event=relay(request.on_event, spent, before_done),
            deps=request.deps,
            run_id=request.run_id,
        )
        result.usage += spent
        return result

    def _new_run(self, request: _Request, sink: EventSink) -> PlanRun:
        context = StepRunContext(
            self.agents,
            sink,
            request.deps,
            request.run_id,
            self.settings.step_timeout,
            documents=tuple(m for m in request.history if m.kind == "attachment"),
            images=request.images,
        )
        return PlanRun(
            self.parts, context, sink, request.interrupts, request.history, request.images
        )

    def _facts(
        self, request: _Request, status: RunStatus, error: str | None, started: float
    ) -> RunFacts:
        return RunFacts(
            query=request.query,
            images=request.images,
            history=request.history,
            status=status,
            error=error,
            elapsed=time.perf_counter() - started,
            run_id=request.run_id,
            model=getattr(self.llm, "model", None),
            mode=self.react.mode,
            tools=tuple(self.tools.names()),
        )


def _done(result: AgentResult) -> DoneEvent:
    return DoneEvent(
        result.status,
        result.iterations,
        result.usage,
        result.elapsed,
        len(result.steps),
        result.model,
        result.error,
    )


def _as_history(message: Message) -> Message:
    if message.kind in ("history", "attachment") or message.role == "system":
        return message
    return replace(message, kind="history")
