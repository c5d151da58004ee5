"""Run slots: how many runs work at once, and giving a slot up while a human decides.

A run waiting for an approval can wait for minutes. Holding its slot meanwhile would let a
handful of pending approvals stop every other conversation (8 slots, 8 writes waiting: no
one else is answered until the approvals expire). So a run may give its slot back for the
wait (``released()``) and queues for one again when the decision comes; its conversation
stays its own all along (the worker still owns the lane and the conversation lock).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RunSlot:
    """One run's hold on the shared semaphore of run slots."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = False
        self._waiting = 0  # calls of this run inside released() (parallel tool calls)

    async def acquire(self) -> None:
        await self._slots.acquire()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()

    @asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """Give the slot up while the block waits; take one again before going on.

        Parallel calls of one run share the slot: it is given up by the first to wait and
        taken again by the last to stop waiting. A cancelled wait (a ``/stop``) does not
        queue for a slot just to stop: the run ends without one.
        """
        self._waiting += 1
        if self._waiting == 1:
            self.release()
        cancelled = False
        try:
            yield
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self._waiting -= 1
            if self._waiting == 0 and not cancelled and not self._held:
                await self.acquire()
