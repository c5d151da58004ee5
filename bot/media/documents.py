"""Files people send, as text a model can read: PDF, Word, Excel, CSV, PowerPoint, text, code.

Library choice, measured by ``tests/fixtures/media/measure_libraries.py`` on generated files
(a 40-page text PDF; a .docx of 200 paragraphs and a 21 x 5 table; an .xlsx of two sheets,
1,050 rows; a 20-slide .pptx with 4 tables), 2 cores, Python 3.11, best of 3:

                 pypdf, python-docx, openpyxl, python-pptx   markitdown[pdf,docx,xlsx,pptx] 0.1.9
  installed      47 MB, 9 distributions                      359 MB, 37 (onnxruntime, pandas,
                                                             numpy, pdfminer.six, magika, ...)
  import         242 ms for all four, each loaded lazily     467 ms
  PDF            50 ms                                       1,531 ms (pdfminer)
  .docx          92 ms                                       192 ms, and with lxml 6 it fails on
                                                             every .docx ("Could not find the
                                                             body element": bs4 drops namespaces)
  .xlsx          47 ms                                       326 ms (pandas)
  .pptx          31 ms                                       53 ms
  tables         header row kept, "|" escaped, empty cells   .docx tables get an empty header
                 empty                                       row; empty cells "NaN"; "|" not
                                                             escaped, so the row breaks

markitdown's Markdown is otherwise close, but it brings an ONNX runtime to guess file types
that magic bytes tell us, it has no page boundaries (the cut note says "pages 1-12 of 40"),
and a minor lxml release broke its Word reader. The four libraries are the maintained
reference readers of their formats; pypdf is pure Python, so no native PDF parser meets
hostile bytes. PDF tables come out as lines of text with either choice.

Everything is read from bytes in memory (nothing touches the disk), the content decides the
type (``sniff``), and every exception a parser raises becomes one of the typed errors.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.media.errors import CorruptMedia, MediaError, UnsupportedMedia
from bot.media.extraction import Budget, Extraction
from bot.media.limits import SOFT_DEADLINE_SECONDS
from bot.media.sniff import (
    KIND_NAMES,
    SUPPORTED_DOCUMENTS,
    DocumentKind,
    sniff,
    suffix_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SUPPORTED_DOCUMENTS", "DocumentKind", "ExtractedText", "extract_text"]

_LOG = logging.getLogger(__name__)

# Readers stop once they hold this many times the budget: enough to count most documents
# exactly, and a bound on the work for the rare 2,000-page one.
SCAN_FACTOR = 5
_SEPARATOR = "\n\n"
_NO_MEMORY = 2  # libxml2's XML_ERR_NO_MEMORY
_MARKDOWN = {"md", "markdown", "mdx", "mkd"}


@dataclass(frozen=True)
class ExtractedText:
    """A document's text, cut to the budget; ``note`` says what was cut, or why it is empty."""

    text: str
    kind: DocumentKind
    truncated: bool
    # Characters before the cut; a lower bound when ``total_exact`` is False.
    total_chars: int
    note: str | None = None
    total_exact: bool = True


def extract_text(
    data: bytes, *, file_name: str, max_chars: int, seconds: float = SOFT_DEADLINE_SECONDS
) -> ExtractedText:
    """The text of the file ``file_name`` (``data`` its bytes), at most ``max_chars`` long,
    gathered for at most about ``seconds`` (then cut, with a note that says so).

    Raises ``UnsupportedMedia``, ``EncryptedDocument``, ``CorruptMedia`` or ``MediaTooLarge``,
    and nothing else, whatever the bytes.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    suffix = suffix_of(file_name)
    kind: DocumentKind = "text"
    try:
        binary = sniff(data, suffix)
        kind = binary or _text_kind(suffix)
        budget = Budget(max_chars * SCAN_FACTOR, seconds=seconds)
        extraction = _read_binary(binary, data, budget) if binary else _read_text(data, suffix)
    except (MediaError, MemoryError):
        # MemoryError is the reader process's limit speaking, not a damaged file.
        raise
    except Exception as exc:
        if _out_of_memory(exc):
            raise MemoryError from exc
        # pypdf, lxml, openpyxl and zipfile raise dozens of types on crafted input (KeyError,
        # struct.error, RecursionError, zlib.error...): to a person they all mean "damaged".
        _LOG.debug("unreadable %s %r: %r", kind, file_name, exc)
        raise CorruptMedia(KIND_NAMES[kind], _detail(exc)) from exc
    if budget.timed_out:
        extraction.complete = False
        extraction.remarks.append(
            f"reading stopped after {budget.seconds:g} seconds: the rest of the file was not read"
        )
    return _fit(extraction, kind, max_chars)


def _read_binary(kind: DocumentKind, data: bytes, budget: Budget) -> Extraction:
    reader = _binary_readers()[kind]
    return reader(data, budget)


def _binary_readers() -> dict[str, Callable[[bytes, Budget], Extraction]]:
    # Imported here, not at the top: each pulls in its library only when such a file arrives.
    from bot.media.office import read_docx, read_pptx
    from bot.media.pdf import read_pdf
    from bot.media.sheets import read_xlsx

    return {"pdf": read_pdf, "docx": read_docx, "xlsx": read_xlsx, "pptx": read_pptx}


def _text_kind(suffix: str) -> DocumentKind:
    from bot.media.plain import CODE_LANGUAGES

    if suffix in {"csv", "tsv"}:
        return "csv"
    if suffix in _MARKDOWN:
        return "markdown"
    if suffix in {"json", "geojson"}:
        return "json"
    if suffix in CODE_LANGUAGES:
        return "code"
    return "text"


def _read_text(data: bytes, suffix: str) -> Extraction:
    from bot.media.plain import CODE_LANGUAGES, decode_text, fenced, looks_binary, read_json
    from bot.media.sheets import read_csv

    text = decode_text(data)
    if looks_binary(text):
        named = f".{suffix} files" if suffix else "files without a name we know"
        raise UnsupportedMedia(f"binary {named}", SUPPORTED_DOCUMENTS)
    kind = _text_kind(suffix)
    if not text.strip():
        return Extraction(empty_hint="[the file is empty]")
    if kind == "csv":
        return read_csv(text, tab_separated=suffix == "tsv")
    if kind == "json":
        return read_json(text)
    if kind == "code":
        return Extraction(sections=[fenced(text, CODE_LANGUAGES[suffix])])
    return Extraction(sections=[text.strip()])


def _fit(extraction: Extraction, kind: DocumentKind, max_chars: int) -> ExtractedText:
    full = _SEPARATOR.join(extraction.sections)
    total = len(full)
    if not full.strip():
        hint = extraction.empty_hint or "[no text: the file has no text in it]"
        if extraction.remarks:  # e.g. why reading stopped before any text came
            hint = f"{hint.removesuffix(']')}; {'; '.join(extraction.remarks)}]"
        return ExtractedText("", kind, False, 0, hint, extraction.complete)
    cut = extraction.complete is False or total > max_chars
    text = _cut(full, max_chars) if total > max_chars else full
    if not cut and not extraction.remarks:
        return ExtractedText(text, kind, False, total)
    parts: list[str] = []
    if cut:
        counted = f"{total:,}" if extraction.complete else f"more than {total:,}"
        parts.append(f"showing {len(text):,} of {counted} characters")
        parts.extend(_units_shown(extraction, text))
    parts.extend(extraction.remarks)
    note = "[cut: " + "; ".join(parts) + "]"
    return ExtractedText(text, kind, True, total, note, extraction.complete)


def _cut(text: str, max_chars: int) -> str:
    """The first ``max_chars`` characters, ending at a line break when one is near the end."""
    head = text[:max_chars]
    newline = head.rfind("\n")
    if newline >= max_chars * 0.8:
        head = head[:newline]
    return head.rstrip()


def _units_shown(extraction: Extraction, text: str) -> list[str]:
    if extraction.table_rows is not None:
        # The header and the --- line come first; every other line is one row.
        shown = max(text.count("\n") - 1, 0)
        if shown >= extraction.table_rows:
            return []
        return [f"rows 1-{shown:,} of {extraction.table_rows:,}"]
    if extraction.unit is None or extraction.units_total is None:
        return []
    shown, offset = 0, 0
    for section in extraction.sections:
        if offset >= len(text):
            break
        shown += 1
        offset += len(section) + len(_SEPARATOR)
    unit, total = extraction.unit, extraction.units_total
    span = f"{unit} 1" if shown <= 1 else f"{unit}s 1-{shown}"
    return [f"{span} of {total:,}"]


def _out_of_memory(exc: BaseException) -> bool:
    """Whether libxml2 failed for memory: lxml says so as a syntax error ("unknown error")
    with libxml2's code XML_ERR_NO_MEMORY, which is the reader's limit, not a damaged file."""
    return type(exc).__module__.startswith("lxml") and getattr(exc, "code", None) == _NO_MEMORY


def _detail(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
