"""What the document readers hand back, and the Markdown they share.

A reader returns an ``Extraction``: the text in sections (one per page, slide or sheet when
the format has them, so a cut can say "pages 1-12 of 40"), whether it read to the end, and
remarks on what it left out on purpose (columns past the 100th). ``Budget`` lets a reader stop
early: reading all 2,000 pages of a PDF costs a minute of CPU for text nobody will see, and
a page built to be slow costs seconds for no text at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Budget", "Extraction", "cell_text", "markdown_table"]


@dataclass
class Extraction:
    sections: list[str] = field(default_factory=list)
    # "page", "slide", "sheet": what one section is; None for a flow of paragraphs.
    unit: str | None = None
    units_total: int | None = None
    # False when the reader stopped at the budget: the total is then a lower bound.
    complete: bool = True
    remarks: list[str] = field(default_factory=list)
    # Said instead of the text when there is none ("a PDF of 3 pages with no text layer").
    empty_hint: str = ""
    # A single Markdown table whose rows can be counted after a cut (CSV).
    table_rows: int | None = None


class Budget:
    """Characters a reader may gather, and for how long, before it stops; ``take`` says
    whether to go on.

    The time matters as much as the characters: a hostile page can cost seconds and yield
    nothing, so a budget of characters alone never stops reading it. Past ``seconds`` the
    readers stop with what they have, and the cut note says so (``timed_out``).
    """

    def __init__(
        self,
        limit: int,
        *,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.used = 0
        self.seconds = seconds
        self._clock = clock
        self._deadline = clock() + seconds if seconds is not None else None
        self.timed_out = False

    def take(self, text: str) -> bool:
        self.used += len(text)
        return self.used < self.limit and not self.expired

    @property
    def spent(self) -> bool:
        return self.used >= self.limit or self.expired

    @property
    def expired(self) -> bool:
        """Whether the time is up (then the reader stops where it is)."""
        if self._deadline is not None and not self.timed_out:
            self.timed_out = self._clock() >= self._deadline
        return self.timed_out


def cell_text(value: object) -> str:
    """One table cell as Markdown: pipes escaped, line breaks as ``<br>``."""
    if value is None:
        return ""
    text = str(value).strip()
    if not text:
        return ""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.splitlines())


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; the first row is the header, ragged rows padded.

    Cells must already be ``cell_text``; an empty ``rows`` gives "".
    """
    if not rows:
        return ""
    width = max((len(row) for row in rows), default=0)
    if width == 0:
        return ""
    lines = [_line(rows[0], width), "| " + " | ".join(["---"] * width) + " |"]
    lines.extend(_line(row, width) for row in rows[1:])
    return "\n".join(lines)


def _line(row: Iterable[str], width: int) -> str:
    cells = list(row)
    cells.extend([""] * (width - len(cells)))
    return "| " + " | ".join(cells) + " |"
