"""ReActAgent: the public face of the engine.

``run()`` selects tools (when there are many), runs the tool loop (``loop.RunLoop``)
and always returns a consistent ``AgentResult``: a failing model, a stop request or a
bug in a tool never escapes as an exception. ``stream_answer()`` then gives the
user-facing answer, streaming its text. ``resume()`` goes on with a run from a
``RunCheckpoint`` that a hook took while the run waited in it (``checkpoint.py``),
in this process or another, and ends as ``run()`` does.

Where the answer comes from (``synthesis``):
- ``"auto"`` (the default): in native mode the loop's calls stream, and a final reply
  is the answer: its text went out as ``answer`` events while it was written
  (``AgentResult.answer_streamed``), and ``stream_answer()`` gives it back without a
  model call. A run without such a reply (JSON mode, the iteration cap, a cycle stop,
  an error, an answer found only in ``reasoning_content``) gets the reference design's
  synthesis: a separate streaming call that writes the answer from the full trace.
- ``"always"``: the reference design everywhere: the loop does not stream, and
  ``stream_answer()`` always writes the answer with the synthesis call.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from .checkpoint import RunCheckpoint
from .context_guard import ContextGuard
from .events import AnswerEvent, DoneEvent, EventCallback, EventSink
from .executor import ExecutorLimits, ToolExecutor
from .hooks import Hook, HookChain, RunContext
from .interrupts import InterruptLimits, InterruptQueue, cap_text
from .llm import LLM
from .loop import RunLoop
from .messages import ImagePart, Message, MessageLike, as_messages
from .prompts import JSON_SYSTEM_PROMPT, NATIVE_ANSWER_SYSTEM_PROMPT, NATIVE_SYSTEM_PROMPT
from .result import AgentResult, LoopMode
from .selection import select_tools
from .synthesis import synthesize
from .tool_menu import ToolMenu
from .tools import Tool, ToolRegistry

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_BUDGET = 96_000

# Where the answer comes from: see the module docstring.
SynthesisMode = Literal["auto", "always"]


@dataclass(frozen=True, slots=True)
class LoopSettings:
    max_iterations: int
    completion_check: bool
    completion_check_min_tools: int
    cycle_threshold: int
    cycle_stop_after: int
    reflection_interval: int
    max_reformat_retries: int


class ReActAgent:
    """A ReAct agent over one LLM and a registry of tools.

    Hooks (``pre_tool_use`` / ``post_tool_use``) run around every tool call of every
    run of this agent. ``context_budget`` is the ContextGuard's token budget.
    ``interrupt_limits`` bound the pinned user text of a run: what it reads from its
    interrupt queue, and the question itself (cut, with a note, past the message cap).
    ``synthesis`` says where the answer comes from (see the module docstring).
    ``tool_menu``: with more tools than ``selection_threshold`` in a streaming run, the
    first call lists them and offers ``select_tools`` (``tool_menu.py``: a question that
    needs no tool is answered in that one call) instead of the reference design's
    separate selection call (the default).
    ``checkpoints``: hooks get ``ToolUse.checkpoint`` to snapshot a run they hold, for
    ``resume()``; plan mode's step agents are built without (``checkpoint.py``).
    """

    def __init__(
        self,
        llm: LLM,
        tools: ToolRegistry | Iterable[Tool] = (),
        *,
        hooks: Sequence[Hook] | HookChain = (),
        max_iterations: int = 50,
        use_native_tools: bool = True,
        completion_check: bool = True,
        completion_check_min_tools: int = 3,
        cycle_threshold: int = 3,
        cycle_stop_after: int = 2,
        reflection_interval: int = 6,
        max_reformat_retries: int = 2,
        system_prompt: str | None = None,
        instructions: str | None = None,
        context_budget: int | None = None,
        tool_timeout: float = 60.0,
        max_parallel_tools: int = 8,
        max_observation_chars: int = 32_000,
        selection_threshold: int = 12,
        max_selected_tools: int = 6,
        interrupt_limits: InterruptLimits | None = None,
        synthesis: SynthesisMode = "auto",
        tool_menu: bool = False,
        checkpoints: bool = True,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if cycle_threshold < 1 or completion_check_min_tools < 1:
            raise ValueError("cycle_threshold and completion_check_min_tools must be at least 1")
        self.llm = llm
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        # A chain built once can serve every run (a bot builds an agent per message).
        self.hooks = hooks if isinstance(hooks, HookChain) else HookChain(hooks)
        self.use_native_tools = use_native_tools
        self.system_prompt = system_prompt
        self.instructions = instructions
        self.context_budget = context_budget or DEFAULT_CONTEXT_BUDGET
        self.selection_threshold = selection_threshold
        self.max_selected_tools = max_selected_tools
        self.interrupt_limits = interrupt_limits or InterruptLimits()
        self.limits = ExecutorLimits(tool_timeout, max_parallel_tools, max_observation_chars)
        self.settings = LoopSettings(
            max_iterations=max_iterations,
            completion_check=completion_check,
            completion_check_min_tools=completion_check_min_tools,
            cycle_threshold=cycle_threshold,
            cycle_stop_after=max(1, cycle_stop_after),
            reflection_interval=reflection_interval,
            max_reformat_retries=max(1, max_reformat_retries),
        )
        # Native function calling when asked for and the model can do it; JSON otherwise.
        self.mode: LoopMode = (
            "native" if use_native_tools and llm.abilities.get("tool_call", False) else "json"
        )
        if synthesis not in ("auto", "always"):
            raise ValueError("synthesis must be 'auto' or 'always'")
        self.synthesis: SynthesisMode = synthesis
        # Selection inside the first call (``tool_menu``), where that call streams.
        self.tool_menu = tool_menu
        self.checkpoints = checkpoints
        # The loop streams, and a final reply is the answer (native mode, "auto").
        self.streams = (
            self.mode == "native"
            and synthesis == "auto"
            and bool(llm.abilities.get("streaming", True))
        )

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
        """Answer ``query`` with tools; never raises for model, tool or hook failures.

        ``history`` takes Messages or OpenAI-style ``{"role", "content"}`` dicts (anything
        else is a TypeError before the run starts); a history message of kind
        ``"attachment"`` (a document's text) keeps its kind. ``images`` go with the
        question as ``image_url`` parts, to the loop and to synthesis.
        ``interrupt_queue.stop()`` ends the run with status ``cancelled``. Cancelling the
        task that awaits ``run`` from outside propagates as usual.
        """
        history = as_messages(history) if history is not None else None
        if not all(isinstance(image, ImagePart) for image in images):
            raise TypeError("images must be ImagePart values")
        started = time.perf_counter()
        # The question is pinned (it survives compaction): bounded here, where it is made.
        query = self._pinned(query)
        run = RunContext(run_id or uuid.uuid4().hex, query, deps)
        sink = EventSink(on_event)
        loop = self._new_loop(run, sink, interrupt_queue, self.tools, self.mode, self.streams)

        async def work() -> None:
            await self._prepare(loop, query, tuple(images), history, run, sink)
            await loop.run()

        await self._drive(loop, work, run, sink, interrupt_queue)
        if not loop.transcript:  # ended during tool selection: still record the question
            loop.transcript.append(
                Message.user(query, pinned=True, kind="query", images=tuple(images))
            )
        return await self._finish(loop, run, sink, started)

    async def resume(
        self,
        checkpoint: RunCheckpoint,
        *,
        interrupt_queue: InterruptQueue | None = None,
        on_event: EventCallback | None = None,
        deps: Any = None,
    ) -> AgentResult:
        """Go on with the run ``checkpoint`` holds, to its end; never raises for model,
        tool or hook failures.

        The calls it waited on run now, through every hook again, except those that had
        finished (their steps are kept); their results are added as the run would have
        added them, and the loop goes on (its iterations counted from the checkpoint's,
        within ``max_iterations``) in the checkpoint's mode. The run may use the
        checkpoint's tools that this agent has: a call to one it lacks gets the unknown
        tool observation. Stops, cancellation, events and the result are as ``run()``'s
        (``run_id`` is the checkpoint's).
        """
        if not isinstance(checkpoint, RunCheckpoint):
            raise TypeError(
                "resume() takes a RunCheckpoint (RunCheckpoint.from_json reads a stored one), "
                f"not {type(checkpoint).__name__}"
            )
        started = time.perf_counter()
        run = RunContext(checkpoint.run_id, checkpoint.query, deps)
        sink = EventSink(on_event)
        tools = self.tools.filter(checkpoint.tools)
        loop = self._new_loop(
            run,
            sink,
            interrupt_queue,
            tools,
            checkpoint.mode,
            checkpoint.streams,
            first_index=len(checkpoint.steps),
        )
        loop.restore(checkpoint)
        await self._drive(loop, lambda: loop.resume(checkpoint), run, sink, interrupt_queue)
        return await self._finish(loop, run, sink, started)

    async def stream_answer(
        self,
        query: str,
        result: AgentResult,
        *,
        on_event: EventCallback | None = None,
        fallback: bool = True,
    ) -> AsyncIterator[str]:
        """Stream the user-facing answer of ``result``.

        When the run's final reply is the answer (``result.answer_streamed``), that is
        it, given at once without a model call (its deltas already went out as the
        run's ``answer`` events). Otherwise synthesis writes it from the full trace.
        With ``fallback`` (the default), a synthesis that fails before producing any
        text yields ``result.answer`` instead, so the caller always gets an answer.
        """
        sink = EventSink(on_event)
        if result.answer_streamed:
            try:
                sink.emit(AnswerEvent(result.answer))
                yield result.answer
            finally:
                await sink.aclose()
            return
        try:
            # The question as the run saw it, so both phases read the same text.
            pinned = self._pinned(query)
            async for delta in synthesize(self.llm, pinned, result, fallback=fallback):
                sink.emit(AnswerEvent(delta))
                yield delta
        finally:
            await sink.aclose()

    # -- internals ---------------------------------------------------------------------

    async def _drive(
        self,
        loop: RunLoop,
        work: Callable[[], Awaitable[None]],
        run: RunContext,
        sink: EventSink,
        interrupts: InterruptQueue | None,
    ) -> None:
        """Do ``work`` on ``loop``, bound to ``interrupts``: a stop ends it ``cancelled``, a
        bug ends it with an error; cancellation from outside propagates."""
        task = asyncio.current_task()
        if interrupts is not None and task is not None:
            interrupts.bind(task, self.interrupt_limits)
        try:
            await work()
        except asyncio.CancelledError:
            stop_reason = interrupts.stop_reason if interrupts is not None else None
            if stop_reason is None or task is None or task.uncancel() > 0:
                sink.abort()
                raise
            loop.settle_cancelled(stop_reason)
        except Exception as exc:  # an engine bug must still yield a result
            logger.exception("run %s failed", run.run_id)
            loop.finish_without_answer("error", f"internal error: {type(exc).__name__}")
        finally:
            if interrupts is not None and task is not None:
                interrupts.unbind(task)
            loop.executor.deadlines.close()

    async def _finish(
        self, loop: RunLoop, run: RunContext, sink: EventSink, started: float
    ) -> AgentResult:
        result = self._result(loop, run, time.perf_counter() - started)
        sink.emit(_done(result))
        await sink.aclose()
        return result

    def _pinned(self, query: str) -> str:
        return cap_text(query, self.interrupt_limits.message_cap)

    async def _prepare(
        self,
        loop: RunLoop,
        query: str,
        images: tuple[ImagePart, ...],
        history: Sequence[Message] | None,
        run: RunContext,
        sink: EventSink,
    ) -> None:
        if len(self.tools) > self.selection_threshold and self.streams and self.tool_menu:
            # The first call offers the menu: answered at once, or the tools asked for.
            loop.menu = ToolMenu(self.tools, self.max_selected_tools)
            loop.executor_for = lambda chosen: ToolExecutor(
                chosen, self.hooks, run, sink, self.limits
            )
        elif len(self.tools) > self.selection_threshold:
            selection = await select_tools(
                self.llm, self.tools, query, max_tools=self.max_selected_tools
            )
            loop.usage += selection.usage
            if selection.selected:
                # The selected set is also the set that may execute: anything else is
                # an unknown tool to the executor.
                loop.tools = selection.tools
                loop.executor = ToolExecutor(selection.tools, self.hooks, run, sink, self.limits)
        loop.add(Message.system(self._system_prompt(loop.tools)))
        for message in history or ():
            loop.add(_as_history(message))
        loop.add(Message.user(query, pinned=True, kind="query", images=images))

    def _new_loop(
        self,
        run: RunContext,
        sink: EventSink,
        interrupts: InterruptQueue | None,
        tools: ToolRegistry,
        mode: LoopMode,
        streams: bool,
        *,
        first_index: int = 0,
    ) -> RunLoop:
        return RunLoop(
            llm=self.llm,
            settings=self.settings,
            tools=tools,
            executor=ToolExecutor(
                tools, self.hooks, run, sink, self.limits, first_index=first_index
            ),
            guard=ContextGuard(self.context_budget),
            sink=sink,
            interrupts=interrupts,
            mode=mode,
            query=run.query,
            streams=streams,
            checkpointable=self.checkpoints,
        )

    def _system_prompt(self, tools: ToolRegistry) -> str:
        if self.system_prompt is not None:
            prompt = self.system_prompt
            if self.mode == "json":
                prompt += "\n\n" + JSON_SYSTEM_PROMPT.format(tools=tools.json_mode_prompt())
        elif self.mode == "native":
            # The final reply is the answer the user reads, or a draft synthesis rewrites.
            prompt = NATIVE_ANSWER_SYSTEM_PROMPT if self.streams else NATIVE_SYSTEM_PROMPT
        else:
            prompt = JSON_SYSTEM_PROMPT.format(tools=tools.json_mode_prompt())
        if self.instructions:
            prompt += "\n\n" + self.instructions
        return prompt

    def _result(self, loop: RunLoop, run: RunContext, elapsed: float) -> AgentResult:
        return AgentResult(
            answer=loop.answer,
            messages=loop.transcript,
            iterations=loop.iterations,
            steps=loop.steps,
            usage=loop.usage,
            elapsed=elapsed,
            status=loop.status,
            error=loop.error,
            mode=loop.mode,
            tools=tuple(loop.tools.names()),
            run_id=run.run_id,
            model=getattr(self.llm, "model", None),
            compactions=loop.compactions,
            answer_streamed=loop.answer_streamed,
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
