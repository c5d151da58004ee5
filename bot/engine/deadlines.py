"""Tool-call timeouts with one shared timer per run.

``asyncio.timeout`` arms and cancels a timer for every call, which costs more than most
tool calls themselves (and leaves a cancelled handle in the loop's heap each time).
``ToolDeadlines`` keeps the deadlines of the running calls in a dict and one timer set
for the earliest; a call that finishes in time just leaves the dict. When the timer
fires it cancels the tasks whose deadline passed and re-arms for the next one.

Use it like ``asyncio.timeout``, one ``Deadline`` per call::

    deadline = deadlines.start(limit)
    try:
        result = await handler()
    except asyncio.CancelledError:
        if deadline.absorb_expiry():
            ...timed out...
        raise
    finally:
        deadline.close()
"""

from __future__ import annotations

import asyncio
import math


class Deadline:
    """One running call's deadline; see the module docstring."""

    __slots__ = ("_initial", "_owner", "_settled", "_task", "expired", "when")

    def __init__(self, owner: ToolDeadlines, task: asyncio.Task[object], when: float) -> None:
        self._owner = owner
        self._task = task
        # Cancellation requests already pending when the call started are not ours.
        self._initial = task.cancelling()
        self._settled = False
        self.when = when
        self.expired = False

    def close(self) -> None:
        """The call is over: forget its deadline; undo an expiry the call swallowed."""
        self._owner.forget(self)
        if self.expired and not self._settled:
            self._settled = True
            if self._task.cancelling() > self._initial:
                # We cancelled the task but the call returned anyway: take the request
                # back so it does not hit the next, unrelated await.
                self._task.uncancel()

    def absorb_expiry(self) -> bool:
        """On CancelledError: True when this deadline alone cancelled the call."""
        self._owner.forget(self)
        if not self.expired or self._settled:
            return False
        self._settled = True
        return self._task.uncancel() <= self._initial


class ToolDeadlines:
    """The deadlines of one run's running tool calls, served by a single timer."""

    def __init__(self) -> None:
        self._running: dict[Deadline, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def start(self, limit: float) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("tool deadlines need a running task")
        loop = task.get_loop()
        deadline = Deadline(self, task, loop.time() + limit)
        self._running[deadline] = None
        if deadline.when < self._timer_at:
            self._arm(loop, deadline.when)
        return deadline

    def forget(self, deadline: Deadline) -> None:
        self._running.pop(deadline, None)

    def close(self) -> None:
        """Drop the timer (the run is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = math.inf
        self._running.clear()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire, loop)
        self._timer_at = when

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._timer_at = math.inf
        now = loop.time()
        for deadline in [d for d in self._running if d.when <= now]:
            del self._running[deadline]
            deadline.expired = True
            deadline._task.cancel("tool call timed out")
        if self._running:
            self._arm(loop, min(d.when for d in self._running))
