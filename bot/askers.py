"""Who a run answers: everyone whose message is in it, not only the person who started it.

A message sent while the bot is working joins the running reply (``bot/conversations``):
from then on the model serves the joiner's words too. Every check made on a person's
behalf (who may approve, whose "approve for this person here" grant covers a call, whose
Feishu account a tool may act as, who owns a scheduled task, whose budget pays, what a
tool may read) must therefore hold for every asker, or the joiner borrows the starter's
rights. This module is the one typed place that says who they are; governance, the
connectors and the runtime read them from the run's turn (``TurnContext.askers()``, see
``bot/turn_context.py``), never from the model.

It imports nothing of the bot: the store and the Feishu wire layer use it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Askers", "common"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Askers:
    """The run's askers: ``starter`` first, then each other person who joined, once.

    An unknown sender (``""``) counts as an asker of its own whom no grant, token or rule
    names, so a check over everyone fails closed for a run it joined.
    """

    starter: str
    others: tuple[str, ...] = ()

    @classmethod
    def of(cls, starter: str, joined: Iterable[str] = ()) -> Askers:
        """The askers of a run that ``starter`` began and ``joined`` (senders, in order,
        repeats and the starter's own follow-ups included) joined."""
        others: list[str] = []
        for sender in joined:
            if (sender != starter or not sender) and (sender not in others or not sender):
                others.append(sender)
        return cls(starter, tuple(others))

    @property
    def everyone(self) -> tuple[str, ...]:
        return (self.starter, *self.others)

    @property
    def sole(self) -> str | None:
        """The one person the run answers, when it answers exactly one known person."""
        return self.starter if self.starter and not self.others else None

    @property
    def several(self) -> bool:
        return bool(self.others)

    def all(self, holds: Callable[[str], bool]) -> bool:
        """Whether ``holds`` is true of every asker (an unknown one included)."""
        return all(holds(asker) for asker in self.everyone)


def common(askers: Askers, allowed: Callable[[str], Iterable[_T]]) -> tuple[_T, ...]:
    """What ``allowed`` gives for every asker alike, in the starter's order: e.g. the
    people who may approve a call for each of them. Empty when any asker has none."""
    first = tuple(allowed(askers.starter))
    rest = [set(allowed(asker)) for asker in askers.others]
    return tuple(item for item in first if all(item in other for other in rest))
