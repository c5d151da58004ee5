"""Files and images people send are read in reader processes, never in the bot's own.

A hostile file within the download limit could once take the bot to gigabytes (a table
cell spanning 100 million columns, a 340 KB .docx whose text unpacks to 200 MiB) or pin a
worker thread for minutes (python-docx's merged-cell walk, a PDF whose pages share one
inflating stream), and ``/stop`` could not end a thread. Here every untrusted byte is
parsed in a child process (``reader_process``) that the kernel confines (``limits``), the
bot stops at a wall-clock limit, a cancelled caller (``/stop``, shutdown) kills, and that
answers in plain data frames (``reader_wire``). The bot process only moves bytes.

Processes are started when the first file comes and reused for the next ones (about 0.1 s
of start-up saved a file, and the libraries stay imported); at most ``limits.processes``
run at once, a file waits for a free one. A process that was killed, broke a limit, or read
``files_per_process`` files is replaced by a fresh one for the next file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.media.documents import ExtractedText
from bot.media.errors import CorruptMedia, MediaError, MediaTooCostly, MediaTooLarge
from bot.media.images import DEFAULT_MAX_PIXELS, PreparedImage
from bot.media.limits import ReaderLimits
from bot.media.reader_wire import (
    FRAME_HEAD,
    MAX_HEADER_BYTES,
    MAX_INPUT_BYTES,
    BadFrame,
    decode_error,
    decode_header,
    encode_frame,
    extracted_from,
    image_from,
)

__all__ = ["ReaderPool", "ReaderStats", "ReadingStopped"]

logger = logging.getLogger(__name__)

_NOT_UNDERSTOOD = "the reader's answer was not understood"
# Where ``bot`` is importable from, for a child started with a bare environment.
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


class ReadingStopped(MediaError):
    """The bot was stopping while the file was being read."""

    def __init__(self) -> None:
        super().__init__("I stopped reading it because I am restarting; send it again shortly.")


@dataclass(slots=True)
class ReaderStats:
    """What the pool did since it started (for tests, the bench and the logs)."""

    started: int = 0
    files: int = 0
    killed: int = 0
    over_memory: int = 0
    over_time: int = 0


@dataclass(slots=True)
class _Reader:
    process: asyncio.subprocess.Process
    files: int = 0


@dataclass(slots=True)
class _Answer:
    header: dict[str, Any]
    payload: bytes = field(repr=False)


class ReaderPool:
    def __init__(self, limits: ReaderLimits | None = None) -> None:
        self._limits = limits or ReaderLimits()
        self._free = asyncio.Semaphore(self._limits.processes)
        self._idle: list[_Reader] = []
        self._busy: list[_Reader] = []
        self._reaping: set[asyncio.Task[int]] = set()
        self._closed = False
        self.stats = ReaderStats()

    @property
    def limits(self) -> ReaderLimits:
        return self._limits

    @property
    def reading(self) -> int:
        """How many files are being read now (for /metrics and tests)."""
        return len(self._busy)

    def pids(self) -> list[int]:
        """The reader processes alive now, idle or reading."""
        readers = [*self._idle, *self._busy]
        return [r.process.pid for r in readers if r.process.returncode is None]

    async def extract_text(self, data: bytes, *, file_name: str, max_chars: int) -> ExtractedText:
        """``bot.media.extract_text``, in a reader process; raises only ``MediaError``."""
        if max_chars < 1:
            raise ValueError("max_chars must be positive")
        job = {
            "op": "document",
            "file_name": file_name,
            "max_chars": max_chars,
            "seconds": self._limits.soft_seconds,
        }
        answer = await self._read(job, data, max_payload=0, kind="file")
        try:
            return extracted_from(_result(answer))
        except BadFrame:
            raise CorruptMedia("file", _NOT_UNDERSTOOD) from None

    async def prepare_image(
        self, data: bytes, *, max_side: int, max_bytes: int, max_pixels: int = DEFAULT_MAX_PIXELS
    ) -> PreparedImage:
        """``bot.media.prepare_image``, in a reader process; raises only ``MediaError``."""
        if max_side < 1 or max_bytes < 1 or max_pixels < 1:
            raise ValueError("max_side, max_bytes and max_pixels must be positive")
        job = {
            "op": "image",
            "max_side": max_side,
            "max_bytes": max_bytes,
            "max_pixels": max_pixels,
        }
        answer = await self._read(job, data, max_payload=max_bytes, kind="image")
        try:
            return image_from(_result(answer), answer.payload)
        except BadFrame:
            raise CorruptMedia("image", _NOT_UNDERSTOOD) from None

    async def aclose(self) -> None:
        """Kill every reader (a file being read is answered as stopped) and reap them."""
        self._closed = True
        idle, self._idle = self._idle, []
        for reader in [*idle, *self._busy]:
            self._kill(reader)
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)

    async def _read(
        self, job: dict[str, Any], data: bytes, *, max_payload: int, kind: str
    ) -> _Answer:
        if self._closed:
            raise RuntimeError("the reader pool is closed")
        if len(data) > MAX_INPUT_BYTES:
            raise MediaTooLarge(len(data), MAX_INPUT_BYTES, what=f"The {kind}")
        async with self._free:
            reader = self._idle.pop() if self._idle else await self._start()
            self._busy.append(reader)
            keep = False
            try:
                answer = await asyncio.wait_for(
                    self._exchange(reader, job, data, max_payload), self._limits.seconds
                )
                keep = not answer.header.get("retire") and answer.header.get("ok") is not None
                return answer
            except TimeoutError:
                self.stats.over_time += 1
                logger.warning(
                    "a reader took over %d s on a %s: stopped", self._limits.seconds, kind
                )
                raise MediaTooCostly("time", self._limits.seconds) from None
            except (BadFrame, OSError, asyncio.IncompleteReadError) as exc:
                raise await self._broken(reader, kind, exc) from None
            finally:
                self._busy.remove(reader)
                reader.files += 1
                self.stats.files += 1
                if keep and not self._closed and reader.files < self._limits.files_per_process:
                    self._idle.append(reader)
                else:
                    # Also when the caller was cancelled (/stop, shutdown): the file is
                    # abandoned mid-parse, and only killing the process ends that work.
                    self._kill(reader)

    async def _start(self) -> _Reader:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-s",  # no user site: the reader imports only what the bot was installed with
            "-m",
            "bot.media.reader_process",
            str(self._limits.memory_bytes),
            str(self._limits.seconds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=_bare_environment(os.environ),
            # Its own process group: a Ctrl+C meant for the bot reaches the bot, which
            # then stops its readers itself.
            start_new_session=True,
        )
        self.stats.started += 1
        return _Reader(process)

    async def _exchange(
        self, reader: _Reader, job: dict[str, Any], data: bytes, max_payload: int
    ) -> _Answer:
        stdin, stdout = reader.process.stdin, reader.process.stdout
        assert stdin is not None and stdout is not None  # both are pipes (_start)
        stdin.write(encode_frame(job, data))
        await stdin.drain()
        header_size, payload_size = FRAME_HEAD.unpack(await stdout.readexactly(FRAME_HEAD.size))
        if header_size > MAX_HEADER_BYTES or payload_size > max_payload:
            raise BadFrame(f"an answer of {header_size} + {payload_size} bytes")
        header = decode_header(await stdout.readexactly(header_size))
        payload = await stdout.readexactly(payload_size)
        if header.get("ok") is False and _is_memory(header):
            self.stats.over_memory += 1
            header["retire"] = True  # it exits after saying so: its heap may be broken
        return _Answer(header, payload)

    async def _broken(self, reader: _Reader, kind: str, cause: BaseException) -> MediaError:
        """The reader died or spoke nonsense: why, in the person's words."""
        process = reader.process
        if self._closed:
            return ReadingStopped()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), 1.0)
        code = process.returncode
        if code == -signal.SIGXCPU:
            self.stats.over_time += 1
            return MediaTooCostly("time", self._limits.seconds)
        logger.warning("a reader broke on a %s (exit %s): %r", kind, code, cause)
        if code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
            # A native allocation that failed past RLIMIT_AS ends the process this way.
            self.stats.over_memory += 1
            return MediaTooCostly("memory", self._limits.memory_bytes)
        return CorruptMedia(kind, "reading it stopped the reader")

    def _kill(self, reader: _Reader) -> None:
        process = reader.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            self.stats.killed += 1
        if process.stdin is not None:
            process.stdin.close()
        reaping = asyncio.get_running_loop().create_task(process.wait())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)


def _result(answer: _Answer) -> dict[str, Any]:
    """The result of a successful answer; raises the ``MediaError`` of a refusal, and
    ``BadFrame`` for anything else."""
    header = answer.header
    if header.get("ok") is True:
        result = header.get("result")
        if not isinstance(result, dict):
            raise BadFrame("the result is not an object")
        return result
    error = header.get("error")
    raise decode_error(error if isinstance(error, dict) else {})


def _is_memory(header: Mapping[str, Any]) -> bool:
    error = header.get("error")
    return isinstance(error, dict) and error.get("type") == "MediaTooCostly"


def _bare_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What a reader needs to start: no settings, so none of the bot's secrets."""
    kept = {name: environ[name] for name in ("PATH", "LANG", "LC_ALL", "TZ") if name in environ}
    return {
        **kept,
        "PYTHONPATH": _SOURCE_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "random",
    }
