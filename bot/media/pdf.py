"""PDF text, page by page, with pypdf (pure Python: no native parser sees hostile bytes).

A PDF locked only against printing or copying has an empty user password; pypdf opens it with
``decrypt("")`` and we read it like any other. One that needs a real password is refused with
``EncryptedDocument``. A page whose text cannot be extracted (a broken font program, say) is
skipped with a remark rather than losing the whole document.
"""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING

from bot.media.errors import CorruptMedia, EncryptedDocument
from bot.media.extraction import Budget, Extraction

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["read_pdf"]

_LOG = logging.getLogger(__name__)


def read_pdf(data: bytes, budget: Budget) -> Extraction:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    _unlock(reader)
    pages = reader.pages
    total = len(pages)
    if total == 0:
        raise CorruptMedia("PDF", "it has no pages")
    result = Extraction(unit="page", units_total=total)
    failed: list[int] = []
    any_text = False
    for number, page in enumerate(pages, start=1):
        try:
            text = (page.extract_text() or "").strip()
        except Exception as exc:
            # Per page on purpose: one bad page must not cost the reader the other 39.
            _LOG.debug("pdf page %d unreadable: %r", number, exc)
            failed.append(number)
            text = ""
        any_text = any_text or bool(text)
        section = f"--- page {number} ---\n{text}" if text else f"--- page {number} ---"
        result.sections.append(section)
        if not budget.take(section) and number < total:
            result.complete = False
            break
    if failed and len(failed) == total:
        raise CorruptMedia("PDF", "no page could be read")
    if failed:
        result.remarks.append(f"{_pages(failed)} could not be read")
    if not any_text:
        result.sections = []
        result.empty_hint = (
            f"[no text: the PDF has {total} page{'s' if total != 1 else ''} but no text layer; "
            "scanned pages need OCR]"
        )
    return result


def _unlock(reader: PdfReader) -> None:
    from pypdf import PasswordType

    if not reader.is_encrypted:
        return
    try:
        opened = reader.decrypt("")
    except Exception as exc:
        # An unknown security handler or a cipher pypdf cannot run: locked all the same.
        raise EncryptedDocument("PDF") from exc
    if opened == PasswordType.NOT_DECRYPTED:
        raise EncryptedDocument("PDF")


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    more = f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    return f"page{'s' if len(numbers) > 1 else ''} {shown}{more}"
