"""Sample files made in memory for the media tests: no binary fixtures to drift from the code.

PDFs are written by hand (the format is text plus a cross-reference table of byte offsets),
so the tests need nothing beyond what larkgate depends on; Office files come from the same
libraries that read them, which is what people's files look like when a program wrote them.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Sequence

from PIL import Image

__all__ = [
    "docx_bytes",
    "image_bytes",
    "pdf_bytes",
    "png_with_declared_size",
    "pptx_bytes",
    "replace_member",
    "xlsx_bytes",
    "zip_bytes",
]


def pdf_bytes(pages: Sequence[str]) -> bytes:
    """A PDF with one page per string, its lines set in Helvetica (Latin-1 text only)."""
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, filled in once the page numbers are known
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for text in pages:
        stream = _page_stream(text)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def _page_stream(text: str) -> bytes:
    ops = [b"BT /F1 11 Tf 72 740 Td 13 TL"]
    for line in text.splitlines() or [""]:
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops.append(b"(%s) Tj T*" % escaped.encode("cp1252"))
    ops.append(b"ET")
    return b"\n".join(ops)


def docx_bytes(blocks: Sequence[tuple[str, object]]) -> bytes:
    """A .docx from ``("heading1", text)``, ``("para", text)``, ``("bullet", text)``,
    ``("table", rows)`` blocks."""
    import docx

    document = docx.Document()
    for kind, value in blocks:
        if kind == "title":
            document.add_heading(str(value), 0)
        elif kind.startswith("heading"):
            document.add_heading(str(value), int(kind[-1]))
        elif kind == "bullet":
            document.add_paragraph(str(value), style="List Bullet")
        elif kind == "table":
            rows = value
            assert isinstance(rows, list)
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        else:
            document.add_paragraph(str(value))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes(sheets: dict[str, list[list[object]]], *, hidden: Sequence[str] = ()) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
        if title in hidden:
            sheet.sheet_state = "hidden"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def pptx_bytes(slides: Sequence[dict[str, object]]) -> bytes:
    """Slides from ``{"title": ..., "body": [...], "table": rows, "notes": ...}``."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    for spec in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = str(spec.get("title", ""))
        body = spec.get("body")
        if isinstance(body, list):
            slide.placeholders[1].text = "\n".join(body)
        rows = spec.get("table")
        if isinstance(rows, list):
            shape = slide.shapes.add_table(
                len(rows), len(rows[0]), Inches(1), Inches(5), Inches(6), Inches(1)
            )
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    shape.table.cell(r, c).text = cell
        if "notes" in spec:
            slide.notes_slide.notes_text_frame.text = str(spec["notes"])
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def replace_member(data: bytes, name: str, content: bytes) -> bytes:
    """``data`` (a ZIP) with the member ``name`` holding ``content`` instead."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            blob = content if member.filename == name else source.read(member)
            target.writestr(member.filename, blob)
    return out.getvalue()


def image_bytes(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def png_with_declared_size(width: int, height: int) -> bytes:
    """A tiny, valid-looking PNG whose header claims ``width`` × ``height`` pixels."""
    real = image_bytes(Image.new("L", (1, 1)), "PNG")
    # The IHDR chunk sits right after the 8-byte signature: length, type, 13 bytes, CRC.
    ihdr = bytearray(real[16:29])
    ihdr[0:8] = struct.pack(">II", width, height)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)) & 0xFFFFFFFF)
    return real[:16] + bytes(ihdr) + crc + real[33:]
