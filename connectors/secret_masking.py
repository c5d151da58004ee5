"""Masking known secret values in text that the model, a chat or an operator will read.

A connector that holds credentials (an API key header, an MCP server's environment, a
database password) must not let them reach a tool observation, because an observation
goes into the model's context and from there into the chat. A backend may echo what it
was sent, as it is or encoded, so a secret is matched character by character in any
mix of the forms text usually carries it in: literal, percent-encoded (either case of
hex, ``+`` for a space), JSON-escaped (``\\u00e9``, ``\\/``, ``\\"``) and HTML character
references (``&#97;``, ``&#x61;``, ``&amp;``).

Text cut to a length may end in the first characters of a secret; :meth:`SecretMasker.mask`
with ``cut=True`` masks such a tail too. Values shorter than :data:`MIN_SECRET_CHARS` are
not masked by value: masking ``1`` or ``true`` everywhere would garble every line, and a
value that short protects nothing anyway.

The log redactor (``bot/logs.py``) uses the same masker, so a log line and an
observation hide the same things.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections.abc import Iterable

MASK = "***"
MIN_SECRET_CHARS = 6
# The longest encoded form of one character (``\\ud83d\\ude00``, ``%F0%9F%98%80``).
_LONGEST_ATOM = 12
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "bot", "apikey", "api-key"})
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f"} | {
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_HTML_NAMED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}


def secret_parts(value: str) -> set[str]:
    """``value`` and the parts of it that are secret on their own.

    A backend may echo only the credential of ``Bearer <token>``, the decoded
    ``user:password`` of ``Basic <base64>``, or the password of a URL's user info.
    """
    parts = {value}
    scheme, _, credential = value.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() in _AUTH_SCHEMES and credential:
        parts.add(credential)
        if scheme.lower() == "basic":
            parts |= _basic_parts(credential)
    if "://" in value:
        parts |= _url_password(value)
    return {part for part in parts if len(part) >= MIN_SECRET_CHARS}


def _basic_parts(credential: str) -> set[str]:
    try:
        decoded = base64.b64decode(credential, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return set()
    _, _, password = decoded.partition(":")
    return {decoded, password}


def _url_password(value: str) -> set[str]:
    try:
        raw = urllib.parse.urlsplit(value.strip()).password
    except ValueError:
        return set()
    if not raw:
        return set()
    return {raw, urllib.parse.unquote(raw)}


class SecretMasker:
    """Replaces every occurrence of the given secrets (and their encoded forms) by ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values: set[str] = set()
        for secret in secrets:
            if secret:
                values |= secret_parts(secret)
        # Longest first: a secret that contains another is masked whole.
        ordered = sorted(values, key=lambda v: (-len(v), v))
        self._atoms = [[_char_pattern(char) for char in value] for value in ordered]
        self._pattern = (
            re.compile("|".join("(?:" + "".join(atoms) + ")" for atoms in self._atoms))
            if ordered
            else None
        )
        self._compiled_atoms: list[list[re.Pattern[str]]] | None = None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str, *, cut: bool = False) -> str:
        """``text`` with the secrets masked; with ``cut``, also a secret's start at its end."""
        if self._pattern is None or not text:
            return text
        text = self._pattern.sub(MASK, text)
        return self._mask_tail(text) if cut else text

    def _mask_tail(self, text: str) -> str:
        """Text that was cut short may end in the first characters of a secret."""
        if self._compiled_atoms is None:
            self._compiled_atoms = [[re.compile(a) for a in atoms] for atoms in self._atoms]
        earliest = len(text)
        for atoms in self._compiled_atoms:
            start = max(0, len(text) - len(atoms) * _LONGEST_ATOM)
            for position in range(start, len(text) - MIN_SECRET_CHARS + 1):
                if position < earliest and _is_secret_start(atoms, text, position):
                    earliest = position
                    break
        return text if earliest == len(text) else text[:earliest] + MASK


def _is_secret_start(atoms: list[re.Pattern[str]], text: str, position: int) -> bool:
    """Whether ``text[position:]`` is the beginning (at least MIN_SECRET_CHARS) of a secret."""
    matched = 0
    for atom in atoms:
        if position == len(text):
            return matched >= MIN_SECRET_CHARS
        found = atom.match(text, position)
        if found is None:
            # Cut inside one character's encoded form (e.g. "%6" of "%61").
            rest = text[position:]
            return matched >= MIN_SECRET_CHARS and len(rest) < _LONGEST_ATOM and rest[0] in "%\\&"
        position, matched = found.end(), matched + 1
    return False  # the whole secret, and more after it: not a tail (mask() took it)


def _char_pattern(char: str) -> str:
    """A regular expression for one character of a secret, in any of its encoded forms."""
    code = ord(char)
    forms = [re.escape(char)]
    forms.append("".join("%" + _hex(byte, 2) for byte in char.encode("utf-8")))
    # JSON escapes; one or more backslashes, as JSON text inside a JSON string doubles them.
    if code > 0xFFFF:  # JSON spells it as a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(r"\\+u" + _hex(high, 4) + r"\\+u" + _hex(low, 4))
    else:
        forms.append(r"\\+u" + _hex(code, 4))
    if char in _JSON_SHORT:
        forms.append(r"\\+" + re.escape(_JSON_SHORT[char][1:]))
    if char in _HTML_NAMED:
        forms.append(re.escape(_HTML_NAMED[char]))
    forms.append(rf"&\#(?:0*{code}|(?i:x)0*{_hex(code, 1)});")
    if char == " ":
        forms.append(r"\+")
    return "(?:" + "|".join(forms) + ")"


def _hex(number: int, width: int) -> str:
    return "(?i:" + format(number, f"0{width}x") + ")"


__all__ = ["MASK", "MIN_SECRET_CHARS", "SecretMasker", "secret_parts"]
