"""Messages a user sends while a run is active, and the way to stop a run.

The conversation worker owns one ``InterruptQueue`` per conversation. A message that
arrives during a run is ``put_nowait`` into it; the loop drains the queue at safe
points (JSON mode: after each assistant message; native mode: only after the tool
results) and merges what it found into one pinned ``[USER INTERRUPT]`` message.

``stop()`` ends the run bound to the queue (a ``/stop`` command): the loop finishes
with status ``cancelled`` and a consistent transcript instead of raising.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

INTERRUPT_HEADER = "[USER INTERRUPT]"


class InterruptQueue:
    """A FIFO of user messages for a running agent; safe to feed from any task or thread."""

    def __init__(self) -> None:
        self._items: deque[str] = deque()
        self._lock = threading.Lock()
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_reason: str | None = None

    def put_nowait(self, text: str) -> None:
        text = text.strip()
        if text:
            with self._lock:
                self._items.append(text)

    def __len__(self) -> int:
        return len(self._items)

    def pending(self) -> bool:
        return bool(self._items)

    def drain(self) -> list[str]:
        """Take every queued message, oldest first."""
        if not self._items:
            return []
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    # -- stopping ----------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def bind(self, task: asyncio.Task[object]) -> None:
        """Called by the run that consumes this queue."""
        self._task = task
        self._loop = task.get_loop()
        self._stop_reason = None

    def unbind(self, task: asyncio.Task[object]) -> None:
        if self._task is task:
            self._task = None
            self._loop = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self, reason: str = "stopped by user") -> bool:
        """Stop the bound run. Returns False when no run is bound."""
        task, loop = self._task, self._loop
        if task is None or loop is None or task.done():
            return False
        if self._stop_reason is not None:
            return True  # already stopping: a second cancel would outlive the first
        self._stop_reason = reason
        try:
            running_loop = asyncio.get_running_loop()
        except RuntimeError:
            running_loop = None
        if running_loop is loop:
            task.cancel(reason)
        else:
            loop.call_soon_threadsafe(task.cancel, reason)
        return True
