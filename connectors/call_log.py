"""A PostToolUse hook that records every connector call (tool, arguments digest, outcome,
duration, run) through a sink the composition root provides (the store).

Only a digest of the arguments is kept: they may hold personal data. A failing sink is
logged and never withholds the observation from the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

from bot.engine import HookResult, ToolUse

logger = logging.getLogger(__name__)


# Called with keyword fields: run_id, tool, connector, arguments_digest, ok, error,
# duration_ms, created_at (the store's ``CallLogStore.record`` takes exactly these).
Sink = Callable[..., Awaitable[None]]


class CallLogHook:
    """``run_of`` names the run a call is recorded under (by default the engine's run id;
    the bot gives its turn's, which a plan's steps share though each has its own id)."""

    def __init__(
        self,
        sink: Sink,
        connector_of: Callable[[str], str | None],
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        run_of: Callable[[ToolUse], str] | None = None,
    ) -> None:
        self._sink = sink
        self._run_of = run_of or _engine_run
        self._connector_of = connector_of
        self._clock = clock
        self._monotonic = monotonic
        self._started: dict[tuple[str, str], float] = {}

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        self._started[(call.run.run_id, call.call_id)] = self._monotonic()
        return HookResult()

    async def post_tool_use(self, call: ToolUse, observation: str) -> HookResult:
        started = self._started.pop((call.run.run_id, call.call_id), None)
        duration = (self._monotonic() - started) * 1000 if started is not None else 0.0
        try:
            await self._sink(
                run_id=self._run_of(call),
                tool=call.name,
                connector=self._connector_of(call.name) or "",
                arguments_digest=arguments_digest(call.arguments),
                ok=call.error is None,
                error=call.error,
                duration_ms=round(duration, 3),
                created_at=self._clock(),
            )
        except Exception:  # the audit trail failing must not hide a result from the model
            logger.exception("could not record the call of %s", call.name)
        return HookResult()


def _engine_run(call: ToolUse) -> str:
    return call.run.run_id


def arguments_digest(arguments: object) -> str:
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
