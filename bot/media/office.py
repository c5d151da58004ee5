"""Word (.docx) and PowerPoint (.pptx) text, with python-docx and python-pptx.

Both read the document in order: Word paragraphs and tables as they interleave in the body
(headings and list items keep their Markdown marks), PowerPoint slide by slide, shapes top to
bottom then left to right as a reader's eye goes, tables as Markdown, speaker notes last.
lxml parses the XML with entity resolution off (both libraries set that), so an entity bomb
expands to nothing; the archive's unpacked size is bounded before we get here (``sniff``).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from bot.media.extraction import Budget, Extraction, cell_text, markdown_table

if TYPE_CHECKING:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

__all__ = ["read_docx", "read_pptx"]

_HEADING = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def read_docx(data: bytes, budget: Budget) -> Extraction:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    result = Extraction()
    for block in document.iter_inner_content():
        text = _table(block, result) if isinstance(block, Table) else _paragraph(block)
        if not text:
            continue
        result.sections.append(text)
        if not budget.take(text):
            result.complete = False
            break
    return result


def _paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text.strip()
    if not text:
        return ""
    style = _style_name(paragraph)
    heading = _HEADING.match(style)
    if heading:
        return "#" * int(heading.group(1)) + " " + text
    if style == "title":
        return "# " + text
    if style.startswith("list bullet"):
        return "- " + text
    if style.startswith("list number"):
        return "1. " + text
    return text


def _style_name(paragraph: Paragraph) -> str:
    try:
        style = paragraph.style
        return (style.name or "").strip().lower() if style is not None else ""
    except Exception:
        # A style id that points nowhere: the text still counts, only its mark is lost.
        return ""


def _table(table: Table, result: Extraction) -> str:
    try:
        rows = [_row_cells(row.cells) for row in table.rows]
    except Exception:
        # Grids Word itself would repair (spans past the row's end); keep the rest.
        result.remarks.append("a table that could not be read was left out")
        return ""
    return markdown_table([row for row in rows if any(row)])


def _row_cells(cells: Iterable[Any]) -> list[str]:
    out: list[str] = []
    previous = None
    for cell in cells:
        # python-docx repeats a horizontally merged cell once per column it spans: show it once.
        out.append("" if cell._tc is previous else cell_text(cell.text))
        previous = cell._tc
    return out


def read_pptx(data: bytes, budget: Budget) -> Extraction:
    from pptx import Presentation

    slides = list(Presentation(io.BytesIO(data)).slides)
    result = Extraction(unit="slide", units_total=len(slides))
    any_text = False
    for number, slide in enumerate(slides, start=1):
        section, has_text = _slide(number, slide)
        any_text = any_text or has_text
        result.sections.append(section)
        if not budget.take(section) and number < len(slides):
            result.complete = False
            break
    if not any_text:
        result.sections = []
        result.empty_hint = f"[no text: the presentation has {len(slides)} slides without text]"
    return result


def _slide(number: int, slide: Any) -> tuple[str, bool]:
    title_shape = slide.shapes.title
    title = title_shape.text_frame.text.strip() if title_shape is not None else ""
    lines = [f"--- slide {number}{': ' + title if title else ''} ---"]
    for shape in _in_reading_order(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        lines.extend(_shape_lines(shape))
    notes = _notes(slide)
    if notes:
        lines.append("Notes: " + notes)
    return "\n".join(lines), bool(title) or len(lines) > 1


def _in_reading_order(shapes: Iterable[Any]) -> list[Any]:
    return sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))


def _shape_lines(shape: Any) -> Iterator[str]:
    if getattr(shape, "shape_type", None) == _group_type():
        for inner in _in_reading_order(shape.shapes):
            yield from _shape_lines(inner)
        return
    if getattr(shape, "has_table", False):
        rows = [[cell_text(cell.text) for cell in row.cells] for row in shape.table.rows]
        table = markdown_table(rows)
        if table:
            yield table
        return
    if getattr(shape, "has_text_frame", False):
        for paragraph in shape.text_frame.paragraphs:
            text = paragraph.text.strip()
            if text:
                yield "  " * (paragraph.level or 0) + text


def _group_type() -> object:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    return MSO_SHAPE_TYPE.GROUP


def _notes(slide: Any) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return " ".join(frame.text.split()) if frame is not None else ""
