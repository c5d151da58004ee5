"""An LLM whose abilities are what its endpoint showed, not what is assumed of it.

``OpenAICompatibleLLM(abilities=None)`` assumes native tool calls and JSON mode (the
stable default). :class:`ProbedLLM` wraps such a model and takes its ``tool_call``,
``tool_choice`` and ``json_mode`` abilities from the endpoint's probe
(``bot.engine.probe``), or from the setting that overrides it, so that a server that
ignores ``tools`` gets the loop's JSON mode instead of a loop that never calls a tool.

Timing. :meth:`ProbedLLM.start` starts the probe and waits for it a short while; past
that the model runs on the defaults and the probe's answer applies from the next run
on. A probe the endpoint did not answer at all (down, still loading its model) is
tried again on a later call, at most once a ``retry_after``; it never delays a call.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from .llm import LLM, LLMResponse, StreamDelta
from .probe import EndpointReport

logger = logging.getLogger(__name__)

# How the loop calls tools: as the probe found (auto), or as set whatever it found.
ToolCallSetting = Literal["auto", "native", "json"]
Probe = Callable[[], Awaitable[EndpointReport]]

RETRY_AFTER = 60.0  # seconds between probes of an endpoint that gave no answer
STARTUP_WAIT = 5.0  # seconds start-up waits for a probe before going on with the defaults


def chosen_abilities(report: EndpointReport | None, setting: ToolCallSetting) -> dict[str, bool]:
    """The abilities the engine is given: ``tool_call`` decides the loop's mode (native or
    JSON), ``json_mode`` whether JSON mode sends ``response_format``. What the probe could
    not tell keeps the default (available)."""
    found = report.tool_calls if report is not None else "unknown"
    # "forced" is not native: the loop's requests force no tool, so none would be called.
    native = found in ("native", "unknown") if setting == "auto" else setting == "native"
    refused_json = report is not None and report.json_mode == "refused"
    return {"tool_call": native, "tool_choice": native, "json_mode": not refused_json}


def choice_reason(report: EndpointReport | None, setting: ToolCallSetting) -> str:
    """What the loop uses and why, in words for logs and ``larkgate check``."""
    found = report.tool_calls if report is not None else "unknown"
    if setting != "auto":
        mode = "native tool calls" if setting == "native" else "JSON mode"
        return f"{mode}, as set"
    return {
        "native": "native tool calls",
        "unknown": "native tool calls (assumed: the probe got no answer)",
        "forced": "JSON mode: the endpoint calls a tool only when it is forced, "
        "and the loop does not force one",
        "ignored": "JSON mode: the endpoint ignores tools",
        "refused": "JSON mode: the endpoint refuses tools",
    }[found]


def fitted_budget(configured: int, context_length: int | None) -> int:
    """The context budget for a model whose server holds ``context_length`` tokens: the
    configured budget, lowered to leave the answer room (a quarter, 1k to 8k tokens)."""
    if not context_length:
        return configured
    room = min(8192, max(1024, context_length // 4))
    return max(256, min(configured, context_length - room))


class ProbedLLM:
    """``llm`` with the abilities its endpoint's probe found; everything else is ``llm``'s."""

    def __init__(
        self,
        llm: LLM,
        probe: Probe,
        *,
        tool_calls: ToolCallSetting = "auto",
        retry_after: float = RETRY_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wrapped = llm
        self.tool_calls = tool_calls
        self.report: EndpointReport | None = None
        self._probe = probe
        self._retry_after = retry_after
        self._clock = clock
        self._last_probe = -math.inf
        self._task: asyncio.Task[None] | None = None
        self._abilities: Mapping[str, bool] = self._merged()

    @property
    def model(self) -> str:
        return self.wrapped.model

    @property
    def abilities(self) -> Mapping[str, bool]:
        return self._abilities

    @property
    def reason(self) -> str:
        return choice_reason(self.report, self.tool_calls)

    def context_budget(self, configured: int) -> int:
        """``configured``, lowered to what the endpoint said its context holds."""
        return fitted_budget(configured, self.report.context_length if self.report else None)

    async def start(self, wait: float) -> EndpointReport | None:
        """Probe the endpoint, waiting at most ``wait`` seconds for its answer (the probe
        goes on past that); the report, or None while it is still probing."""
        task = self._launch()
        try:
            await asyncio.wait_for(asyncio.shield(task), wait)
        except TimeoutError:
            logger.warning(
                "LLM %s: no answer to the probe within %.0f s; starting with native tool "
                "calls and JSON mode, and the probe's answer applies when it comes",
                self.model,
                wait,
            )
        return self.report

    async def settled(self) -> EndpointReport | None:
        """The report, once the probe running now (if any) has ended."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)
        return self.report

    async def aclose(self) -> None:
        """Stop a probe still running (the wrapped model is closed by whoever made it)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # -- the LLM protocol ----------------------------------------------------------------

    async def chat(self, messages: Sequence[Any], **options: Any) -> LLMResponse:
        self._probe_again_if_unanswered()
        return await self.wrapped.chat(messages, **options)

    def stream_chat(self, messages: Sequence[Any], **options: Any) -> AsyncIterator[StreamDelta]:
        self._probe_again_if_unanswered()
        return self.wrapped.stream_chat(messages, **options)

    # -- probing ---------------------------------------------------------------------------

    def _launch(self) -> asyncio.Task[None]:
        self._last_probe = self._clock()
        task = asyncio.get_running_loop().create_task(self._run(), name=f"probe {self.model}")
        self._task = task
        return task

    async def _run(self) -> None:
        try:
            report = await self._probe()
        except Exception as exc:  # a probe must never take the model down with it
            logger.warning("LLM %s: the probe failed", self.model, exc_info=True)
            report = EndpointReport(notes=(f"the probe failed: {type(exc).__name__}",))
        self.report = report
        self._abilities = self._merged()
        level = logging.INFO if report.answered else logging.WARNING
        logger.log(
            level, "LLM %s: %s; the loop uses %s", self.model, report.describe(), self.reason
        )

    def _probe_again_if_unanswered(self) -> None:
        if self.report is not None and self.report.answered:
            return
        if self._task is not None and not self._task.done():
            return
        if self._clock() - self._last_probe < self._retry_after:
            return
        self._launch()

    def _merged(self) -> Mapping[str, bool]:
        chosen = chosen_abilities(self.report, self.tool_calls)
        return MappingProxyType({**self.wrapped.abilities, **chosen})
