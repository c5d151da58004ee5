"""PDF text, page by page, with pypdf (pure Python: no native parser sees hostile bytes).

A PDF locked only against printing or copying has an empty user password; pypdf opens it with
``decrypt("")`` and we read it like any other. One that needs a real password is refused with
``EncryptedDocument``. A page whose text cannot be extracted (a broken font program, say) is
skipped with a remark rather than losing the whole document. Hostile PDFs are bounded three
ways: pypdf's stream limits (``_PDF_LIMITS``), pages that share their content read once, and
the budget's characters and seconds checked after every page (``MAX_PAGES_TRIED`` at most).
"""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING, Any

from bot.media.errors import CorruptMedia, EncryptedDocument
from bot.media.extraction import Budget, Extraction

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["MAX_PAGES_TRIED", "read_pdf"]

_LOG = logging.getLogger(__name__)

# Pages read at most, text or not: past the character budget a real document has stopped
# long before; a file of 100,000 empty pages has not.
MAX_PAGES_TRIED = 500
_INLINE_RESOURCES_CHARS = 4096
# pypdf's own limits, set for reading text rather than left at its defaults (75 MB a
# stream, 2,000,000 tokens a content stream: about 10 s of parsing a page). A page of dense
# text is tens of thousands of tokens; a content stream of 16 MiB is already a drawing.
_PDF_LIMITS: dict[str, int] = {
    "zlib_maximum_output_length": 16 * 1024 * 1024,
    "lzw_maximum_output_length": 16 * 1024 * 1024,
    "run_length_maximum_output_length": 16 * 1024 * 1024,
    "array_based_stream_maximum_output_length": 16 * 1024 * 1024,
    "stream_parsing_work_maximum_count": 300_000,
}


def read_pdf(data: bytes, budget: Budget) -> Extraction:
    from pypdf import PdfReader, apply_configuration

    with apply_configuration(None, **_PDF_LIMITS):
        reader = PdfReader(io.BytesIO(data), strict=False)
        _unlock(reader)
        return _read_pages(reader, budget)


def _read_pages(reader: PdfReader, budget: Budget) -> Extraction:
    pages = reader.pages
    total = len(pages)
    if total == 0:
        raise CorruptMedia("PDF", "it has no pages")
    result = Extraction(unit="page", units_total=total)
    failed: list[int] = []
    any_text = False
    # Pages that share one content stream (and resources) have the same text: a file can
    # point every page at one stream that is slow to read, so it is read once.
    known: dict[tuple[object, ...], str | None] = {}
    tried = 0
    for number, page in enumerate(pages, start=1):
        tried = number
        key = _content_key(page)
        text = known[key] if key is not None and key in known else _page_text(page, number)
        if key is not None:
            known[key] = text
        if text is None:
            failed.append(number)
            text = ""
        any_text = any_text or bool(text)
        section = f"--- page {number} ---\n{text}" if text else f"--- page {number} ---"
        result.sections.append(section)
        if number < total and (not budget.take(section) or number >= MAX_PAGES_TRIED):
            result.complete = False
            if number >= MAX_PAGES_TRIED:
                result.remarks.append(f"only the first {MAX_PAGES_TRIED} pages were tried")
            break
    if failed and len(failed) == total:
        raise CorruptMedia("PDF", "no page could be read")
    if failed:
        result.remarks.append(f"{_pages(failed)} could not be read")
    if not any_text:
        result.sections = []
        result.empty_hint = _no_text(total, tried)
    return result


def _page_text(page: Any, number: int) -> str | None:
    """The page's text, or None when it cannot be read."""
    try:
        return (page.extract_text() or "").strip()
    except MemoryError:
        raise  # the reader process's limit, not a damaged page
    except Exception as exc:
        # Per page on purpose: one bad page must not cost the reader the other 39.
        _LOG.debug("pdf page %d unreadable: %r", number, exc)
        return None


def _content_key(page: Any) -> tuple[object, ...] | None:
    """What makes the page's text, when another page could share it: its content streams
    (shared objects) and its resources (a shared object, or a small inline dictionary).
    None when the content is inline, which no other page can share."""
    from pypdf.generic import IndirectObject

    contents = page.get("/Contents")
    refs = contents if isinstance(contents, list) else [contents]
    if not refs or not all(isinstance(ref, IndirectObject) for ref in refs):
        return None
    resources = page.get("/Resources")
    if isinstance(resources, IndirectObject):
        shared: object = (resources.idnum, resources.generation)
    else:
        shared = repr(resources)
        if len(shared) > _INLINE_RESOURCES_CHARS:
            return None
    return (tuple((ref.idnum, ref.generation) for ref in refs), shared)


def _no_text(total: int, tried: int) -> str:
    pages = f"{total} page{'s' if total != 1 else ''}"
    if tried < total:
        return f"[no text in the first {tried} of the PDF's {pages}]"
    return f"[no text: the PDF has {pages} but no text layer; scanned pages need OCR]"


def _unlock(reader: PdfReader) -> None:
    from pypdf import PasswordType

    if not reader.is_encrypted:
        return
    try:
        opened = reader.decrypt("")
    except MemoryError:
        raise
    except Exception as exc:
        # An unknown security handler or a cipher pypdf cannot run: locked all the same.
        raise EncryptedDocument("PDF") from exc
    if opened == PasswordType.NOT_DECRYPTED:
        raise EncryptedDocument("PDF")


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    more = f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    return f"page{'s' if len(numbers) > 1 else ''} {shown}{more}"
