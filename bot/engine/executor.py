"""Runs the tool calls of one assistant turn: validation, hooks, timeout, observation.

Every failure becomes an observation the model can read (unknown tool, bad arguments,
a blocking hook, an exception, a timeout); nothing here raises except cancellation.
Parallel calls run concurrently under a cap, and results come back in call order.

Hooks get ``ToolUse.checkpoint``, the loop's snapshot function, when the loop gives one;
a resumed turn passes the steps of the calls that had already finished (``settled``),
which are not run again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .deadlines import ToolDeadlines
from .events import EventSink, StepEvent, StepStatus
from .hooks import _CURRENT_RUN, _CURRENT_USE, HookChain, RunContext, ToolUse
from .messages import ToolCall
from .result import Step
from .tools import Artifact, ToolArgumentsError, ToolError, ToolRegistry

if TYPE_CHECKING:
    from .checkpoint import RunCheckpoint

logger = logging.getLogger(__name__)

TRUNCATED_NOTE = "\n[... output cut at {limit} characters]"


@dataclass(frozen=True, slots=True)
class ExecutorLimits:
    default_timeout: float = 60.0
    max_parallel: int = 8
    max_observation_chars: int = 32_000


class ToolExecutor:
    """Executes tool calls for one run against the tools chosen for that run."""

    def __init__(
        self,
        tools: ToolRegistry,
        hooks: HookChain,
        run: RunContext,
        sink: EventSink,
        limits: ExecutorLimits,
        *,
        first_index: int = 0,
    ) -> None:
        """``first_index``: the index of the first step this executor runs (a resumed run
        goes on numbering where its steps end)."""
        self.tools = tools
        self.hooks = hooks
        self.run = run
        self.sink = sink
        self.limits = limits
        self.finished: dict[str, Step] = {}
        self._next_index = first_index
        self._checkpoint: Callable[[], RunCheckpoint] | None = None
        self._semaphore = asyncio.Semaphore(limits.max_parallel)
        self.deadlines = ToolDeadlines()

    async def execute(
        self,
        calls: Sequence[ToolCall],
        iteration: int,
        reason: str | None = None,
        *,
        settled: Mapping[str, Step] | None = None,
        checkpoint: Callable[[], RunCheckpoint] | None = None,
    ) -> list[Step]:
        """Run ``calls`` and return their steps in call order.

        A call with a step in ``settled`` (by call id: it finished before the run was
        checkpointed) is not run again; its step is given back as it is. Hooks get
        ``checkpoint`` as ``ToolUse.checkpoint``.
        """
        # Some servers reuse call ids across turns ("call_0" every time): only this
        # turn's results may settle this turn's calls.
        self.finished.clear()
        self._checkpoint = checkpoint
        first = self._next_index
        self._next_index += len(calls)
        steps: dict[int, Step] = {}
        for offset, call in enumerate(calls):
            step = settled.get(call.id) if settled else None
            if step is not None:
                steps[offset] = self.finished[call.id] = step
        todo = [offset for offset in range(len(calls)) if offset not in steps]
        if len(todo) == 1:
            offset = todo[0]
            steps[offset] = await self._run_one(calls[offset], first + offset, iteration, reason)
        elif todo:
            done = await asyncio.gather(
                *(
                    self._run_capped(calls[offset], first + offset, iteration, reason)
                    for offset in todo
                )
            )
            steps.update(zip(todo, done, strict=True))
        return [steps[offset] for offset in range(len(calls))]

    async def _run_capped(
        self, call: ToolCall, index: int, iteration: int, reason: str | None
    ) -> Step:
        async with self._semaphore:
            return await self._run_one(call, index, iteration, reason)

    async def _run_one(
        self, call: ToolCall, index: int, iteration: int, reason: str | None
    ) -> Step:
        started = time.perf_counter()
        arguments: Mapping[str, Any] = call.arguments
        sink = self.sink
        if sink.active:
            sink.emit(StepEvent("started", index, iteration, call.id, call.name, arguments))
        observation, status, error, artifacts, arguments = await self._outcome(
            call, iteration, reason
        )
        step = Step(
            index=index,
            iteration=iteration,
            call_id=call.id,
            tool=call.name,
            arguments=arguments,
            observation=observation,
            status=status,
            duration=time.perf_counter() - started,
            error=error,
            artifacts=artifacts,
        )
        self.finished[call.id] = step
        if sink.active:
            sink.emit(
                StepEvent(
                    "finished",
                    index,
                    iteration,
                    call.id,
                    call.name,
                    arguments,
                    observation,
                    status,
                    step.duration,
                )
            )
        return step

    async def _outcome(
        self, call: ToolCall, iteration: int, reason: str | None
    ) -> tuple[str, StepStatus, str | None, tuple[Artifact, ...], Mapping[str, Any]]:
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools.names()) or "none"
            unknown = f"unknown tool {call.name!r}"
            return (
                f"Error: {unknown}. Available tools: {available}.",
                "error",
                unknown,
                (),
                call.arguments,
            )
        if call.parse_error is not None:
            unparsed = f"arguments are not a JSON object ({call.parse_error})"
            return (
                f"Error: {unparsed}. Call {call.name} again with valid JSON arguments.",
                "error",
                unparsed,
                (),
                call.arguments,
            )
        try:
            arguments = tool.validate_arguments(call.arguments)
        except ToolArgumentsError as exc:
            return f"Error: {exc}", "error", str(exc), (), call.arguments

        use = ToolUse(
            call.name,
            arguments,
            call.id,
            tool.side_effect,
            tool,
            iteration,
            self.run,
            reason,
            checkpoint=self._checkpoint,
        )
        if self.hooks:
            decision = await self.hooks.pre(use)
            if decision.blocked_reason is not None:
                reason_text = decision.blocked_reason
                observation = f"Tool call blocked: {reason_text}. The tool did not run."
                return observation, "blocked", reason_text, (), arguments
            if decision.call is not use:
                try:
                    use = replace(use, arguments=tool.validate_arguments(decision.call.arguments))
                except ToolArgumentsError as exc:
                    why = f"a policy hook rewrote the arguments into invalid ones: {exc}"
                    return f"Tool call blocked: {why}.", "blocked", why, (), arguments

        observation, error, artifacts = await self._invoke(use)
        if self.hooks:
            # No checkpoint after the tool ran: it would not count this call as finished.
            use = replace(use, error=error, checkpoint=None)
            observation = await self.hooks.post(use, observation)
        return observation, ("error" if error else "ok"), error, artifacts, use.arguments

    async def _invoke(self, use: ToolUse) -> tuple[str, str | None, tuple[Artifact, ...]]:
        tool = use.tool
        limit = tool.timeout or self.limits.default_timeout
        deadline = self.deadlines.start(limit)
        token = _CURRENT_RUN.set(use.run)
        use_token = _CURRENT_USE.set(use)
        try:
            output = await tool.handler(**use.arguments)
        except asyncio.CancelledError:
            if deadline.absorb_expiry():
                error = f"{tool.name} timed out after {limit:g} s"
                return f"Error: {error}.", error, ()
            raise
        except ToolError as exc:
            return f"Error: {exc}", str(exc) or type(exc).__name__, ()
        except ToolArgumentsError as exc:
            return f"Error: {exc}", str(exc), ()
        except Exception as exc:  # a broken tool is an observation, not a crash
            return self._failure(tool.name, exc)
        finally:
            _CURRENT_USE.reset(use_token)
            _CURRENT_RUN.reset(token)
            deadline.close()
        observation, artifacts = render_output(tool.name, output)
        return self._cap(observation), None, artifacts

    @staticmethod
    def _failure(name: str, exc: BaseException) -> tuple[str, str, tuple[Artifact, ...]]:
        logger.warning("tool %s raised %s", name, type(exc).__name__, exc_info=exc)
        detail = str(exc)[:500]
        error = f"{name} failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
        return f"Error: {error}", error, ()

    def _cap(self, observation: str) -> str:
        limit = self.limits.max_observation_chars
        if len(observation) <= limit:
            return observation
        return observation[:limit] + TRUNCATED_NOTE.format(limit=limit)


def render_output(tool_name: str, output: Any) -> tuple[str, tuple[Artifact, ...]]:
    """Turn a handler's return value into the observation text and any artifacts."""
    if isinstance(output, str):
        if _looks_like_html_document(output):
            artifact = Artifact(f"{tool_name}.html", output, "text/html")
            return artifact_summary(artifact), (artifact,)
        return output, ()
    if isinstance(output, Artifact):
        return artifact_summary(output), (output,)
    if isinstance(output, list | tuple) and any(isinstance(o, Artifact) for o in output):
        parts: list[str] = []
        artifacts: list[Artifact] = []
        for item in output:
            text, found = render_output(tool_name, item)
            parts.append(text)
            artifacts.extend(found)
        return "\n".join(parts), tuple(artifacts)
    if output is None:
        return "(no output)", ()
    try:
        return json.dumps(output, ensure_ascii=False, default=str), ()
    except (TypeError, ValueError):
        return str(output), ()


def artifact_summary(artifact: Artifact) -> str:
    size = len(artifact.content)
    return f"[Artifact generated: {artifact.name}] ({artifact.media_type}, {size} characters)"


def _looks_like_html_document(text: str) -> bool:
    head = text[:64].lstrip().lower()
    return head.startswith(("<!doctype html", "<html"))
