"""A tool call served inside a person's turn, as the engine's executor serves it: the run's
``deps`` say where the answer goes and whose messages it answers (``bot.askers.AskedRun``),
which is all the Feishu workspace tools may know of who asks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bot.askers import Askers
from bot.engine.hooks import _CURRENT_RUN, RunContext


@dataclass(frozen=True, slots=True)
class AskedTurn:
    """The runtime's turn context as the connectors read it."""

    chat_id: str
    chat_type: str
    sender_open_id: str
    joined: tuple[str, ...] = ()
    message_id: str = "om_asked"
    thread_id: str = ""

    def askers(self) -> Askers:
        return Askers.of(self.sender_open_id, self.joined)


def dm(open_id: str, *, joined: tuple[str, ...] = ()) -> AskedTurn:
    """``open_id`` asking the bot in their direct chat with it."""
    return AskedTurn(f"oc_dm_{open_id.removeprefix('ou_')}", "p2p", open_id, joined)


def in_group(chat_id: str, open_id: str, *, joined: tuple[str, ...] = ()) -> AskedTurn:
    """``open_id`` asking the bot in the group chat ``chat_id``."""
    return AskedTurn(chat_id, "group", open_id, joined)


@contextmanager
def serving(deps: object) -> Iterator[None]:
    """As the executor does around a handler: the run the call serves is current."""
    token = _CURRENT_RUN.set(RunContext(run_id="run-asked", query="q", deps=deps))
    try:
        yield
    finally:
        _CURRENT_RUN.reset(token)


__all__ = ["AskedTurn", "dm", "in_group", "serving"]
