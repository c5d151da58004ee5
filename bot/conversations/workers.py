"""One serial worker per conversation, many conversations at once.

Messages of one conversation are handled in arrival order, one run at a time. A
message that arrives while its conversation has a run in progress does not queue
behind it: it joins that run through the run's ``InterruptQueue`` (the agent reads it
at its next safe point), and the run's owner is told so it can record the message as
answered by that run. Different conversations run concurrently, up to a global limit.

What joins one run is bounded (``join_limits``: messages and characters, the rule the
agent reads its interrupts by), so a flood of messages cannot grow one request past
what the model accepts. A message the run has no room for waits in the conversation's
queue, in order, for a later turn; past ``max_waiting`` waiting messages it is refused
(``submit`` says so, and the caller tells the sender). None is dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from bot.engine import InterruptQueue
from bot.engine.interrupts import InterruptAllowance, InterruptLimits

from .slots import RunSlot

logger = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(slots=True)
class Job:
    """One message to handle. ``run`` does the work for the whole turn."""

    key: str
    message_id: str
    text: str
    run: Callable[[Turn], Awaitable[None]]
    # Who sent it ("" when unknown): a run that others' messages joined may not act as its
    # starter (per-user authorisation).
    sender: str = ""
    # False for a run of its own whatever is running (a saved run resumed): it never
    # joins the run in progress as one of its messages, and is never refused for room.
    joins: bool = True


@dataclass(slots=True)
class Turn:
    """What a running job sees: its interrupt queue and the messages that joined it."""

    job: Job
    interrupts: InterruptQueue = field(default_factory=InterruptQueue)
    joined: list[Job] = field(default_factory=list)
    # Set when a /stop arrives before the run started (it was waiting for a slot, or
    # reading the question's files).
    stopped_before_start: str | None = None
    # The work that readies the run (reading the question's files): a /stop before the
    # run starts cancels it, which stops the reader processes too.
    preparing: asyncio.Future[Any] | None = None
    # After close(): no more joining; joined messages the run never read go here.
    closed: bool = False
    unread: list[Job] = field(default_factory=list)
    # The run's slot among the bot's concurrent runs (given up while a human decides).
    slot: RunSlot | None = None
    # What is left of the joining limits (made at the first join: the turn is built
    # without them), and the length of the question while the run has not begun.
    allowance: InterruptAllowance | None = None
    question_chars: int | None = None
    # The run waits for a person and is saved where it stands: a shutdown cancels it at
    # once (the process that takes its message over goes on with it) instead of giving
    # it the grace that a run about to finish gets.
    held: bool = False

    def join(self, job: Job, limits: InterruptLimits | None = None) -> bool:
        """Add ``job`` to this run if it is still open and ``limits`` leave room for it.

        Counted like the agent counts what it reads, so a message let in here is one
        the run can read; every joined message is read by the run or handed back by
        ``close``.
        """
        if self.closed:
            return False
        text = job.text.strip()
        if limits is not None:
            if self.allowance is None:
                self.allowance = InterruptAllowance(limits)
            if not self.allowance.admits(text):
                return False
            if not self.interrupts.running and not self._fits_question(text, limits):
                return False
            self.allowance.take(text)
        self.joined.append(job)
        self.interrupts.put_nowait(job.text)
        return True

    def stop_before_start(self, reason: str) -> None:
        """A /stop before the run started: it will not start, and what readies it ends."""
        self.stopped_before_start = reason
        if self.preparing is not None:
            self.preparing.cancel()

    async def before_start(self, work: Awaitable[_T]) -> _T | None:
        """``work`` (readying the run), or None when a /stop ended it first."""
        if self.stopped_before_start:
            if asyncio.iscoroutine(work):
                work.close()
            return None
        self.preparing = future = asyncio.ensure_future(work)
        try:
            return await future
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.stopped_before_start and not (current and current.cancelling()):
                return None  # the /stop cancelled the work, not someone the turn's task
            raise
        finally:
            self.preparing = None

    def joined_senders(self) -> tuple[str, ...]:
        """Who sent the messages that joined this run, in order ("" when unknown)."""
        return tuple(job.sender for job in self.joined)

    def _fits_question(self, text: str, limits: InterruptLimits) -> bool:
        """Before the run begins, what joins is added to its question (one line each),
        which the agent cuts past ``message_cap``: only what keeps it whole may join."""
        if self.question_chars is None:
            self.question_chars = len(self.job.text)
        grown = self.question_chars + 1 + len(text)
        if grown > limits.message_cap:
            return False
        self.question_chars = grown
        return True

    def close(self) -> list[Job]:
        """End joining (the agent has stopped reading interrupts).

        Messages that joined after the agent's last read would be lost with the turn;
        they are taken out of ``joined`` and handed back to the conversation's queue,
        in order, to be answered by the next turn.
        """
        self.closed = True
        unread_texts = len(self.interrupts.drain())
        if unread_texts:
            self.unread = self.joined[-unread_texts:]
            del self.joined[-unread_texts:]
        return self.unread


@dataclass(slots=True)
class _Lane:
    queue: deque[Job] = field(default_factory=deque)
    turn: Turn | None = None
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class StopResult:
    stopped: bool
    dropped: tuple[Job, ...] = ()


# "refused": the conversation has ``max_waiting`` messages waiting already.
Submitted = Literal["queued", "joined", "refused"]


class ConversationLock(Protocol):
    """Keeps other processes off a conversation while this one runs its turns.

    ``acquire`` waits until the conversation is ours; ``release`` gives it back once
    nothing of it is queued here any more.
    """

    async def acquire(self, key: str) -> None: ...

    async def release(self, key: str) -> None: ...


class ConversationWorkers:
    def __init__(
        self,
        max_concurrent_runs: int,
        *,
        lock: ConversationLock | None = None,
        join_limits: InterruptLimits | None = None,
        max_waiting: int | None = None,
    ) -> None:
        # What one run takes in from messages that join it; None: no limit.
        self._join_limits = join_limits
        # Messages of one conversation that may wait for a later turn; None: no limit.
        self._max_waiting = max_waiting
        self._lock = lock
        self._lanes: dict[str, _Lane] = {}
        self._slots = asyncio.Semaphore(max_concurrent_runs)
        self._closing = False

    def submit(self, job: Job) -> Submitted:
        """Hand ``job`` to the run in progress in its conversation if it has room, else
        queue it for a later turn; "refused" when too many wait already."""
        if self._closing:
            raise RuntimeError("workers are shutting down")
        lane = self._lanes.setdefault(job.key, _Lane())
        # Only when nothing waits: a message joining ahead of older waiting ones would
        # be answered before them.
        if (
            job.joins
            and lane.turn is not None
            and not lane.queue
            and lane.turn.join(job, self._join_limits)
        ):
            return "joined"
        busy = lane.turn is not None or bool(lane.queue)  # an idle conversation always starts
        full = self._max_waiting is not None and len(lane.queue) >= self._max_waiting
        if busy and full and job.joins:
            return "refused"
        lane.queue.append(job)
        if lane.task is None or lane.task.done():
            lane.task = asyncio.get_running_loop().create_task(
                self._work(job.key, lane), name=f"conversation:{job.key}"
            )
        return "queued"

    def stop(self, key: str, reason: str) -> StopResult:
        """Stop the run in progress (a ``/stop``) and drop what was queued behind it."""
        lane = self._lanes.get(key)
        if lane is None:
            return StopResult(False)
        dropped = tuple(lane.queue)
        lane.queue.clear()
        turn = lane.turn
        if turn is None:
            return StopResult(False, dropped)
        if not turn.interrupts.stop(reason):
            # The run has not started (it waits for a slot, or its files are being read):
            # it will not start at all.
            turn.stop_before_start(reason)
        return StopResult(True, dropped)

    @property
    def active_runs(self) -> int:
        return sum(1 for lane in self._lanes.values() if lane.turn is not None)

    async def close(self, grace_seconds: float) -> list[Job]:
        """Stop taking work, wait up to ``grace_seconds``, cancel the rest.

        Returns the jobs that did not finish (queued, running or joined), so the caller
        can hand their messages back for another process or the next start.
        """
        self._closing = True
        unfinished: list[Job] = []
        for lane in list(self._lanes.values()):
            if lane.turn is not None and lane.turn.held and lane.task and not lane.task.done():
                unfinished.append(lane.turn.job)
                unfinished.extend(lane.turn.joined)
                unfinished.extend(lane.queue)
                lane.queue.clear()
                lane.task.cancel()
        tasks = [lane.task for lane in self._lanes.values() if lane.task and not lane.task.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        else:
            pending = set()
        for lane in self._lanes.values():
            if lane.task in pending:
                if lane.turn is not None:
                    unfinished.append(lane.turn.job)
                    unfinished.extend(lane.turn.joined)
                unfinished.extend(lane.queue)
                lane.queue.clear()
                lane.task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        return unfinished

    async def _work(self, key: str, lane: _Lane) -> None:
        locked = False
        try:
            while lane.queue:
                job = lane.queue.popleft()
                lane.turn = turn = Turn(job)
                try:
                    if self._lock is not None and not locked:
                        # While another process runs this conversation, messages that
                        # arrive here join this turn, as they would while it waits for a slot.
                        await self._lock.acquire(key)
                        locked = True
                    turn.slot = slot = RunSlot(self._slots)
                    await slot.acquire()
                    try:
                        await job.run(turn)
                    finally:
                        slot.release()
                except Exception:
                    logger.exception("conversation %s: job %s failed", key, job.message_id)
                finally:
                    lane.turn = None
                    lane.queue.extendleft(reversed(turn.unread))
        finally:
            if not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]
            if locked:
                await self._release(key)

    async def _release(self, key: str) -> None:
        try:
            await self._lock.release(key)  # type: ignore[union-attr]  # only called when locked
        except Exception:  # the lease lapses on its own
            logger.exception("conversation %s: releasing its lock failed", key)
