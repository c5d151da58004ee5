"""How much one file may cost to read, and how many are read at once.

Files people send are read in separate processes (``reader_pool``), each confined by the
kernel (``RLIMIT_AS``, ``RLIMIT_CPU``) and stopped by the bot at a wall-clock limit, so no
file can take the bot's own memory or its event loop. The numbers, and why:

- ``memory_bytes`` (448 MiB of address space a process): a 48-megapixel photo decodes
  and shrinks within it, and so does the largest Office part a reader accepts
  (``sniff.MAX_PART_BYTES``); a process that came near it is replaced after its file.
  Two processes at the limit (896 MiB), and the files the bot holds for them (at most
  ``processes + 1`` downloads of 20 MiB, ``runtime/media.py``), stay under the 1 GiB the bot
  may grow by while reading (issue 32), whatever is sent.
- ``seconds`` (20 s of wall clock and of CPU a file): the readers stop themselves sooner
  (page and row budgets, and ``soft_seconds``, after which a reader stops gathering text
  and says what it left out), so this only ends what they could not bound; with
  ``processes`` readers, six hostile files in a row are answered within a minute.
- ``processes`` (2): one a core. More would read more files at once but take the cores
  that answer everyone else; the readers also run at a lower priority (nice 10).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SOFT_DEADLINE_SECONDS", "ReaderLimits"]

# Readers stop gathering text after this long and say what they left out: a useful part
# of a slow document comes back before the hard limit would end it with nothing.
SOFT_DEADLINE_SECONDS = 8.0


@dataclass(frozen=True, slots=True)
class ReaderLimits:
    memory_bytes: int = 448 * 1024 * 1024
    seconds: int = 20
    processes: int = 2
    soft_seconds: float = SOFT_DEADLINE_SECONDS
    # A process is replaced after this many files, so what a parser leaks or fragments
    # never accumulates.
    files_per_process: int = 200

    def __post_init__(self) -> None:
        if self.memory_bytes < 64 * 1024 * 1024:
            raise ValueError("a reader process needs at least 64 MiB")
        if self.seconds < 1 or self.processes < 1 or self.files_per_process < 1:
            raise ValueError("seconds, processes and files_per_process must be positive")
        if not 0 < self.soft_seconds < self.seconds:
            raise ValueError("soft_seconds must be positive and under seconds")
