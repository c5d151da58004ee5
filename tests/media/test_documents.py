"""extract_text: each format's text as a model reads it, cut with a note saying what was cut."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.media import (
    CorruptMedia,
    EncryptedDocument,
    MediaTooLarge,
    UnsupportedMedia,
    extract_text,
)
from bot.media.sheets import MAX_COLUMNS

from .samples import docx_bytes, pdf_bytes, pptx_bytes, replace_member, xlsx_bytes, zip_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"
BIG = 1_000_000


# --- PDF ----------------------------------------------------------------------------------------


def test_a_pdf_is_read_page_by_page() -> None:
    data = pdf_bytes(["Quarterly revenue grew.", "Costs (in EUR) fell."])
    result = extract_text(data, file_name="report.pdf", max_chars=BIG)
    assert result.kind == "pdf" and not result.truncated and result.note is None
    assert "--- page 1 ---\nQuarterly revenue grew." in result.text
    assert "--- page 2 ---\nCosts (in EUR) fell." in result.text
    assert result.total_chars == len(result.text)


def test_a_long_pdf_is_cut_with_a_note_naming_the_pages() -> None:
    pages = [f"Page {n} " + "lorem ipsum " * 40 for n in range(1, 41)]
    result = extract_text(pdf_bytes(pages), file_name="long.pdf", max_chars=2000)
    assert result.truncated and len(result.text) <= 2000
    assert result.note is not None
    assert result.note.startswith(f"[cut: showing {len(result.text):,} of ")
    last_page = result.text.rsplit("--- page ", 1)[1].split(" ", 1)[0]
    assert result.note.endswith(f"; pages 1-{last_page} of 40]")
    assert result.text.startswith("--- page 1 ---")


def test_reading_stops_early_on_a_huge_document_and_says_the_total_is_a_floor() -> None:
    pages = ["word " * 400 for _ in range(200)]
    result = extract_text(pdf_bytes(pages), file_name="huge.pdf", max_chars=1000)
    assert not result.total_exact
    assert result.note is not None and "of more than " in result.note
    assert result.note.endswith("of 200]")


def test_a_pdf_with_a_password_is_refused_as_encrypted() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(["secret plans"]))))
    writer.encrypt("hunter2", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(EncryptedDocument) as caught:
        extract_text(out.getvalue(), file_name="plans.pdf", max_chars=BIG)
    assert caught.value.reason.startswith("The PDF is protected by a password")


def test_a_pdf_locked_only_against_copying_is_read() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(["open to read"]))))
    writer.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    assert "open to read" in extract_text(out.getvalue(), file_name="a.pdf", max_chars=BIG).text


def test_a_pdf_without_text_says_so() -> None:
    result = extract_text(pdf_bytes(["", ""]), file_name="scan.pdf", max_chars=BIG)
    assert result.text == "" and not result.truncated
    assert result.note is not None and "2 pages but no text layer" in result.note


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\n",
        b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage garbage",
        pdf_bytes(["fine"])[:200],
        pdf_bytes(["fine"]).replace(b"/Pages 2 0 R", b"/Pages 9 0 R"),
    ],
)
def test_a_broken_pdf_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptMedia) as caught:
        extract_text(data, file_name="x.pdf", max_chars=BIG)
    assert caught.value.reason.startswith("The PDF looks damaged")


def test_a_pdf_that_is_really_a_png_is_a_damaged_pdf() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
    with pytest.raises(CorruptMedia, match="it is really a PNG image"):
        extract_text(png, file_name="scan.pdf", max_chars=BIG)


@pytest.mark.parametrize("text", ["MZ Corp minutes", "ID3 tags explained", "BZh is not bzip"])
def test_text_that_starts_like_a_binary_format_is_still_text(text: str) -> None:
    assert extract_text(text.encode(), file_name="a.txt", max_chars=BIG).text == text


def test_the_content_wins_over_the_name() -> None:
    result = extract_text(pdf_bytes(["I am a PDF"]), file_name="notes.txt", max_chars=BIG)
    assert result.kind == "pdf" and "I am a PDF" in result.text


# --- Word ---------------------------------------------------------------------------------------


def test_a_word_document_keeps_headings_lists_and_tables_in_order() -> None:
    data = docx_bytes(
        [
            ("title", "Plan"),
            ("heading1", "Goals"),
            ("bullet", "ship it"),
            ("para", "Before the table."),
            ("table", [["Name", "Cost"], ["A|B", "3"], ["two\nlines", ""]]),
            ("para", "After the table."),
        ]
    )
    result = extract_text(data, file_name="plan.docx", max_chars=BIG)
    assert result.kind == "docx"
    assert result.text == (
        "# Plan\n\n# Goals\n\n- ship it\n\nBefore the table.\n\n"
        "| Name | Cost |\n| --- | --- |\n| A\\|B | 3 |\n| two<br>lines |  |\n\n"
        "After the table."
    )


def test_merged_cells_show_their_text_once() -> None:
    import docx

    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Spanning"
    table.cell(0, 2).text = "C"
    for c, text in enumerate(["1", "2", "3"]):
        table.cell(1, c).text = text
    out = io.BytesIO()
    document.save(out)
    result = extract_text(out.getvalue(), file_name="m.docx", max_chars=BIG)
    assert "| Spanning |  | C |" in result.text


def test_a_password_protected_word_file_is_refused_as_encrypted() -> None:
    data = (FIXTURES / "encrypted.docx").read_bytes()
    with pytest.raises(EncryptedDocument, match="The Word document is protected by a password"):
        extract_text(data, file_name="locked.docx", max_chars=BIG)


def test_an_old_binary_word_file_is_unsupported_with_a_way_out() -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 500 + "WordDocument".encode("utf-16-le")
    with pytest.raises(UnsupportedMedia) as caught:
        extract_text(ole + b"\x00\x00" + b"\x00" * 100, file_name="old.doc", max_chars=BIG)
    assert "old Word 97-2003 documents (.doc)" in caught.value.reason
    assert caught.value.reason.endswith("Save it as .docx.")


def test_a_zip_named_docx_without_a_document_is_corrupt() -> None:
    with pytest.raises(CorruptMedia, match="ZIP archive without the document"):
        extract_text(zip_bytes({"a.txt": b"hi"}), file_name="x.docx", max_chars=BIG)


def test_bytes_named_docx_that_are_no_zip_are_corrupt() -> None:
    with pytest.raises(CorruptMedia, match="Word document"):
        extract_text(b"just some words", file_name="x.docx", max_chars=BIG)


def test_a_docx_with_a_broken_document_part_is_corrupt() -> None:
    data = docx_bytes([("para", "hello")])
    broken = replace_member(data, "word/document.xml", b"<w:document><unclosed")
    with pytest.raises(CorruptMedia, match="Word document"):
        extract_text(broken, file_name="x.docx", max_chars=BIG)


# --- Excel and CSV ------------------------------------------------------------------------------


def test_every_sheet_of_a_workbook_becomes_a_markdown_table() -> None:
    data = xlsx_bytes(
        {
            "Sales": [
                ["Region", "Q1", "Share", "Booked", "Open"],
                ["North", 1200, 0.25, dt.datetime(2024, 3, 1), True],
                [None, None, None, None, None],
                ["South", 3.5, 1 / 3, dt.datetime(2024, 3, 1, 9, 30), False],
            ],
            "Notes": [["a|b"]],
            "Secret": [["x"]],
        },
        hidden=["Secret"],
    )
    result = extract_text(data, file_name="q1.xlsx", max_chars=BIG)
    assert result.kind == "xlsx"
    assert result.text == (
        "## Sheet: Sales\n\n"
        "| Region | Q1 | Share | Booked | Open |\n| --- | --- | --- | --- | --- |\n"
        "| North | 1200 | 0.25 | 2024-03-01 | TRUE |\n"
        "| South | 3.5 | 0.333333333333333 | 2024-03-01 09:30:00 | FALSE |\n\n"
        "## Sheet: Notes\n\n| a\\|b |\n| --- |\n\n"
        "## Sheet: Secret (hidden)\n\n| x |\n| --- |"
    )


def test_columns_past_the_cap_are_left_out_with_a_note() -> None:
    data = xlsx_bytes({"Wide": [list(range(MAX_COLUMNS + 5))]})
    result = extract_text(data, file_name="wide.xlsx", max_chars=BIG)
    assert result.truncated
    assert result.note == "[cut: sheet 'Wide': columns after the 100th left out]"
    assert result.text.count("|") == MAX_COLUMNS + 1 + (MAX_COLUMNS + 1)


def test_a_sheet_claiming_a_million_rows_by_16384_columns_is_read_quickly() -> None:
    data = xlsx_bytes({"S": [["a", "b"]]})
    claimed = replace_member(
        data,
        "xl/worksheets/sheet1.xml",
        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        b'<dimension ref="A1:XFD1048576"/><sheetData><row r="1">'
        b'<c r="A1" t="inlineStr"><is><t>first</t></is></c></row><row r="1048576">'
        b'<c r="A1048576" t="inlineStr"><is><t>last</t></is></c>'
        b'<c r="XFD1048576" t="inlineStr"><is><t>far</t></is></c></row>'
        b"</sheetData></worksheet>",
    )
    started = time.perf_counter()
    result = extract_text(claimed, file_name="s.xlsx", max_chars=BIG)
    # Generous for slow CI; padding every row to 16,384 cells would take minutes.
    assert time.perf_counter() - started < 20
    # Rows are read 101 cells wide whatever they hold, so a lone far-off cell goes unseen.
    assert result.text == "## Sheet: S\n\n| first |\n| --- |\n| last |"


def test_an_empty_workbook_says_so() -> None:
    result = extract_text(xlsx_bytes({"A": [], "B": []}), file_name="e.xlsx", max_chars=BIG)
    assert result.text == "" and result.note == "[no text: the workbook's 2 sheets are empty]"


def test_a_csv_becomes_a_markdown_table() -> None:
    data = b'name,note\nAda,"says ""hi"", then\nleaves"\nBob\n'
    result = extract_text(data, file_name="people.csv", max_chars=BIG)
    assert result.kind == "csv"
    assert result.text == (
        '| name | note |\n| --- | --- |\n| Ada | says "hi", then<br>leaves |\n| Bob |  |'
    )


def test_a_chinese_csv_from_excel_in_gb18030_is_decoded() -> None:
    text = "城市,人口\n北京,2189万\n上海,2487万\n"
    result = extract_text(text.encode("gb18030"), file_name="城市.csv", max_chars=BIG)
    assert result.text == "| 城市 | 人口 |\n| --- | --- |\n| 北京 | 2189万 |\n| 上海 | 2487万 |"


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"a;b\n1;2\n", "x.csv"),
        (b"a\tb\n1\t2\n", "x.tsv"),
        (b"a\tb\n1\t2\n", "x.csv"),
        (b"\xef\xbb\xbfa,b\n1,2\n", "x.csv"),
    ],
)
def test_csv_delimiters_and_a_bom_are_handled(data: bytes, name: str) -> None:
    result = extract_text(data, file_name=name, max_chars=BIG)
    assert result.text == "| a | b |\n| --- | --- |\n| 1 | 2 |"


def test_a_long_csv_is_cut_at_a_row_with_the_rows_shown() -> None:
    data = "id,value\n" + "".join(f"{n},{'x' * 20}\n" for n in range(5000))
    result = extract_text(data.encode(), file_name="big.csv", max_chars=1000)
    assert result.truncated and result.note is not None
    assert result.text.endswith("|")
    shown = result.text.count("\n") - 1
    assert f"; rows 1-{shown} of 5,000]" in result.note


def test_a_csv_that_is_no_table_is_shown_as_text() -> None:
    data = b'a,"' + b"x" * 200_000 + b'"\n'  # one field past the csv module's limit
    result = extract_text(data, file_name="odd.csv", max_chars=BIG)
    assert result.text.startswith('a,"xxx')
    assert result.note == "[cut: not a well-formed table, shown as text]"


# --- PowerPoint ---------------------------------------------------------------------------------


def test_a_presentation_is_read_slide_by_slide_with_tables_and_notes() -> None:
    data = pptx_bytes(
        [
            {"title": "Roadmap", "body": ["Q1: beta", "Q2: launch"], "notes": "Say it slowly."},
            {"title": "Numbers", "table": [["KPI", "Value"], ["Users", "1,000"]]},
        ]
    )
    result = extract_text(data, file_name="deck.pptx", max_chars=BIG)
    assert result.kind == "pptx"
    assert result.text == (
        "--- slide 1: Roadmap ---\nQ1: beta\nQ2: launch\nNotes: Say it slowly.\n\n"
        "--- slide 2: Numbers ---\n| KPI | Value |\n| --- | --- |\n| Users | 1,000 |"
    )


def test_a_long_presentation_is_cut_with_the_slides_shown() -> None:
    slides: list[dict[str, object]] = [
        {"title": f"S{n}", "body": ["text " * 50]} for n in range(1, 13)
    ]
    result = extract_text(pptx_bytes(slides), file_name="d.pptx", max_chars=700)
    assert result.note is not None and result.note.endswith("; slides 1-3 of 12]")


# --- text, Markdown, JSON, code -----------------------------------------------------------------


def test_markdown_is_kept_as_written() -> None:
    result = extract_text(b"# Title\n\n* item\n", file_name="README.md", max_chars=BIG)
    assert (result.kind, result.text) == ("markdown", "# Title\n\n* item")


def test_json_is_pretty_printed_in_a_fence() -> None:
    data = json.dumps({"name": "北京", "tags": [1, 2]}, separators=(",", ":")).encode()
    result = extract_text(data, file_name="city.json", max_chars=BIG)
    assert result.kind == "json"
    assert result.text == '```json\n{\n  "name": "北京",\n  "tags": [\n    1,\n    2\n  ]\n}\n```'


def test_json_that_does_not_parse_is_shown_as_written() -> None:
    result = extract_text(b'{"a": 1, // comment\n}', file_name="c.json", max_chars=BIG)
    assert result.text == '```json\n{"a": 1, // comment\n}\n```'


@pytest.mark.parametrize(
    ("name", "language"),
    [
        ("main.py", "python"),
        ("app.ts", "typescript"),
        ("lib.rs", "rust"),
        ("Main.java", "java"),
        ("q.sql", "sql"),
        ("ci.yml", "yaml"),
        ("Dockerfile", "dockerfile"),
        ("x.CPP", "cpp"),
    ],
)
def test_code_is_fenced_with_its_language(name: str, language: str) -> None:
    result = extract_text(b"print('hi')\n", file_name=name, max_chars=BIG)
    assert (result.kind, result.text) == ("code", f"```{language}\nprint('hi')\n```")


def test_a_fence_inside_code_does_not_end_the_block() -> None:
    result = extract_text(b'doc = """\n```\n"""\n', file_name="a.py", max_chars=BIG)
    assert result.text.startswith("````python\n") and result.text.endswith("\n````")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("Müller café".encode("cp1252"), "Müller café"),
        ("naïve “quotes”".encode("cp1252"), "naïve “quotes”"),
        ("会议纪要：下周一".encode("gb18030"), "会议纪要：下周一"),
        ("utf-8 ✓".encode(), "utf-8 ✓"),
        ("\ufeffwith BOM".encode(), "with BOM"),
        ("UTF-16 text".encode("utf-16"), "UTF-16 text"),
        (b"caf\x81", "caf\x81"),  # undefined in cp1252, cut short in GB18030: Latin-1
    ],
)
def test_text_encodings_are_guessed(data: bytes, expected: str) -> None:
    result = extract_text(data, file_name="notes.txt", max_chars=BIG)
    assert (result.kind, result.text) == ("text", expected)


def test_a_text_file_is_cut_near_a_line_break_with_the_note() -> None:
    data = "".join(f"line {n}\n" for n in range(10_000)).encode()
    result = extract_text(data, file_name="app.log", max_chars=20_000)
    assert result.truncated and len(result.text) <= 20_000
    assert data.decode().startswith(result.text + "\n")  # whole lines only
    assert result.note == f"[cut: showing {len(result.text):,} of {len(data) - 1:,} characters]"
    assert result.total_chars == len(data) - 1


def test_an_empty_file_says_so() -> None:
    result = extract_text(b"", file_name="empty.txt", max_chars=BIG)
    assert (result.text, result.note, result.truncated) == ("", "[the file is empty]", False)


# --- what is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "name", "named"),
    [
        (b"\x7fELF\x02\x01\x01" + b"\x00" * 50, "tool", "a program (ELF)"),
        (b"MZ\x90\x00" + b"\x00" * 50, "setup.exe", "a Windows program"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 50, "shot.png", "a PNG image"),
        (b"\x00\x01\x02\x03garbage\x00\x00", "data.bin", "binary .bin files"),
        (b"\x00\x01\x02\x03garbage\x00\x00", "notes.txt", "binary .txt files"),
        (zip_bytes({"a.txt": b"x"}), "files.zip", "ZIP archives"),
        (
            zip_bytes({"mimetype": b"application/vnd.oasis.opendocument.text"}),
            "a.odt",
            "OpenDocument files",
        ),
    ],
)
def test_unsupported_files_are_named_and_the_supported_ones_listed(
    data: bytes, name: str, named: str
) -> None:
    with pytest.raises(UnsupportedMedia) as caught:
        extract_text(data, file_name=name, max_chars=BIG)
    assert named in caught.value.reason
    assert "I can read PDF, Word (.docx), Excel (.xlsx, .csv), PowerPoint (.pptx)" in (
        caught.value.reason
    )


def test_a_zip_bomb_is_refused_by_its_declared_size() -> None:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", b"wordprocessingml.document.main+xml")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            chunk = b"\x00" * (1024 * 1024)
            for _ in range(600):  # 600 MiB of zeros, about 600 KiB packed
                member.write(chunk)
    with pytest.raises(MediaTooLarge) as caught:
        extract_text(out.getvalue(), file_name="bomb.docx", max_chars=BIG)
    assert caught.value.reason.startswith("The Word document unpacked is 600")
    assert caught.value.reason.endswith("the limit is 512 MiB.")


def test_nonsense_budgets_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        extract_text(b"x", file_name="a.txt", max_chars=0)


def test_importing_the_package_loads_none_of_the_heavy_libraries() -> None:
    code = (
        "import sys, bot.media; "
        "heavy = ('PIL', 'pypdf', 'docx', 'openpyxl', 'pptx', 'lxml'); "
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
