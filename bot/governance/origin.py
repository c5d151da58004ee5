"""What governance needs to know about the run a tool call belongs to.

The runtime passes its turn context as the run's ``deps``; governance reads it through
this protocol, so it does not depend on the runtime.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from bot.askers import Askers


class LiveMarker(Protocol):
    """The live answer card: a held call shows as waiting, then runs on."""

    def waiting(self, call_id: str) -> None: ...

    def resumed(self, call_id: str) -> None: ...


class RunSlot(Protocol):
    """The run's share of the bot's concurrent runs: given up while a human decides."""

    def released(self) -> AbstractAsyncContextManager[None]: ...


@runtime_checkable
class Origin(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def scope_key(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def chat_type(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def sender_open_id(self) -> str: ...
    @property
    def live(self) -> LiveMarker | None: ...
    @property
    def slot(self) -> RunSlot | None: ...

    def askers(self) -> Askers:
        """Everyone whose message is in the run, as of now (``sender_open_id`` first): a
        check made for "the person asking" must hold for each of them."""
        ...


def origin_of(deps: object) -> Origin | None:
    return deps if isinstance(deps, Origin) else None
