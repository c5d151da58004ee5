"""Flattening Feishu rich content into plain text: ``post`` messages and received cards.

Both arrive as JSON we do not control, in several shapes, with ``null`` where strings are
expected. Nothing here raises on odd input: unknown tags contribute their ``text`` if they
have one, anything else is skipped.

Post shapes handled (after ``message.content`` is decoded):

- flat ``{"title": ..., "content": [[elem, ...], ...]}`` (what a received post looks like);
- locale-wrapped ``{"zh_cn": {...}}`` / ``{"en_us": {...}}``: zh_cn, then en_us, then ja_jp,
  then the first value that looks like a post body;
- an outer ``{"post": {...}}`` wrapper around either of the above;
- ``content_v2`` beside (or instead of) ``content``: a non-empty ``content_v2`` wins.

Rendering: the title is the first line, then one line per paragraph; ``text`` as is; ``a`` as
``text (url)``; ``at`` through the caller's ``render_at``; ``emotion`` as ``:TYPE:``;
``code_block`` fenced on its own lines; ``hr`` as ``---``; ``img`` / ``media`` as ``[image]`` /
``[video]`` markers and reported as attachments; ``md`` kept as markdown, except that
``![..](image_key)`` becomes ``[image]`` (an attachment) and ``data:`` URIs become ``[image]``.

``flatten_post_json`` reads ``content`` as the message APIs return it (a JSON string), and
``at_as_written`` renders ``at`` tags for callers that have no mentions book of their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

__all__ = [
    "REMOVED",
    "Atom",
    "FlatContent",
    "Inline",
    "at_as_written",
    "flatten_card",
    "flatten_post",
    "flatten_post_json",
    "join_inline",
]

_LOCALES = ("zh_cn", "en_us", "ja_jp")
_MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\(([^)\s]*)\)")
_CARD_TEXT_KEYS = frozenset({"content", "text", "title", "subtitle"})
_CARD_NESTED_JSON_KEYS = frozenset({"json_card", "user_dsl"})
# Parts of a card that hold no text a reader sees (or hold ids, URLs and callback payloads).
_CARD_SKIP_KEYS = frozenset(
    {"value", "behaviors", "url", "multi_url", "href", "confirm", "config", "style", "icon",
     "ud_icon", "image_key", "img_key", "element_id", "tag", "schema"}
)  # fmt: skip
_CARD_MAX_DEPTH = 40
_CARD_MAX_LINES = 200
_CARD_MAX_CHARS = 4000


class _Removed:
    """Marks an inline piece that was taken out (the bot's own mention)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED = _Removed()


@dataclass(frozen=True, slots=True)
class Atom:
    """A marker like ``[image]`` that stands apart from the text on either side."""

    text: str


Inline = str | Atom | _Removed


@dataclass(frozen=True, slots=True)
class FlatContent:
    text: str
    attachments: tuple[tuple[str, str], ...] = ()  # (kind, key)


def join_inline(pieces: Iterable[Inline]) -> str:
    """Join inline pieces into one string.

    A removed piece takes the horizontal whitespace on both sides with it and leaves one
    space between the words it separated (none at a line's edge), so "hi @Bot  there"
    minus the bot reads "hi there". An atom gets a space on each side unless there is one.
    """
    out = ""
    after_removed = False
    after_atom = False
    for piece in pieces:
        if piece is REMOVED:
            out = out.rstrip(" \t")
            after_removed, after_atom = True, False
        elif isinstance(piece, Atom):
            if not piece.text:
                continue
            if out and not out[-1].isspace():
                out += " "
            out += piece.text
            after_removed, after_atom = False, True
        elif isinstance(piece, str) and piece:
            if after_removed:
                piece = piece.lstrip(" \t")
                if not piece:
                    continue
            touching = out and not out[-1].isspace() and not piece[0].isspace()
            if (after_removed or after_atom) and touching:
                out += " "
            out += piece
            after_removed = after_atom = False
    return out


# -- post --------------------------------------------------------------------------------


def flatten_post(
    content: Any, render_at: Callable[[Mapping[str, Any]], Inline]
) -> FlatContent | None:
    """Flatten a decoded post; None when no post body can be found in ``content``."""
    body = _post_body(content)
    if body is None:
        return None
    attachments: list[tuple[str, str]] = []
    lines: list[str] = []
    title = _s(body.get("title")).strip()
    if title:
        lines.append(title)
    for paragraph in _paragraphs(body):
        lines.append(_paragraph(paragraph, render_at, attachments))
    text = "\n".join(lines).strip()
    return FlatContent(text, tuple(dict.fromkeys(attachments)))


def flatten_post_json(
    raw: Any, render_at: Callable[[Mapping[str, Any]], Inline] | None = None
) -> FlatContent | None:
    """Flatten a post's ``content`` as ``im.message.list`` / ``get`` return it: a JSON string
    (or the object already decoded); None when it is not JSON or holds no post body.

    ``render_at`` defaults to :func:`at_as_written`.
    """
    content = _loads(raw) if isinstance(raw, str) else raw
    return flatten_post(content, render_at or at_as_written)


def at_as_written(element: Mapping[str, Any]) -> str:
    """An ``at`` tag read without the message's mentions: ``@user_name`` when it has one.

    Otherwise its id as is when that is a placeholder (``@_user_1``: the caller may resolve
    it against the message's ``mentions``, as for text messages), else ``@`` + the id.
    """
    name = _s(element.get("user_name")).strip()
    if name:
        return "@" + name
    idents = (_s(element.get(key)) for key in ("user_id", "open_id", "key"))
    ident = next((i for i in idents if i), "")
    return ident if not ident or ident.startswith("@") else "@" + ident


def _post_body(content: Any) -> Mapping[str, Any] | None:
    if not isinstance(content, Mapping):
        return None
    inner = content.get("post")
    if isinstance(inner, Mapping):
        content = inner
    if _is_post_body(content):
        return cast(Mapping[str, Any], content)
    for locale in _LOCALES:
        if _is_post_body(content.get(locale)):
            return cast(Mapping[str, Any], content[locale])
    for value in content.values():
        if _is_post_body(value):
            return cast(Mapping[str, Any], value)
    return None


def _is_post_body(value: Any) -> bool:
    return isinstance(value, Mapping) and any(
        key in value for key in ("title", "content", "content_v2")
    )


def _paragraphs(body: Mapping[str, Any]) -> list[list[Any]]:
    source = body.get("content_v2")
    if not isinstance(source, list) or not source:
        source = body.get("content")
    if not isinstance(source, list):
        return []
    paragraphs: list[list[Any]] = []
    for paragraph in source:
        if isinstance(paragraph, list):
            paragraphs.append(paragraph)
        elif isinstance(paragraph, Mapping):  # one element standing for a paragraph
            paragraphs.append([paragraph])
    return paragraphs


def _paragraph(
    elements: list[Any],
    render_at: Callable[[Mapping[str, Any]], Inline],
    attachments: list[tuple[str, str]],
) -> str:
    blocks: list[str] = []
    inline: list[Inline] = []

    def flush() -> None:
        text = join_inline(inline).strip()
        inline.clear()
        if text:
            blocks.append(text)

    for element in elements:
        if not isinstance(element, Mapping):
            continue
        tag = _s(element.get("tag"))
        if tag == "code_block":
            flush()
            fenced = _code_block(element)
            if fenced:
                blocks.append(fenced)
        elif tag == "hr":
            flush()
            blocks.append("---")
        elif tag == "at":
            inline.append(render_at(element))
        else:
            inline.append(_inline_element(tag, element, attachments))
    flush()
    return "\n".join(blocks)


def _inline_element(
    tag: str, element: Mapping[str, Any], attachments: list[tuple[str, str]]
) -> Inline:
    if tag == "a":
        return _link(_s(element.get("text")), _s(element.get("href")))
    if tag == "img":
        key = _s(element.get("image_key"))
        if key:
            attachments.append(("image", key))
        return Atom("[image]")
    if tag == "media":
        key = _s(element.get("file_key"))
        if key:
            attachments.append(("media", key))
        return Atom("[video]")
    if tag == "emotion":
        emoji = _s(element.get("emoji_type"))
        return Atom(f":{emoji}:" if emoji else "")
    if tag == "md":
        return _markdown(_s(element.get("text")), attachments)
    return _s(element.get("text"))  # "text" and any tag we do not know


def _link(text: str, href: str) -> str:
    if not href or text == href:
        return text or href
    if not text.strip():
        return href
    return f"{text} ({href})"


def _code_block(element: Mapping[str, Any]) -> str:
    code = _s(element.get("text"))
    if code.endswith("\n"):
        code = code[:-1]
    if not code.strip():
        return ""
    language = _s(element.get("language")).strip().lower()
    return f"```{language}\n{code}\n```"


def _markdown(text: str, attachments: list[tuple[str, str]]) -> str:
    def image(match: re.Match[str]) -> str:
        target = match.group(1)
        if target.startswith("data:"):
            return "[image]"
        if "://" in target or not target:
            return match.group(0)
        attachments.append(("image", target))
        return "[image]"

    return _MD_IMAGE.sub(image, text)


# -- received cards ------------------------------------------------------------------------


def flatten_card(content: Any) -> str:
    """The visible text of a received card, one piece a line ("" when there is none).

    Knows the v1 ``{header, elements}`` shape, ``elements`` as an array of arrays, Card 2.0
    ``{body: {elements}}``, cards held as a JSON string under ``json_card`` / ``user_dsl``,
    and ``table`` elements (a header row, then one row per line, cells joined by " | ").
    """
    lines: list[str] = []
    _walk_card(content, lines, 0)
    deduped = [line for i, line in enumerate(lines) if i == 0 or lines[i - 1] != line]
    text = "\n".join(deduped)
    if len(text) > _CARD_MAX_CHARS:
        text = text[: _CARD_MAX_CHARS - 1].rstrip() + "…"
    return text


def _walk_card(node: Any, lines: list[str], depth: int) -> None:
    if depth > _CARD_MAX_DEPTH or len(lines) >= _CARD_MAX_LINES:
        return
    if isinstance(node, list):
        for item in node:
            _walk_card(item, lines, depth + 1)
        return
    if not isinstance(node, Mapping):
        return
    if node.get("tag") == "table":
        lines.extend(_table(node))
        return
    for key, value in node.items():
        if key in _CARD_SKIP_KEYS:
            continue
        if isinstance(value, str):
            if key in _CARD_NESTED_JSON_KEYS:
                _walk_card(_loads(value), lines, depth + 1)
            elif key in _CARD_TEXT_KEYS and value.strip():
                lines.append(value.strip())
        else:
            _walk_card(value, lines, depth + 1)


def _table(node: Mapping[str, Any]) -> list[str]:
    columns = [c for c in _list(node.get("columns")) if isinstance(c, Mapping)]
    names = [_s(c.get("name")) for c in columns]
    lines: list[str] = []
    header = [_s(c.get("display_name")) or _s(c.get("name")) for c in columns]
    if any(header):
        lines.append(" | ".join(header))
    for row in _list(node.get("rows")):
        if isinstance(row, Mapping):
            cells = [_cell(row.get(name)) for name in names]
            if any(cells):
                lines.append(" | ".join(cells))
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        try:
            return str(value)
        except ValueError:  # an int past Python's digit limit
            return ""
    return ""


# -- coercion --------------------------------------------------------------------------------


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None
