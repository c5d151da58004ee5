"""What a file is, from its first bytes and its name, before any parser sees it.

The content decides: a PDF named ``notes.txt`` is read as a PDF. The name only decides among
text formats (``.json`` pretty-printed, ``.py`` fenced as Python) and makes a mismatch an
error: ``report.pdf`` that is really a PNG is a damaged PDF, not a picture to guess at.

ZIP archives are looked into (their names and ``[Content_Types].xml`` only): Word, Excel and
PowerPoint are ZIPs of XML parts. Their declared unpacked sizes are checked here, and Python's
``zipfile`` never inflates a member past its declared size, so a ZIP bomb stops here. The
limits follow how the libraries read: python-docx and python-pptx load every part whole and
parse each XML part into a tree of about twenty times its size, so a part they load is at
most ``MAX_PART_BYTES`` and all of them ``MAX_LOADED_BYTES``; openpyxl streams worksheets,
which only the total bounds (``MAX_UNPACKED_BYTES``). Within these a real document reads in
the reader process's 448 MiB (``bot.media.limits``); a file past them is refused at once,
with the size and the limit, instead of running the process out of memory. Office's
password protection wraps the whole document in an OLE container with an ``EncryptedPackage``
stream, which is how we tell a locked .docx from an old binary .doc.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Literal

from bot.media.errors import (
    CorruptMedia,
    EncryptedDocument,
    MediaError,
    MediaTooLarge,
    UnsupportedMedia,
)

__all__ = [
    "KIND_NAMES",
    "MAX_LOADED_BYTES",
    "MAX_PART_BYTES",
    "MAX_UNPACKED_BYTES",
    "SUPPORTED_DOCUMENTS",
    "DocumentKind",
    "sniff",
    "suffix_of",
]

DocumentKind = Literal["pdf", "docx", "xlsx", "csv", "pptx", "text", "markdown", "json", "code"]

SUPPORTED_DOCUMENTS = (
    "PDF",
    "Word (.docx)",
    "Excel (.xlsx, .csv)",
    "PowerPoint (.pptx)",
    "text, Markdown, JSON and code files",
)
KIND_NAMES = {
    "pdf": "PDF",
    "docx": "Word document",
    "xlsx": "Excel workbook",
    "pptx": "PowerPoint presentation",
    "csv": "CSV file",
    "text": "text file",
    "markdown": "Markdown file",
    "json": "JSON file",
    "code": "code file",
}

# Measured in a reader process: a 16 MiB document.xml of short paragraphs (the densest
# tree) is read within 448 MiB; 32 MiB is not. A 1,000-page report's is under 8 MiB.
MAX_PART_BYTES = 16 * 1024 * 1024
MAX_LOADED_BYTES = 128 * 1024 * 1024
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
# Parts openpyxl streams in read-only mode; every other part is loaded whole.
_STREAMED_PART = re.compile(r"^xl/worksheets/[^/]+\.xml$")
# Embedded media the Office libraries keep as bytes and never parse.
_MEDIA_SUFFIXES = (
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".emf", ".wmf", ".wdp",
    ".mp4", ".mov", ".avi", ".wmv", ".mp3", ".wav", ".m4a", ".ttf", ".odttf", ".fntdata",
)  # fmt: skip
_MAX_MEMBERS = 20_000
_MAX_CONTENT_TYPES = 1024 * 1024

_BY_SUFFIX: dict[str, DocumentKind] = {
    "pdf": "pdf", "docx": "docx", "xlsx": "xlsx", "xlsm": "xlsx", "pptx": "pptx",
    "pptm": "pptx", "csv": "csv", "tsv": "csv", "md": "markdown", "markdown": "markdown",
    "mdx": "markdown", "mkd": "markdown", "json": "json", "geojson": "json",
    "txt": "text", "text": "text", "log": "text", "rst": "text", "srt": "text", "vtt": "text",
}  # fmt: skip
_OOXML_TYPES: tuple[tuple[str, DocumentKind], ...] = (
    ("wordprocessingml.document.main+xml", "docx"),
    ("spreadsheetml.sheet.main+xml", "xlsx"),
    ("ms-excel.sheet.macroEnabled.main+xml", "xlsx"),
    ("spreadsheetml.template.main+xml", "xlsx"),
    ("presentationml.presentation.main+xml", "pptx"),
    ("ms-powerpoint.presentation.macroEnabled.main+xml", "pptx"),
)
_OOXML_OTHERS = (
    ("ms-excel.sheet.binary", "Excel binary workbooks (.xlsb)", "Save it as .xlsx."),
    ("wordprocessingml", "Word templates (.dotx)", "Save it as .docx."),
    ("ms-word", "macro-enabled Word files (.docm)", "Save it as .docx."),
    ("presentationml", "PowerPoint shows and templates (.ppsx, .potx)", "Save it as .pptx."),
    ("ms-powerpoint", "this kind of PowerPoint file", "Save it as .pptx."),
)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x7fELF", "a program (ELF)"),
    (b"MZ", "a Windows program"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"{\\rtf", "a Rich Text file (.rtf)"),
    (b"ID3", "an MP3 file"),
    (b"OggS", "an Ogg audio file"),
    (b"fLaC", "a FLAC audio file"),
    (b"#!AMR", "an AMR audio file"),
    (b"\x1a\x45\xdf\xa3", "a video (Matroska/WebM)"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
_LEGACY_OLE = (
    ("WordDocument", "old Word 97-2003 documents (.doc)", "Save it as .docx."),
    ("Workbook", "old Excel 97-2003 workbooks (.xls)", "Save it as .xlsx."),
    ("Book", "old Excel workbooks (.xls)", "Save it as .xlsx."),
    ("PowerPoint Document", "old PowerPoint 97-2003 files (.ppt)", "Save it as .pptx."),
)
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_BINARY_SUFFIXES = {"pdf", "docx", "xlsx", "xlsm", "pptx", "pptm"}
_BINARY_KINDS = {"pdf", "docx", "xlsx", "pptx"}


def suffix_of(file_name: str) -> str:
    """``"Report.Final.PDF"`` → ``"pdf"``; ``"Dockerfile"`` → ``"dockerfile"``."""
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1].strip().lower()
    stem, dot, suffix = base.rpartition(".")
    return suffix if dot and stem else base.lstrip(".")


def sniff(data: bytes, suffix: str) -> DocumentKind | None:
    """The document kind of a binary format, or None when the bytes should be text.

    Raises the typed errors for what is recognisably not readable.
    """
    named = _BY_SUFFIX.get(suffix)
    claimed = KIND_NAMES.get(named or "", "file")
    # PDF readers accept the header anywhere in the first KiB; junk before it is common.
    if b"%PDF-" in data[:1024]:
        return "pdf"
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return _ooxml(data, claimed if named in _BINARY_KINDS else None)
    if data.startswith(_OLE_MAGIC):
        _ole(data, suffix)
    found = _binary_magic(data)
    if found and suffix in _BINARY_SUFFIXES:
        raise CorruptMedia(claimed, f"it is really {found}")
    if found:
        raise UnsupportedMedia(found, SUPPORTED_DOCUMENTS)
    if suffix in _BINARY_SUFFIXES:
        raise CorruptMedia(claimed, "its contents do not match its name")
    return None


def _binary_magic(data: bytes) -> str:
    head = data[:32]
    # "MZ", "ID3", "BZh"... also begin ordinary sentences: those need a NUL byte nearby.
    binary = b"\x00" in data[:64]
    for magic, name in _MAGIC:
        if head.startswith(magic) and (binary or len(magic) >= 5 or not magic.isascii()):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "a WAV audio file"
    if head[4:8] == b"ftyp":
        return (
            "an HEIC image"
            if head[8:12] in (b"heic", b"heix", b"mif1")
            else "a video or audio file"
        )
    return ""


def _ooxml(data: bytes, claimed: str | None) -> DocumentKind:
    """docx, xlsx or pptx by the archive's declared content types; anything else refused."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
        _check_unpacked(members, claimed)
        types = _member_text(archive, "[Content_Types].xml")
        opendocument = "opendocument" in _member_text(archive, "mimetype")
    except (MediaError, MemoryError):
        raise
    except Exception as exc:
        # zipfile raises BadZipFile, but also NotImplementedError (an unknown compression),
        # RuntimeError (an encrypted member), OSError, EOFError, ValueError: all mean broken.
        raise CorruptMedia(claimed or "ZIP archive", "the archive is broken") from exc
    for marker, kind in _OOXML_TYPES:
        if marker in types:
            return kind
    for marker, name, hint in _OOXML_OTHERS:
        if marker in types:
            raise UnsupportedMedia(name, SUPPORTED_DOCUMENTS, hint=hint)
    if claimed:
        raise CorruptMedia(claimed, "it is a ZIP archive without the document inside")
    if opendocument:
        raise UnsupportedMedia("OpenDocument files (.odt, .ods, .odp)", SUPPORTED_DOCUMENTS)
    raise UnsupportedMedia("ZIP archives", SUPPORTED_DOCUMENTS, hint="Send the files inside.")


def _check_unpacked(members: list[zipfile.ZipInfo], claimed: str | None) -> None:
    what = f"The {claimed or 'archive'}"
    if len(members) > _MAX_MEMBERS:
        raise MediaTooLarge(len(members), _MAX_MEMBERS, what=f"{what}'s part count", unit="parts")
    unpacked = sum(member.file_size for member in members)
    if unpacked > MAX_UNPACKED_BYTES:
        raise MediaTooLarge(unpacked, MAX_UNPACKED_BYTES, what=f"{what} unpacked")
    loaded = [member for member in members if not _STREAMED_PART.match(member.filename)]
    for member in loaded:
        if member.file_size > MAX_PART_BYTES and not _is_media(member.filename):
            raise MediaTooLarge(
                member.file_size,
                MAX_PART_BYTES,
                what=f"{what}'s part {_shown(member.filename)}, unpacked,",
            )
    total = sum(member.file_size for member in loaded)
    if total > MAX_LOADED_BYTES:
        raise MediaTooLarge(total, MAX_LOADED_BYTES, what=f"{what} unpacked")


def _is_media(name: str) -> bool:
    return name.lower().endswith(_MEDIA_SUFFIXES)


def _shown(name: str) -> str:
    """A part's name as the person may read it: printable, short."""
    clean = "".join(c if c.isprintable() else "?" for c in name)
    return clean if len(clean) <= 60 else clean[:57] + "..."


def _member_text(archive: zipfile.ZipFile, name: str) -> str:
    """A small member's text ("" when absent or too big to be what we look for)."""
    try:
        member = archive.getinfo(name)
    except KeyError:
        return ""
    if member.file_size > _MAX_CONTENT_TYPES:
        return ""
    return archive.read(member).decode("utf-8", "replace")


def _ole(data: bytes, suffix: str) -> None:
    """An OLE container: a password-locked Office file, or an old binary one. Always raises."""
    if "EncryptedPackage".encode("utf-16-le") in data:
        raise EncryptedDocument(KIND_NAMES.get(_BY_SUFFIX.get(suffix, ""), "Office file"))
    for stream, name, hint in _LEGACY_OLE:
        if stream.encode("utf-16-le") + b"\x00\x00" in data:
            raise UnsupportedMedia(name, SUPPORTED_DOCUMENTS, hint=hint)
    raise UnsupportedMedia("old binary Office files", SUPPORTED_DOCUMENTS)
