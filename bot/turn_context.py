"""The turn a run answers, as one typed, frozen object: who asked, who joined, the chat and
thread, the run.

The runtime builds a :class:`TurnContext` for each turn and passes it as the engine run's
``deps``; governance (the approval and user-authorisation gates), the connectors (where a
file is posted, who reads what the app reads) and the runtime's own tools read it back
through :func:`turn_of` / :func:`current_turn`, and only so. They check its class, not its
attribute names: deps of any other type, a look-alike with the same fields included, are
nobody's turn, and every check made for a person fails closed on them.

It imports nothing of the runtime, governance or the connectors (each may import it), only
the engine's run and ``bot.askers``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from bot.askers import Askers
from bot.engine import RunCheckpoint, RunContext, current_run
from bot.profiles import Profile

__all__ = ["LiveMarker", "RunParking", "RunSlot", "TurnContext", "current_turn", "turn_of"]


class LiveMarker(Protocol):
    """The live answer card: a held call shows as waiting, then runs on."""

    def waiting(self, call_id: str) -> None: ...

    def resumed(self, call_id: str) -> None: ...


class RunSlot(Protocol):
    """The run's share of the bot's concurrent runs: given up while a human decides."""

    def released(self) -> AbstractAsyncContextManager[None]: ...


class RunParking(Protocol):
    """Where a run that waits for a person saves where it stands (``bot/runtime/turn/parking.py``),
    so that the process that takes its message over resumes it."""

    async def save(self, checkpoint: RunCheckpoint) -> None: ...

    @property
    def saved(self) -> bool:
        """Whether the run is saved (a process that takes it over goes on with it)."""
        ...

    def holding(self, waiting: bool) -> None:
        """The run waits for a person now (True), or goes on (False): a shutdown need not
        wait for a saved run that waits."""
        ...


def _nobody_joined() -> tuple[str, ...]:
    return ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnContext:
    """Passed to every hook and tool of the run (as its ``deps``): who asked, where.

    ``conversation_id`` is None on the first turn of a scope: its conversation is
    created when the turn is recorded, at its end.
    """

    run_id: str
    conversation_id: str | None
    scope_key: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str
    thread_id: str
    # The conversation generation (``/reset`` starts the next): approvals granted
    # "for this conversation" hold within one generation.
    generation: int
    # The live card of this turn: hooks that hold a call (approvals) mark it waiting.
    live: LiveMarker | None = None
    # The run's slot: hooks that wait for a person (approvals) give it up meanwhile.
    slot: RunSlot | None = None
    # The scheduled task this run fires for ("" for a person's message): such a run may
    # not schedule tasks itself.
    scheduled_task: str = ""
    # The senders of the messages that joined this run so far, in order (a group
    # conversation everyone shares): each is an asker too (``askers()``).
    joined_senders: Callable[[], tuple[str, ...]] = _nobody_joined
    # Saves the run before it waits for a person (None: a run that cannot be resumed
    # elsewhere, e.g. a scheduled run: it waits as before).
    parking: RunParking | None = None
    # The chat's agent profile (None: the default agent): the tools that may run here.
    profile: Profile | None = None

    def askers(self) -> Askers:
        """Everyone whose message this run answers, as of now (more may join)."""
        return Askers.of(self.sender_open_id, self.joined_senders())


def turn_of(run: RunContext[Any] | None) -> TurnContext | None:
    """The turn ``run`` answers; None for a run that is nobody's turn (the console, a
    benchmark, a test without a chat) and for deps of any other type."""
    deps = run.deps if run is not None else None
    return deps if isinstance(deps, TurnContext) else None


def current_turn() -> TurnContext | None:
    """The turn of the tool call in progress (:func:`turn_of` of ``current_run()``)."""
    return turn_of(current_run())
