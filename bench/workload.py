"""The workload every engine runs, defined once so no engine gets an easier version.

A scripted model asks for ``parallel`` calls of ``echo(x)`` on each of ``iterations`` turns,
then answers ``ANSWER``. Every call gets its own ``x`` (and so its own id and arguments),
which keeps cycle detection in engines that have it from ever firing.
"""

from __future__ import annotations

QUESTION = "Echo some numbers, then say done."
ANSWER = "done"

# (iterations, parallel) pairs, in table-column order.
SIZES: tuple[tuple[int, int], ...] = ((1, 1), (10, 1), (50, 1), (200, 1), (10, 4))
# The size whose peak memory is reported.
MEMORY_SIZE = (50, 1)


def call_args(iterations: int, parallel: int) -> list[list[int]]:
    """The ``x`` of every tool call, one inner list per model turn."""
    return [[turn * parallel + i for i in range(parallel)] for turn in range(iterations)]


def echo_text(x: int) -> str:
    return f"echo {x}"
