"""Feishu refused a grant in the middle of a call: the next call asks the person again, once.

A tool's call has a timeout, so it cannot wait minutes for a person; the gate before it can.
When Feishu refuses a user token mid-call (revoked, a scope withdrawn), the call fails with
a message asking for the tool to be called again, and the gate then asks the person once
more, at most once a run: a grant that keeps failing is not asked for in a loop.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

_State = Literal["wanted", "asked"]


class Reconsent:
    def __init__(self, *, remembered: int = 1024) -> None:
        self._marks: OrderedDict[tuple[str, str], _State] = OrderedDict()
        self._withheld: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._remembered = remembered

    def want(self, run_id: str, open_id: str) -> bool:
        """Mark the person to be asked again in this run; False when they were already."""
        key = (run_id, open_id)
        if key in self._marks:
            return False
        self._marks[key] = "wanted"
        while len(self._marks) > self._remembered:
            self._marks.popitem(last=False)
        return True

    def wanted(self, run_id: str, open_id: str) -> bool:
        return self._marks.get((run_id, open_id)) == "wanted"

    def asked(self, run_id: str, open_id: str) -> None:
        if (run_id, open_id) in self._marks:
            self._marks[(run_id, open_id)] = "asked"

    def withheld(
        self, run_id: str, open_id: str, scopes: frozenset[str] = frozenset()
    ) -> frozenset[str]:
        """Scopes Feishu left out of the person's consent in this run (asking again for
        them would only show another card); with ``scopes``, remember those."""
        key = (run_id, open_id)
        if scopes:
            self._withheld[key] = self._withheld.get(key, frozenset()) | scopes
            while len(self._withheld) > self._remembered:
                self._withheld.popitem(last=False)
        return self._withheld.get(key, frozenset())
