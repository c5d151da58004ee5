"""A reader process: ``python -m bot.media.reader_process MEMORY_BYTES SECONDS``.

Reads frames (``reader_wire``) from stdin, one job at a time, and writes each answer to
stdout. Before it reads anything it confines itself: at most ``MEMORY_BYTES`` of address
space (a parser that asks for more gets ``MemoryError``), no file written (``RLIMIT_FSIZE``
0), no core dump, a handful of descriptors, a lower priority than the bot; before each job
it allows itself ``SECONDS`` more of CPU (past that the kernel ends it with ``SIGXCPU``).
Its environment holds no secret of the bot's (the pool passes a bare one), so a file that
found a parser bug would find nothing worth taking here.

Pillow's and pypdf's own decompression limits are set explicitly, not left to defaults a
release may change. A ``MemoryError`` is answered (the file needs more memory than one file
may have) and then the process exits: its heap may be left half-built.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any, BinaryIO

from bot.media.documents import extract_text
from bot.media.errors import MediaError, MediaTooCostly
from bot.media.images import DEFAULT_MAX_PIXELS, prepare_image
from bot.media.reader_wire import (
    FRAME_HEAD,
    MAX_INPUT_BYTES,
    encode_error,
    encode_frame,
    extracted_to,
    image_to,
)

# Open descriptors: stdin, stdout, stderr, and what the parsers open on the side (none
# today: everything is read from memory). No sockets to speak of.
_DESCRIPTORS = 16
_NICE = 10
# Past this share of its memory at its peak, a process answers and is replaced.
_RETIRE_FRACTION = 0.4


def main(argv: list[str]) -> int:
    memory_bytes, seconds = int(argv[1]), int(argv[2])
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    # A library that prints must not write into the frames.
    sys.stdout = sys.stderr
    _confine(memory_bytes)
    _set_parser_limits()
    while True:
        job = _read_job(source)
        if job is None:
            return 0
        header, payload = job
        _allow_cpu(seconds)
        try:
            sink.write(_answer(header, payload, memory_bytes))
        except MemoryError:
            sink.write(encode_frame({"ok": False, "error": _memory(memory_bytes)}))
            sink.flush()
            return 1
        sink.flush()


def _confine(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (_DESCRIPTORS, _DESCRIPTORS))
    os.nice(_NICE)


def _allow_cpu(seconds: int) -> None:
    """The CPU limit is the process's total: move it to what is used now plus ``seconds``."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (used + seconds, hard))


def _set_parser_limits() -> None:
    from PIL import Image, ImageFile, PngImagePlugin

    # Our own check refuses more pixels first; these are Pillow's, set rather than assumed.
    Image.MAX_IMAGE_PIXELS = DEFAULT_MAX_PIXELS
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    PngImagePlugin.MAX_TEXT_CHUNK = 1024 * 1024
    PngImagePlugin.MAX_TEXT_MEMORY = 8 * 1024 * 1024


def _read_job(source: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    from bot.media.reader_wire import decode_header

    head = _read_exactly(source, FRAME_HEAD.size)
    if head is None:
        return None
    header_size, payload_size = FRAME_HEAD.unpack(head)
    if header_size > 1024 * 1024 or payload_size > MAX_INPUT_BYTES:
        return None  # not the bot speaking: stop
    header_bytes = _read_exactly(source, header_size)
    payload = _read_exactly(source, payload_size)
    if header_bytes is None or payload is None:
        return None
    return decode_header(header_bytes), payload


def _read_exactly(source: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = source.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _heavy(memory_bytes: int) -> bool:
    """Whether this process has used so much of its memory that the next file should have a
    fresh one: a heap left fragmented near the limit fails a file that a new process reads."""
    return _peak_resident_bytes() > memory_bytes * _RETIRE_FRACTION


def _peak_resident_bytes() -> int:
    """This process's own peak (VmHWM): ``ru_maxrss`` would count the bot's, from the fork."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _answer(header: dict[str, Any], payload: bytes, memory_bytes: int) -> bytes:
    answer, data = _answered(header, payload)
    if _heavy(memory_bytes):
        answer["retire"] = True
    return encode_frame(answer, data)


def _answered(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        if header.get("op") == "document":
            extracted = extract_text(
                payload,
                file_name=str(header["file_name"]),
                max_chars=int(header["max_chars"]),
                seconds=float(header["seconds"]),
            )
            return {"ok": True, "result": extracted_to(extracted)}, b""
        if header.get("op") == "image":
            prepared = prepare_image(
                payload,
                max_side=int(header["max_side"]),
                max_bytes=int(header["max_bytes"]),
                max_pixels=int(header["max_pixels"]),
            )
            fields, data = image_to(prepared)
            return {"ok": True, "result": fields}, data
        if header.get("op") == "ping":
            return {"ok": True, "result": {"pid": os.getpid()}}, b""
    except MediaError as error:
        return {"ok": False, "error": encode_error(error)}, b""
    return {"ok": False, "error": {"type": "unknown-op", "args": {}}}, b""


def _memory(memory_bytes: int) -> dict[str, Any]:
    return encode_error(MediaTooCostly("memory", memory_bytes))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
