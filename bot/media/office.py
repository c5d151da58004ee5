"""Word (.docx) and PowerPoint (.pptx) text, with python-docx and python-pptx.

Both read the document in order: Word paragraphs and tables as they interleave in the body
(headings and list items keep their Markdown marks), PowerPoint slide by slide, shapes top to
bottom then left to right as a reader's eye goes, tables as Markdown, speaker notes last.
lxml parses the XML with entity resolution off (both libraries set that), so an entity bomb
expands to nothing; the archive's unpacked size and each part's are bounded before we get
here (``sniff``). Word tables are read from the XML directly (``_table``): python-docx's
cell grid costs memory per spanned column and time per merged cell, which a small file can
make unbounded. Both run in a reader process (``reader_pool``), never in the bot's.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from typing import Any

from bot.media.extraction import Budget, Extraction, cell_text, markdown_table

# As for spreadsheets: wider than this is unreadable for a model and a person alike.
MAX_COLUMNS = 100
# Rows of one PowerPoint table: a slide is read whole, so its tables are bounded here.
MAX_SLIDE_TABLE_ROWS = 500

__all__ = ["read_docx", "read_pptx"]

_HEADING = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def read_docx(data: bytes, budget: Budget) -> Extraction:
    import docx
    from docx.oxml.ns import qn

    document = docx.Document(io.BytesIO(data))
    styles = _style_names(document)
    result = Extraction()
    paragraph_tag, table_tag = qn("w:p"), qn("w:tbl")
    for block in document.element.body.iterchildren():
        if block.tag == table_tag:
            text = _table(block, budget, result)
        elif block.tag == paragraph_tag:
            text = _paragraph(block, styles)
        else:
            continue
        if not text:
            continue
        result.sections.append(text)
        if not budget.take(text) or not result.complete:
            result.complete = False
            break
    return result


def _style_names(document: Any) -> dict[str, str]:
    """Paragraph style ids to their lower-case names, read once: python-docx looks a
    paragraph's style up by scanning every style, per paragraph."""
    from docx.oxml.ns import qn

    names: dict[str, str] = {}
    try:
        styles = document.part.styles.element
    except MemoryError:
        raise
    except Exception:
        return names  # no styles part: every paragraph is plain text
    name_tag, id_attribute, value = qn("w:name"), qn("w:styleId"), qn("w:val")
    for style in styles.iterchildren(qn("w:style")):
        name = style.find(name_tag)
        style_id = style.get(id_attribute)
        if style_id and name is not None:
            names[style_id] = (name.get(value) or "").strip().lower()
    return names


def _paragraph(paragraph: Any, styles: dict[str, str]) -> str:
    text: str = paragraph.text.strip()
    if not text:
        return ""
    style = styles.get(paragraph.style or "", "")
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


def _table(table: Any, budget: Budget, result: Extraction) -> str:
    """A Word table as Markdown, read row by row from the XML and counted against the
    budget as it goes.

    Not python-docx's ``row.cells``: it yields a cell once per grid column it spans (a
    span of 2^31-1 is valid XML) and walks up every vertical merge from each cell, which
    grows faster than the table. Here a cell is read once, its span only pads the row up to
    ``MAX_COLUMNS``, and a merged-on cell is just the empty cell the XML holds.
    """
    rows: list[list[str]] = []
    wide = False
    for row in table.tr_lst:
        cells, cut = _row(row)
        wide = wide or cut
        if not any(cells):
            if budget.expired:  # a million empty rows must end too
                result.complete = False
                break
            continue
        rows.append(cells)
        if not budget.take(" | ".join(cells)):
            result.complete = False
            break
    if wide:
        result.remarks.append(f"table columns after the {MAX_COLUMNS}th left out")
    return markdown_table(_trim_columns(rows))


def _row(row: Any) -> tuple[list[str], bool]:
    """A row's cells, at most ``MAX_COLUMNS``, and whether text past them was left out."""
    cells: list[str] = []
    for cell in row.tc_lst:
        text = cell_text("\n".join(p.text for p in cell.p_lst))
        if len(cells) >= MAX_COLUMNS:
            if text:
                return cells, True
            continue
        cells.append(text)
        # A spanning cell keeps the columns under it aligned, up to the cap.
        cells.extend([""] * min(_span(cell) - 1, MAX_COLUMNS - len(cells)))
    return cells, False


def _trim_columns(rows: list[list[str]]) -> list[list[str]]:
    """Without the empty columns at the right that spans padded."""
    used = max((max((i for i, c in enumerate(row) if c), default=-1) for row in rows), default=-1)
    return [row[: used + 1] for row in rows]


def _span(cell: Any) -> int:
    try:
        return max(1, int(cell.grid_span))
    except (ValueError, TypeError):
        return 1  # a span Word would repair: the cell still counts once


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
        rows = [
            [cell_text(cell.text) for cell, _ in zip(row.cells, range(MAX_COLUMNS), strict=False)]
            for row, _ in zip(shape.table.rows, range(MAX_SLIDE_TABLE_ROWS), strict=False)
        ]
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
