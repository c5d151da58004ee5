"""The ReAct tool loop of one run, in native function-calling or JSON mode.

``RunLoop`` owns the state of a single run: the working context (which the context
guard may compact), the full transcript (which it never touches), the steps, usage
and the counters behind self-reflection, cycle detection and the completion
checklist. ``ReActAgent.run`` creates one per run.

Message order in native mode is strict: an assistant message with ``tool_calls`` is
followed by all of its tool messages, in call order, before anything else (cycle
warnings, self-reflection and interrupts come after them).

With ``streams`` (native mode, synthesis ``auto``) every call streams and a final
reply the loop accepts is the answer, already sent as ``answer`` events
(``answer_streamed``); text of a reply that is not taken as the answer is withdrawn
(``streamed_reply``). The loop rules are the same either way.

While the tool calls of a turn run, hooks get ``checkpoint()`` (``ToolUse.checkpoint``),
a snapshot of the run at the moment they call it (``checkpoint.py``); ``resume`` goes on
from one in a new loop: the waiting calls run (those already finished are not run
again), then the loop continues as ``run`` would have.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .checkpoint import RunCheckpoint
from .context_guard import Compaction, ContextGuard
from .events import CompactEvent, EventSink
from .executor import ToolExecutor
from .interrupts import InterruptQueue
from .json_extract import extract_json
from .llm import LLM, LLMContextOverflow, LLMError, LLMResponse, LLMStreamInterrupted
from .messages import Message, ToolCall, Usage
from .prompts import (
    COMPLETION_CHECKLIST,
    CYCLE_WARNING,
    EMPTY_REPLY_PROMPT,
    REFORMAT_PROMPT,
    SELF_REFLECTION_PROMPT,
    interrupt_message,
)
from .result import LoopMode, RunStatus, Step
from .streamed_reply import StreamedReply
from .tool_menu import ToolMenu
from .tools import ToolRegistry

if TYPE_CHECKING:
    from .agent import LoopSettings

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RunLoop:
    llm: LLM
    settings: LoopSettings
    tools: ToolRegistry
    executor: ToolExecutor
    guard: ContextGuard
    sink: EventSink
    interrupts: InterruptQueue | None
    mode: LoopMode
    query: str
    # Calls stream, and a final reply the loop accepts is the answer (see the docstring).
    streams: bool = False
    context: list[Message] = field(default_factory=list)
    transcript: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    answer: str = ""
    status: RunStatus = "completed"
    error: str | None = None
    compactions: int = 0
    # Counters behind the loop rules.
    real_tool_calls: int = 0
    reflections: int = 0
    checklist_done: bool = False
    reformat_streak: int = 0
    empty_streak: int = 0
    cycle_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    last_cycle_counts: dict[str, int] = field(default_factory=dict)
    # The tool calls of the last assistant message, until their results are appended,
    # and the model's stated reason for them.
    pending_calls: tuple[ToolCall, ...] = ()
    pending_reason: str | None = None
    # Hooks get ``checkpoint`` (False: plan mode's steps, see ``checkpoint.py``).
    checkpointable: bool = True
    # The last streamed call, and whether the answer is its text as it was sent.
    reply: StreamedReply | None = None
    answer_streamed: bool = False
    # With many tools in a streaming run: the first call offers the menu instead of a
    # separate selection call (``tool_menu``); None once the model chose or answered.
    menu: ToolMenu | None = None
    # Builds the executor of the tools the model chose from the menu (only they may run).
    executor_for: Callable[[ToolRegistry], ToolExecutor] | None = None

    def add(self, message: Message) -> None:
        self.context.append(message)
        self.transcript.append(message)

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        native = self.mode == "native"
        tools_schema = self.tools.openai_schema() if native and len(self.tools) else None
        while self.iterations < self.settings.max_iterations:
            self.iterations += 1
            menu = self.menu
            response = await self._call_model(
                tools_schema if menu is None else menu.schema(), menu=menu
            )
            if response is None:
                return
            if menu is not None and response.tool_calls:
                self._take_menu_choice(menu, response.tool_calls)
                tools_schema = self.tools.openai_schema() if len(self.tools) else None
                self.iterations -= 1  # a choice of tools, not a step of the run
                continue
            finished = (
                await self._native_turn(response) if native else await self._json_turn(response)
            )
            if finished:
                return
        self.finish_without_answer("max_iterations", None)

    async def _call_model(
        self, tools_schema: list[dict[str, Any]] | None, *, menu: ToolMenu | None = None
    ) -> LLMResponse | None:
        await self._fit_context()
        json_format = (
            {"type": "json_object"}
            if self.mode == "json" and self.llm.abilities.get("json_mode")
            else None
        )
        for attempt in range(2):
            # The last check before the request leaves, on everything it carries (this
            # iteration's tool results, merged interrupts): what compaction could not
            # bring under the budget (pinned text) is cut to it rather than sent.
            self._fit_budget()
            sent = len(self.context)
            try:
                response = await self._request(tools_schema, json_format, menu)
            except LLMContextOverflow as exc:
                if attempt == 0 and await self._fit_context(force=True):
                    continue
                self._model_failed(exc)
                return None
            except LLMStreamInterrupted as exc:
                if attempt == 0:  # its text was taken back: ask once more, from the start
                    logger.warning("the model's stream broke off (%s); asking again", exc)
                    continue
                self._model_failed(exc)
                return None
            except LLMError as exc:
                self._model_failed(exc)
                return None
            except Exception as exc:  # a broken provider ends the run cleanly
                logger.exception("LLM %s raised unexpectedly", getattr(self.llm, "model", "?"))
                self._model_failed(exc)
                return None
            self.usage += response.usage
            if menu is None:  # the menu's catalogue is not in the context the guard counts
                self.guard.calibrate(self.context, sent, response.usage.prompt_tokens)
            return response
        return None

    async def _request(
        self,
        tools_schema: list[dict[str, Any]] | None,
        json_format: dict[str, str] | None,
        menu: ToolMenu | None,
    ) -> LLMResponse:
        if not self.streams:
            return await self.llm.chat(
                self.context, tools=tools_schema, response_format=json_format
            )
        messages = self.context if menu is None else menu.messages(self.context)
        self.reply = StreamedReply(self.sink, show=self._may_answer())
        try:
            return await self.reply.read(self.llm, messages, tools_schema)
        except Exception:  # a stop (cancellation) leaves what was shown: the card says so
            self.reply.withdraw()
            raise

    def _take_menu_choice(self, menu: ToolMenu, calls: tuple[ToolCall, ...]) -> None:
        """The model asked for tools from the menu: the run goes on with them (and only
        they may run); the reply itself is not kept (``tool_menu``)."""
        self._withdraw()  # a note before the choice is not the answer
        self.menu = None
        chosen = menu.chosen(calls)
        if chosen is not self.tools:
            self.tools = chosen
            if self.executor_for is not None:
                self.executor = self.executor_for(chosen)

    def _may_answer(self) -> bool:
        """Whether a final reply to the next call would be taken as the answer: not when
        the checklist is due, nor when a user's message already waits to be read."""
        if self._checklist_due():
            return False
        return self.interrupts is None or not self.interrupts.pending()

    def _withdraw(self) -> None:
        if self.reply is not None:
            self.reply.withdraw()

    def _model_failed(self, exc: BaseException) -> None:
        self.finish_without_answer("error", f"the model failed: {type(exc).__name__}: {exc}")

    async def _fit_context(self, *, force: bool = False) -> bool:
        if not force and not self.guard.needs_compaction(self.context):
            return False
        compaction = await self.guard.compact(self.context, self.llm, aggressive=force)
        if compaction is None:
            return False
        self._use(compaction)
        return True

    def _fit_budget(self) -> None:
        fitted = self.guard.fit(self.context)
        if fitted is not None:
            self._use(fitted)

    def _use(self, compaction: Compaction) -> None:
        self.context = compaction.messages
        self.usage += compaction.usage
        self.compactions += 1
        self.sink.emit(
            CompactEvent(
                compaction.tokens_before,
                compaction.tokens_after,
                compaction.messages_summarized,
                compaction.summarized_by_model,
            )
        )

    # -- native mode -------------------------------------------------------------------

    async def _native_turn(self, response: LLMResponse) -> bool:
        if response.tool_calls:
            self._withdraw()  # a note before the calls is not the answer
            calls = _unique_ids(response.tool_calls)
            if self._cycle_stop(calls):
                return True
            self.add(
                Message.assistant(
                    response.content, calls, reasoning_content=response.reasoning_content
                )
            )
            reason = response.content or response.reasoning_content
            await self._execute(calls, reason)
            self._after_tools(calls)
            return False
        return self._final_answer(response.content, response.reasoning_content)

    # -- JSON mode ---------------------------------------------------------------------

    async def _json_turn(self, response: LLMResponse) -> bool:
        content = response.content or ""
        if not content.strip() and response.reasoning_content:
            # Reasoning models sometimes put the whole reply in reasoning_content.
            content = response.reasoning_content
        action = parse_json_action(content)
        if action is None:
            return self._reformat(content, response.reasoning_content)
        self.reformat_streak = 0
        if isinstance(action, JsonFinal):
            return self._final_answer(action.answer, response.reasoning_content, raw=content)
        call = ToolCall(f"call_{self.iterations}", action.tool, action.arguments, content)
        if self._cycle_stop((call,)):
            return True
        self.add(Message.assistant(content, reasoning_content=response.reasoning_content))
        await self._execute((call,), action.reasoning or response.reasoning_content)
        self._after_tools((call,))
        return False

    def _reformat(self, content: str, reasoning: str | None) -> bool:
        self.reformat_streak += 1
        if self.reformat_streak > self.settings.max_reformat_retries:
            # Twice unparseable: a model that cannot keep the format usually answered in
            # prose, so its text is the answer; with no text at all the run fails.
            text = content.strip() or (reasoning or "").strip()
            if text:
                self.add(Message.assistant(text))
                self.answer = text
                return True
            self.finish_without_answer("error", "the model kept replying without usable content")
            return True
        self.add(Message.assistant(content, reasoning_content=reasoning))
        self.add(Message.user(REFORMAT_PROMPT, kind="reformat"))
        self._drain_interrupts()
        return False

    # -- shared rules ------------------------------------------------------------------

    async def _execute(
        self,
        calls: tuple[ToolCall, ...],
        reason: str | None,
        settled: Mapping[str, Step] | None = None,
    ) -> None:
        self.pending_calls = calls
        self.pending_reason = reason
        steps = await self.executor.execute(
            calls,
            self.iterations,
            reason,
            settled=settled,
            checkpoint=self.checkpoint if self.checkpointable else None,
        )
        native = self.mode == "native"
        for call, step in zip(calls, steps, strict=True):
            if native:
                self.add(Message.tool(call, step.observation))
            else:
                text = f"Observation from {call.name}:\n{step.observation}"
                self.add(Message("user", text, name=call.name, kind="observation"))
            self.steps.append(step)
            if call.name in self.tools:
                self.real_tool_calls += 1
        self.pending_calls = ()
        self.pending_reason = None

    def _after_tools(self, calls: tuple[ToolCall, ...]) -> None:
        threshold = self.settings.cycle_threshold
        for call in calls:
            if self.last_cycle_counts.get(call.id) == threshold:
                warning = CYCLE_WARNING.format(tool=call.name, count=threshold)
                self.add(Message.user(warning, kind="cycle_warning"))
        interval = self.settings.reflection_interval
        if interval and self.real_tool_calls // interval > self.reflections:
            self.reflections = self.real_tool_calls // interval
            reflection = SELF_REFLECTION_PROMPT.format(calls=self.real_tool_calls, goal=self.query)
            self.add(Message.user(reflection, kind="reflection"))
        self._drain_interrupts()

    def _cycle_stop(self, calls: tuple[ToolCall, ...]) -> bool:
        """Count the calls; end the run when one repeats past the warning."""
        limit = self.settings.cycle_threshold + self.settings.cycle_stop_after
        self.last_cycle_counts = {}
        for call in calls:
            key = _cycle_key(call)
            self.cycle_counts[key] = count = self.cycle_counts.get(key, 0) + 1
            self.last_cycle_counts[call.id] = count
            if count >= limit:
                logger.warning("run stopped: %s repeated %d times", call.name, count)
                self.finish_without_answer(
                    "cycle_stopped",
                    f"{call.name} was called with identical arguments {count} times",
                )
                return True
        return False

    def _final_answer(self, content: str, reasoning: str | None, *, raw: str | None = None) -> bool:
        text = (content or "").strip() or (reasoning or "").strip()
        if not text:
            self._withdraw()
            self.empty_streak += 1
            if self.empty_streak > self.settings.max_reformat_retries:
                self.finish_without_answer("error", "the model kept replying with empty content")
                return True
            self.add(Message.user(EMPTY_REPLY_PROMPT, kind="reformat"))
            return False
        self.empty_streak = 0
        if self._drain_interrupts():
            self._withdraw()  # a new answer, written with the message, replaces it
            return False  # the user added something: this answer is stale
        assistant = Message.assistant(raw if raw is not None else text, reasoning_content=reasoning)
        if self._checklist_due():
            self._withdraw()
            self.checklist_done = True
            self.add(assistant)
            self.add(Message.user(COMPLETION_CHECKLIST, kind="checklist"))
            return False
        self.add(assistant)
        self.answer = text
        shown = self.reply.shown.strip() if self.reply is not None else ""
        self.answer_streamed = bool(shown) and shown == text
        if not self.answer_streamed:
            self._withdraw()  # e.g. the answer is the reasoning: synthesis writes it
        return True

    def _checklist_due(self) -> bool:
        return (
            self.settings.completion_check
            and not self.checklist_done
            and self.real_tool_calls >= self.settings.completion_check_min_tools
        )

    def _drain_interrupts(self) -> bool:
        if self.interrupts is None or not self.interrupts.pending():
            return False
        texts = self.interrupts.drain()
        self.add(Message.user(interrupt_message(texts), pinned=True, kind="interrupt"))
        return True

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint(self) -> RunCheckpoint:
        """The run as it is now, waiting on ``pending_calls`` (those finished are
        ``settled``); taken by a hook while the calls run."""
        finished = self.executor.finished
        return RunCheckpoint(
            run_id=self.executor.run.run_id,
            query=self.query,
            mode=self.mode,
            streams=self.streams,
            context=tuple(self.context),
            transcript=tuple(self.transcript),
            steps=tuple(self.steps),
            usage=self.usage,
            iterations=self.iterations,
            compactions=self.compactions,
            real_tool_calls=self.real_tool_calls,
            reflections=self.reflections,
            checklist_done=self.checklist_done,
            reformat_streak=self.reformat_streak,
            empty_streak=self.empty_streak,
            cycle_counts=dict(self.cycle_counts),
            last_cycle_counts=dict(self.last_cycle_counts),
            pending_calls=self.pending_calls,
            settled=tuple(finished[c.id] for c in self.pending_calls if c.id in finished),
            reason=self.pending_reason,
            tools=tuple(self.tools.names()),
        )

    def restore(self, checkpoint: RunCheckpoint) -> None:
        """Take the state of ``checkpoint`` (a new loop, before ``resume``)."""
        self.context = list(checkpoint.context)
        self.transcript = list(checkpoint.transcript)
        self.steps = list(checkpoint.steps)
        self.usage = checkpoint.usage
        self.iterations = checkpoint.iterations
        self.compactions = checkpoint.compactions
        self.real_tool_calls = checkpoint.real_tool_calls
        self.reflections = checkpoint.reflections
        self.checklist_done = checkpoint.checklist_done
        self.reformat_streak = checkpoint.reformat_streak
        self.empty_streak = checkpoint.empty_streak
        self.cycle_counts = dict(checkpoint.cycle_counts)
        self.last_cycle_counts = dict(checkpoint.last_cycle_counts)

    async def resume(self, checkpoint: RunCheckpoint) -> None:
        """Finish the turn ``checkpoint`` waited in, as ``run`` would have, then go on."""
        calls = checkpoint.pending_calls
        settled = {step.call_id: step for step in checkpoint.settled}
        await self._execute(calls, checkpoint.reason, settled)
        self._after_tools(calls)
        await self.run()

    # -- endings -----------------------------------------------------------------------

    def finish_without_answer(self, status: RunStatus, error: str | None) -> None:
        self.status = status
        self.error = error
        self.answer = fallback_summary(self.steps, status, error)

    def settle_cancelled(self, reason: str) -> None:
        """Make the transcript consistent after a stop: every requested call gets a result."""
        for call in self.pending_calls:
            step = self.executor.finished.get(call.id)
            if step is None:
                step = Step(
                    index=len(self.steps),
                    iteration=self.iterations,
                    call_id=call.id,
                    tool=call.name,
                    arguments=call.arguments,
                    observation=f"[cancelled: {reason}]",
                    status="cancelled",
                    duration=0.0,
                    error=reason,
                )
            if self.mode == "native":
                self.add(Message.tool(call, step.observation))
            else:
                text = f"Observation from {call.name}:\n{step.observation}"
                self.add(Message("user", text, name=call.name, kind="observation"))
            self.steps.append(step)
        self.pending_calls = ()
        self.finish_without_answer("cancelled", reason)


@dataclass(frozen=True, slots=True)
class JsonToolCall:
    tool: str
    arguments: Mapping[str, Any]
    reasoning: str | None


@dataclass(frozen=True, slots=True)
class JsonFinal:
    answer: str


def parse_json_action(content: str) -> JsonToolCall | JsonFinal | None:
    """Read a JSON-mode reply; None when it is not one of the two accepted forms."""
    data = extract_json(content)
    if data is None:
        return None
    kind = data.get("type")
    reasoning = data.get("reasoning") if isinstance(data.get("reasoning"), str) else None
    if kind == "final_answer" or (kind is None and "answer" in data and "tool" not in data):
        answer = data.get("answer")
        if answer is None:
            return None
        return JsonFinal(
            answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        )
    if kind == "tool_call" or (kind is None and "tool" in data):
        tool = data.get("tool", data.get("tool_name"))
        arguments = data.get("arguments", data.get("tool_args", {}))
        if not isinstance(tool, str) or not tool or not isinstance(arguments, dict):
            return None
        return JsonToolCall(tool, arguments, reasoning)
    return None


def _unique_ids(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """Give every call of one turn its own id; each tool result must name exactly one."""
    if len({call.id for call in calls}) == len(calls):
        return calls
    seen: set[str] = set()
    unique = []
    for index, call in enumerate(calls):
        call_id = call.id if call.id and call.id not in seen else f"{call.id or 'call'}_{index}"
        seen.add(call_id)
        unique.append(replace(call, id=call_id))
    return tuple(unique)


def _cycle_key(call: ToolCall) -> tuple[str, str]:
    if call.parse_error is not None:
        return call.name, call.raw_arguments
    try:
        canonical = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        canonical = repr(sorted(call.arguments.items(), key=lambda kv: kv[0]))
    return call.name, canonical


def fallback_summary(steps: list[Step], status: RunStatus, error: str | None) -> str:
    """A plain account of what was done, for runs that ended without a final answer."""
    reasons = {
        "max_iterations": "I reached the step limit before finishing.",
        "cycle_stopped": "I stopped because I kept repeating the same tool call.",
        "cancelled": "The run was stopped before it finished.",
        "error": "I could not finish because of an error.",
        "completed": "",
    }
    lines = [reasons[status]]
    if error and status == "error":
        lines[0] += f" ({error})"
    if steps:
        lines.append("What I found so far:")
        for step in steps[-10:]:
            observation = " ".join(step.observation.split())
            if len(observation) > 200:
                observation = observation[:199] + "…"
            lines.append(f"- {step.tool}: {observation}")
    else:
        lines.append("No tool results were gathered.")
    return "\n".join(lines)
