"""Real turn contexts for tests: what the runtime passes as a run's ``deps``.

Governance, the connectors and the schedule tools accept only a ``bot.turn_context``
``TurnContext`` as a person's turn (a look-alike object with the same attribute names is
nobody's turn), so a test that stands for a turn builds one here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

from bot.engine.hooks import _CURRENT_RUN, RunContext
from bot.turn_context import LiveMarker, RunSlot, TurnContext

ALICE = "ou_fake_alice"


def turn_context(
    *,
    run_id: str = "run-1",
    conversation_id: str | None = None,
    scope_key: str = "p2p:oc_1",
    message_id: str = "om_1",
    chat_id: str = "oc_1",
    chat_type: str = "p2p",
    sender_open_id: str = ALICE,
    thread_id: str = "",
    generation: int = 0,
    live: LiveMarker | None = None,
    slot: RunSlot | None = None,
    scheduled_task: str = "",
    joined: Sequence[str] | Callable[[], tuple[str, ...]] = (),
) -> TurnContext:
    """A person's turn in a chat; ``joined`` are the senders whose messages joined it, or a
    function that says who as of now (a list given is read live: append to it to join)."""
    if callable(joined):
        joined_senders = joined
    else:
        senders = joined

        def joined_senders() -> tuple[str, ...]:
            return tuple(senders)

    return TurnContext(
        run_id=run_id,
        conversation_id=conversation_id,
        scope_key=scope_key,
        message_id=message_id,
        chat_id=chat_id,
        chat_type=chat_type,
        sender_open_id=sender_open_id,
        thread_id=thread_id,
        generation=generation,
        live=live,
        slot=slot,
        scheduled_task=scheduled_task,
        joined_senders=joined_senders,
    )


def look_alike(turn: TurnContext) -> SimpleNamespace:
    """An object of another type with every field of ``turn`` and its ``askers()``: what
    deps forged to pass an attribute-name check would look like. It is nobody's turn."""
    values = {field.name: getattr(turn, field.name) for field in fields(turn)}
    return SimpleNamespace(**values, askers=turn.askers)


def run_of(deps: Any, query: str = "q") -> RunContext[Any]:
    """The engine run whose deps are ``deps`` (a turn, or anything a test tries)."""
    run_id = deps.run_id if isinstance(deps, TurnContext) else "run-x"
    return RunContext(run_id, query, deps)


@contextmanager
def serving(deps: Any, query: str = "q") -> Iterator[None]:
    """As the engine's executor does around a handler: the run the call serves is current."""
    token = _CURRENT_RUN.set(run_of(deps, query))
    try:
        yield
    finally:
        _CURRENT_RUN.reset(token)


__all__ = ["ALICE", "look_alike", "run_of", "serving", "turn_context"]
