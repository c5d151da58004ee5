"""Small files that once took the bot down (issue 32), made the way an attacker makes them.

Each is well within the 20 MiB download limit and built in a few hundred milliseconds by
streaming (a 200 MiB part is never held in memory here). The tests send them through the
real path and the bench (``bench/hostile_files.py``) measures what reading them costs.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_RELS_TYPE = "http://schemas.openxmlformats.org/package/2006/relationships"
_OFFICE_DOC = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
_DOCX_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
_XLSX_MAIN = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_CHUNK = 1 << 20


def _content_types(main_part: str, main_type: str, extra: str = "") -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
        'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/{main_part}" ContentType="{main_type}"/>{extra}</Types>'
    )


def _root_rels(main_part: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships '
        f'xmlns="{_RELS_TYPE}"><Relationship Id="rId1" Type="{_OFFICE_DOC}" '
        f'Target="{main_part}"/></Relationships>'
    )


def _write_streamed(archive: zipfile.ZipFile, name: str, chunks: Iterator[bytes]) -> None:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with archive.open(info, "w", force_zip64=True) as member:
        for chunk in chunks:
            member.write(chunk)


def _docx(body: Callable[[], Iterator[bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", _content_types("word/document.xml", _DOCX_MAIN))
        archive.writestr("_rels/.rels", _root_rels("word/document.xml"))
        head = (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            f'<w:document xmlns:w="{_W}" xmlns:r="{_R}"><w:body>'
        )

        def chunks() -> Iterator[bytes]:
            yield head.encode()
            yield from body()
            yield b"</w:body></w:document>"

        _write_streamed(archive, "word/document.xml", chunks())
    return out.getvalue()


def _paragraph(text: str) -> bytes:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>".encode()


def docx_with_a_huge_grid_span(span: int = 100_000_000) -> bytes:
    """One table cell spanning ``span`` grid columns (2^31-1 is a valid value)."""

    def body() -> Iterator[bytes]:
        yield _paragraph("Quarterly figures")
        cell = (
            f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>'
            "<w:p><w:r><w:t>wide</w:t></w:r></w:p></w:tc>"
        )
        yield f"<w:tbl><w:tblGrid><w:gridCol/></w:tblGrid><w:tr>{cell}</w:tr></w:tbl>".encode()

    return _docx(body)


def docx_whose_text_part_unpacks_to(size: int = 200 * 1024 * 1024) -> bytes:
    """A .docx whose ``document.xml`` inflates to ``size`` bytes of paragraphs."""
    block = _paragraph("lorem ipsum dolor sit amet") * 4096

    def body() -> Iterator[bytes]:
        written = 0
        while written < size:
            yield block
            written += len(block)

    return _docx(body)


def docx_of_vertically_merged_cells(rows: int = 400, columns: int = 40) -> bytes:
    """A table whose every cell below the first row continues a vertical merge: python-docx
    walks up the merge for each cell, so reading it grows faster than its size."""

    def body() -> Iterator[bytes]:
        yield b"<w:tbl><w:tblGrid>" + b"<w:gridCol/>" * columns + b"</w:tblGrid>"
        first = '<w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p/></w:tc>'
        rest = "<w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>"
        yield f"<w:tr>{first * columns}</w:tr>".encode()
        row = f"<w:tr>{rest * columns}</w:tr>".encode()
        for _ in range(rows - 1):
            yield row
        yield b"</w:tbl>"

    return _docx(body)


def xlsx_with_shared_strings_of(size: int = 200 * 1024 * 1024) -> bytes:
    """A workbook of one cell whose shared-strings table inflates to ``size`` bytes."""
    out = io.BytesIO()
    types = (
        '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.'
        'openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.'
        'openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
    )
    rels = (
        f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_RELS_TYPE}">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/worksheet" Target="worksheets/sheet1.xml"/>'
        '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>'
    )
    workbook = (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_S}" xmlns:r="{_R}">'
        '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    sheet = (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_S}"><sheetData>'
        '<row r="1"><c r="A1" t="s"><v>0</v></c></row></sheetData></worksheet>'
    )
    item = b"<si><t>x</t></si>"
    block = item * (_CHUNK // len(item))

    def strings() -> Iterator[bytes]:
        yield f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_S}">'.encode()
        written = 0
        while written < size:
            yield block
            written += len(block)
        yield b"</sst>"

    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            "[Content_Types].xml", _content_types("xl/workbook.xml", _XLSX_MAIN, types)
        )
        archive.writestr("_rels/.rels", _root_rels("xl/workbook.xml"))
        archive.writestr("xl/workbook.xml", workbook)
        archive.writestr("xl/_rels/workbook.xml.rels", rels)
        archive.writestr("xl/worksheets/sheet1.xml", sheet)
        _write_streamed(archive, "xl/sharedStrings.xml", strings())
    return out.getvalue()


def pdf_whose_pages_share_an_inflating_stream(
    pages: int = 40, inflated: int = 64 * 1024 * 1024
) -> bytes:
    """Every page's content is one Flate stream that inflates to ``inflated`` bytes of text
    operators that show nothing: each page is parsed whole and yields no text, so the
    character budget never stops the reading."""
    import zlib

    compressor = zlib.compressobj(9)
    operators = b"BT /F1 12 Tf 0 0 Td () Tj ET\n" * 65536
    parts = []
    written = 0
    while written < inflated:
        parts.append(compressor.compress(operators))
        written += len(operators)
    parts.append(compressor.flush())
    stream = b"".join(parts)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> "
        b">> >>"
        for _ in range(pages)
    ]
    return _pdf(objects)


def pdf_of_slow_pages(pages: int = 20, tokens: int = 250_000) -> bytes:
    """Pages of their own content streams, each ``tokens`` operators that show nothing:
    about a second of parsing a page, so reading them all takes longer than any limit."""
    import zlib

    line = b"BT /F1 12 Tf 0 0 Td () Tj ET\n"  # 9 tokens
    stream = zlib.compress(line * (tokens // 9), 9)
    font = b"<< /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >>"
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
    ]
    for i in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources %s >>" % (4 + 2 * i, font)
        )
        body = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream)
        objects.append(body + stream + b"\nendstream")
    return _pdf(objects)


def _pdf(objects: list[bytes]) -> bytes:
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    out.write(trailer % (len(objects) + 1, xref))
    return out.getvalue()


# name → (file name, maker): what the tests and the bench send.
HOSTILE_FILES: dict[str, tuple[str, Callable[[], bytes]]] = {
    "grid-span": ("wide.docx", docx_with_a_huge_grid_span),
    "docx-200MiB-part": ("long.docx", docx_whose_text_part_unpacks_to),
    "vertical-merges": ("merged.docx", docx_of_vertically_merged_cells),
    "xlsx-200MiB-strings": ("strings.xlsx", xlsx_with_shared_strings_of),
    "pdf-shared-stream": ("pages.pdf", pdf_whose_pages_share_an_inflating_stream),
}
