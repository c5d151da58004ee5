"""Text files: decoding bytes of unknown encoding, JSON made readable, code fenced.

Decoding tries, in order: a byte-order mark (UTF-8, UTF-16, UTF-32), strict UTF-8, then
GB18030 when the bytes look like GB2312-range Chinese, then Windows-1252, then GB18030 again,
then Latin-1, which never fails. The GB check comes before Windows-1252 because Chinese text
from Windows tools (Excel's CSV export on a Chinese system) is GB-encoded and would decode as
Windows-1252 mojibake; it is guarded because ``Müller`` in Windows-1252 is also valid GB18030.
"""

from __future__ import annotations

import codecs
import json
import re

from bot.media.extraction import Extraction

__all__ = ["CODE_LANGUAGES", "decode_text", "fenced", "looks_binary", "read_json"]

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_HIGH = re.compile(rb"[\x80-\xff]")
_GB_PAIR = re.compile(rb"[\xa1-\xf7][\xa1-\xfe]")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_SAMPLE = 65536

# Extension → the language name a Markdown fence takes.
CODE_LANGUAGES = {
    "py": "python", "pyi": "python", "js": "javascript", "mjs": "javascript",
    "cjs": "javascript", "jsx": "jsx", "ts": "typescript", "tsx": "tsx", "go": "go",
    "rs": "rust", "java": "java", "c": "c", "h": "c", "cpp": "cpp", "cc": "cpp", "cxx": "cpp",
    "hpp": "cpp", "hh": "cpp", "cs": "csharp", "rb": "ruby", "php": "php", "sh": "bash",
    "bash": "bash", "zsh": "zsh", "fish": "fish", "ps1": "powershell", "bat": "bat",
    "cmd": "bat", "sql": "sql", "yaml": "yaml", "yml": "yaml", "toml": "toml", "ini": "ini",
    "cfg": "ini", "conf": "ini", "properties": "properties", "env": "bash", "xml": "xml",
    "html": "html", "htm": "html", "css": "css", "scss": "scss", "less": "less",
    "kt": "kotlin", "kts": "kotlin", "swift": "swift", "scala": "scala", "lua": "lua",
    "pl": "perl", "r": "r", "dart": "dart", "vue": "vue", "svelte": "svelte",
    "proto": "protobuf", "graphql": "graphql", "gql": "graphql", "tf": "hcl", "hcl": "hcl",
    "gradle": "groovy", "groovy": "groovy", "ex": "elixir", "exs": "elixir", "erl": "erlang",
    "hs": "haskell", "ml": "ocaml", "clj": "clojure", "jl": "julia", "m": "objectivec",
    "mm": "objectivec", "vb": "vbnet", "asm": "asm", "s": "asm", "cmake": "cmake",
    "dockerfile": "dockerfile", "makefile": "makefile", "mk": "makefile", "diff": "diff",
    "patch": "diff", "tex": "latex", "svg": "xml", "ipynb": "json", "sol": "solidity",
    "zig": "zig", "nim": "nim", "v": "verilog", "sv": "verilog", "vhd": "vhdl",
}  # fmt: skip


def decode_text(data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break  # a BOM on bytes that are not that encoding: try the rest
    attempts = ["utf-8"]
    if _looks_gb(data[:_SAMPLE]):
        attempts.append("gb18030")
    attempts += ["cp1252", "gb18030"]
    for encoding in attempts:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _looks_gb(sample: bytes) -> bool:
    """Most high bytes pair up as GB2312 characters (both bytes in 0xA1-0xFE)."""
    high = len(_HIGH.findall(sample))
    if high == 0:
        return False
    return 2 * len(_GB_PAIR.findall(sample)) >= 0.9 * high


def looks_binary(text: str) -> bool:
    """Control characters (NUL and the like) in more than 1% of the start: not a text file."""
    sample = text[:_SAMPLE]
    if "\x00" in sample:
        return True
    return len(_CONTROL.findall(sample)) > max(1, len(sample) // 100)


def read_json(text: str) -> Extraction:
    """Pretty-printed when it parses; otherwise as written (a JSON with comments, say)."""
    try:
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return Extraction(sections=[fenced(text, "json")] if text.strip() else [])
    return Extraction(sections=[fenced(pretty, "json")])


def fenced(text: str, language: str) -> str:
    """A Markdown code block, with a fence longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"
