"""A step's time limit that does not run while a hook holds one of its calls.

An approval waits for a person for minutes; a step limit of two minutes must not turn
every approval in plan mode into a timeout. ``StepClock`` counts only the time the step
works: ``HeldHooks`` wraps the run's hooks so that the clock stops while any call of the
step is inside them, and starts again when none is.

``HeldHooks`` keeps the hooks' meaning exactly: it runs them through the same
``HookChain`` (order, fail-closed, argument rewrites) and hands the outcome back as one
``HookResult``, which the step's own chain applies unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ..hooks import Hook, HookChain, HookResult, ToolUse


class StepClock:
    """Calls ``on_expiry`` once the step has worked ``limit`` seconds, hooks' time aside."""

    def __init__(self, limit: float, on_expiry: Callable[[], object]) -> None:
        self.limit = limit
        self.expired = False
        self._on_expiry = on_expiry
        self._loop = asyncio.get_running_loop()
        self._worked = 0.0
        self._since: float | None = time.monotonic()
        self._holds = 0
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The step waits on something that is not its own work (a hook)."""
        self._hold()
        try:
            yield
        finally:
            self._release()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _hold(self) -> None:
        self._holds += 1
        if self._holds == 1 and self._since is not None:
            self._worked += time.monotonic() - self._since
            self._since = None
            self.close()

    def _release(self) -> None:
        self._holds -= 1
        if self._holds == 0 and not self.expired:
            self._since = time.monotonic()
            self._arm()

    def _arm(self) -> None:
        self.close()
        self._timer = self._loop.call_later(max(0.0, self.limit - self._worked), self._check)

    def _check(self) -> None:
        self._timer = None
        if self._since is None or self.expired:
            return  # held: re-armed on release
        if self._worked + time.monotonic() - self._since >= self.limit:
            self.expired = True
            self._on_expiry()
        else:
            self._arm()


class HeldHooks:
    """The run's hooks as one hook, stopping ``clock`` while they hold a call."""

    def __init__(self, hooks: Sequence[Hook], clock: StepClock) -> None:
        self._chain = HookChain(hooks)
        self._clock = clock

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        with self._clock.held():
            decision = await self._chain.pre(call)
        if decision.blocked_reason is not None:
            return HookResult(allow=False, reason=decision.blocked_reason)
        if decision.call is not call:
            return HookResult(arguments=decision.call.arguments)
        return HookResult()

    async def post_tool_use(self, call: ToolUse, observation: str) -> HookResult:
        with self._clock.held():
            rewritten = await self._chain.post(call, observation)
        return HookResult(observation=rewritten if rewritten != observation else None)
