"""Messages a user sends while a run is active, and the way to stop a run.

The conversation worker owns one ``InterruptQueue`` per conversation. A message that
arrives during a run is ``put_nowait`` into it; the loop drains the queue at safe
points (JSON mode: after each assistant message; native mode: only after the tool
results) and merges what it found into one pinned ``[USER INTERRUPT]`` message.

``stop()`` ends the run bound to the queue (a ``/stop`` command): the loop finishes
with status ``cancelled`` and a consistent transcript instead of raising.

Pinned text survives compaction verbatim, so it must be bounded where it is made:
``InterruptLimits`` caps what one run takes in (messages and characters in all, and the
pinned text of any one message), ``InterruptAllowance`` applies the one rule to both
sides (the conversation worker deciding who may join a run, the queue deciding what
the run reads), and ``cap_text`` cuts a long message with a note of how much was cut.
A message the run may not take stays queued, in order, for its owner to hand to the
next turn: nothing is dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass

INTERRUPT_HEADER = "[USER INTERRUPT]"

# Where a long message was cut; says how much, so the model can tell the user.
CUT_NOTE = "\n[… {cut:,} characters of this message cut …]\n"
# A cap shorter than this would leave little but the note.
MIN_MESSAGE_CHARS = 200


@dataclass(frozen=True, slots=True)
class InterruptLimits:
    """How much user text one run takes in while it works.

    ``max_messages`` and ``max_chars`` bound all the interrupts of one run together;
    ``max_message_chars`` bounds the pinned text of any one message (the question that
    starts the run too). Characters, not tokens: a CJK character is about a token, so
    8,000 characters are at most ~8,000 tokens, ~2,000 in English.
    """

    max_messages: int = 10
    max_chars: int = 8_000
    max_message_chars: int = 8_000

    def __post_init__(self) -> None:
        if self.max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        if min(self.max_chars, self.max_message_chars) < MIN_MESSAGE_CHARS:
            raise ValueError(f"character limits must be at least {MIN_MESSAGE_CHARS}")

    @property
    def message_cap(self) -> int:
        """The pinned characters of one message: one message always fits a fresh run."""
        return min(self.max_message_chars, self.max_chars)


def cap_text(text: str, limit: int) -> str:
    """``text``, or when it is longer than ``limit`` characters its beginning and end
    with a note of how much was cut between them, at most ``limit`` characters in all.

    The end is kept too because a long message often ends with what it asks
    ("<pasted log> why does this fail?"). ``limit`` should be at least
    ``MIN_MESSAGE_CHARS``, or little but the note is left.
    """
    if len(text) <= limit:
        return text
    # The longest note this text can need; the real one is never longer.
    keep = max(0, limit - len(CUT_NOTE.format(cut=len(text))))
    head = keep * 3 // 4
    tail = keep - head
    note = CUT_NOTE.format(cut=len(text) - keep)
    return text[:head] + note + (text[len(text) - tail :] if tail else "")


class InterruptAllowance:
    """What is left of one run's ``InterruptLimits``; counts each message it takes."""

    def __init__(self, limits: InterruptLimits) -> None:
        self.limits = limits
        self.messages = 0
        self.chars = 0

    def admits(self, text: str) -> bool:
        shown = min(len(text), self.limits.message_cap)
        return (
            self.messages < self.limits.max_messages and self.chars + shown <= self.limits.max_chars
        )

    def take(self, text: str) -> str | None:
        """The text as the run shows it (cut to the message cap), counted; None if it
        does not fit what is left."""
        if not self.admits(text):
            return None
        shown = cap_text(text, self.limits.message_cap)
        self.messages += 1
        self.chars += min(len(text), self.limits.message_cap)
        return shown


class InterruptQueue:
    """A FIFO of user messages for a running agent; safe to feed from any task or thread.

    A run bound with ``InterruptLimits`` reads only what its allowance still admits,
    oldest first and each message cut to the per-message cap; whatever it may not read
    stays queued, and ``drain()`` after the run (unbound) hands every rest back, in order.
    """

    def __init__(self) -> None:
        self._items: deque[str] = deque()
        self._lock = threading.Lock()
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_reason: str | None = None
        self._allowance: InterruptAllowance | None = None

    def put_nowait(self, text: str) -> None:
        text = text.strip()
        if text:
            with self._lock:
                self._items.append(text)

    def __len__(self) -> int:
        return len(self._items)

    def pending(self) -> bool:
        """Whether ``drain()`` would return something now."""
        with self._lock:
            if not self._items:
                return False
            return self._allowance is None or self._allowance.admits(self._items[0])

    def drain(self) -> list[str]:
        """Take queued messages, oldest first: all of them, or while a run with limits
        is bound, as many as its allowance admits (cut as the run shows them)."""
        if not self._items:
            return []
        with self._lock:
            allowance = self._allowance
            if allowance is None:
                items = list(self._items)
                self._items.clear()
                return items
            taken: list[str] = []
            # In order: a message that does not fit stops the read, so none overtakes
            # another and what is left is exactly the newest messages.
            while self._items:
                shown = allowance.take(self._items[0])
                if shown is None:
                    break
                self._items.popleft()
                taken.append(shown)
            return taken

    # -- stopping ----------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def bind(self, task: asyncio.Task[object], limits: InterruptLimits | None = None) -> None:
        """Called by the run that consumes this queue; ``limits`` bound what it reads."""
        with self._lock:
            self._task = task
            self._loop = task.get_loop()
            self._stop_reason = None
            self._allowance = InterruptAllowance(limits) if limits is not None else None

    def unbind(self, task: asyncio.Task[object]) -> None:
        if self._task is task:
            with self._lock:
                self._task = None
                self._loop = None
                self._allowance = None

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
