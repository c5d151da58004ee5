"""A run waits for a person: one mechanism for approvals, consents and questions.

What is awaited is a row of its kind's store (an approval, an authorisation request, a
question), which ends exactly once by a conditional update: the database is the truth.
This module owns the rest, the same for every kind:

- ``PersonWaits``: the future each waiting call awaits in this process. A decision made
  here (a card click, the console, an OAuth callback) resolves it at once; one made on
  another replica is noticed by a single watcher that reads the states of every local wait
  in one query every ``watch_interval`` seconds, only while something waits.
- ``park``: before the run waits, where it stands is saved (``TurnContext.parking``), so
  that whichever process takes its message over later (after a graceful stop, or a crash)
  resumes the run instead of starting it again, and meets the same row again.
- ``hold``: the wait itself. The live card marks the call waiting, the run gives up its
  slot (a person decides in minutes; others' questions go on meanwhile), and the wait
  ends at the row's expiry at the latest. A stop (``/stop``) ends the row; a process that
  is stopping (``PersonWaits.closing``) leaves it pending for the run's next process (a
  run that could not be saved ends it, as at a stop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Generic, Protocol, TypeVar

from bot.engine.hooks import ToolUse
from bot.turn_context import TurnContext

logger = logging.getLogger(__name__)

PENDING = "pending"


class Awaited(Protocol):
    """A row somebody waits for: its id and its state ("pending" until it ends)."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> str: ...


R = TypeVar("R", bound=Awaited)
R_co = TypeVar("R_co", bound=Awaited, covariant=True)


class AwaitedStore(Protocol[R_co]):
    async def states(self, ids: Collection[str], /) -> Mapping[str, str]: ...

    async def get(self, record_id: str, /) -> R_co | None: ...


class PersonWaits(Generic[R]):
    """The futures of the calls waiting in this process, by the id of what they await."""

    def __init__(self, store: AwaitedStore[R], *, kind: str, watch_interval: float = 0.5) -> None:
        self._store = store
        self._kind = kind
        self._interval = watch_interval
        self._futures: dict[str, asyncio.Future[R]] = {}
        self._wake = asyncio.Event()
        # Set when the process stops: a wait cut short then leaves its row pending, and
        # the run's checkpoint lets the next process go on with it.
        self.closing = False

    def register(self, record_id: str) -> asyncio.Future[R]:
        future = asyncio.get_running_loop().create_future()
        self._futures[record_id] = future
        self._wake.set()
        return future

    def discard(self, record_id: str) -> None:
        future = self._futures.pop(record_id, None)
        if future is not None and not future.done():
            future.cancel()

    def resolve(self, record: R) -> None:
        """``record`` ended: wake the call waiting for it, if it waits here."""
        future = self._futures.get(record.id)
        if future is not None and not future.done() and record.state != PENDING:
            future.set_result(record)

    def waits_for(self, record_id: str) -> bool:
        return record_id in self._futures

    def __len__(self) -> int:
        return len(self._futures)

    async def watch(self) -> None:
        """Run for the life of the process: notice rows ended by other processes."""
        while True:
            if not self._futures:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self._interval)
            try:
                await self.check()
            except Exception:
                logger.exception("checking %s states failed; retrying", self._kind)

    async def check(self) -> None:
        waiting = [i for i, f in self._futures.items() if not f.done()]
        if not waiting:
            return
        for record_id, state in (await self._store.states(waiting)).items():
            if state != PENDING:
                record = await self._store.get(record_id)
                if record is not None:
                    self.resolve(record)


def call_key(call: ToolUse) -> str | None:
    """What a wait records of its call, for a resumed run to meet it again: the call's id
    within its model reply (the iteration: some models say ``call_1`` every time). None
    for a call of a run that cannot be saved (a plan's step), which is never resumed."""
    if call.checkpoint is None:
        return None
    return f"{call.iteration}:{call.call_id}"


async def park(call: ToolUse, turn: TurnContext) -> bool:
    """Save where the run stands before it waits for a person; False when it cannot be
    (a run of plan mode, a run outside a chat's turn, a failed write: it then waits as
    before, and a restart starts it over from its message)."""
    if turn.parking is None or call.checkpoint is None:
        return False
    try:
        await turn.parking.save(call.checkpoint())
    except Exception:
        logger.exception("could not save run %s before it waits", turn.run_id)
        return False
    return True


async def hold(
    waits: PersonWaits[R],
    future: asyncio.Future[R],
    *,
    remaining: float,
    turn: TurnContext | None,
    call_id: str,
    on_expiry: Callable[[], Awaitable[R]],
    on_stop: Callable[[], Awaitable[None]],
) -> R:
    """Wait for ``future`` (registered with ``waits``) at most ``remaining`` seconds: the
    row as it ended, or ``on_expiry()``'s. A stop runs ``on_stop()`` unless the process
    is closing (the row stays pending for the run's next process)."""
    live = turn.live if turn is not None else None
    slot = turn.slot if turn is not None else None
    # Left pending at shutdown only when the run is saved: its next process goes on with
    # it. A run that cannot be (a plan's step, a scheduled run) ends its wait as at a stop.
    saved = turn is not None and turn.parking is not None and turn.parking.saved
    if live is not None:
        live.waiting(call_id)
    parking = turn.parking if turn is not None else None
    if parking is not None and saved:
        parking.holding(True)
    try:
        released: AbstractAsyncContextManager[None] = (
            slot.released() if slot is not None else nullcontext()
        )
        async with released:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, remaining))
    except TimeoutError:
        return await on_expiry()
    except asyncio.CancelledError:
        if not (waits.closing and saved):
            await on_stop()
        raise
    finally:
        if parking is not None and saved:
            parking.holding(False)
        if live is not None and not (waits.closing and saved):  # its card keeps saying so
            live.resumed(call_id)
