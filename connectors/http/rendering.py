"""How the HTTP connector shows a response to the model: JSON pretty, HTML as text,
binary summarised, all bounded; never the request's headers.
"""

from __future__ import annotations

import functools
import html.parser
import json
from collections.abc import Callable

from bot.engine import ToolError

from ..secret_masking import SecretMasker
from .transport import Exchange

EXCERPT_CHARS = 300
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_TEXT_SUFFIXES = ("+json", "+xml")


class _HTMLText(html.parser.HTMLParser):
    """The readable text of an HTML page: no scripts or styles, blocks on their own lines."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"}
        | {"header", "footer", "table", "ul", "ol", "pre", "blockquote", "title"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def html_to_text(markup: str) -> str:
    parser = _HTMLText()
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # malformed markup: show what was gathered
        pass
    return parser.text()


def _is_text(content_type: str, sample: bytes) -> bool:
    media = content_type.split(";")[0].strip().lower()
    if media.startswith(_TEXT_TYPES) or media.endswith(_TEXT_SUFFIXES):
        return True
    if media in ("", "application/x-www-form-urlencoded"):
        return b"\x00" not in sample[:1024]
    return False


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def render_body(
    body: bytes,
    content_type: str,
    encoding: str | None,
    limit: int,
    clean: Callable[[str], str] | None = None,
) -> str:
    """The body for the model: JSON pretty (bounded), HTML as text, binary summarised.

    ``clean`` (masking secrets) sees the decoded text and the rendered text before
    either is cut: cutting first could leave the beginning of a secret in view.
    """
    media = content_type.split(";")[0].strip().lower()
    if not _is_text(content_type, body):
        head = body[:16].hex(" ")
        return f"[binary body: {media or 'unknown type'}, {len(body)} bytes; starts {head}]"
    scrub = clean or (lambda text: text)
    text = scrub(body.decode(encoding or "utf-8", errors="replace"))
    if "json" in media or (not media and text.lstrip()[:1] in ("{", "[")):
        try:
            document = json.loads(text)
        except ValueError:
            pass
        else:
            pretty = scrub(json.dumps(document, indent=2, ensure_ascii=False))
            if len(pretty) > limit:
                pretty = scrub(json.dumps(document, ensure_ascii=False, separators=(",", ":")))
            return _cut(pretty, limit)
    if media in ("text/html", "application/xhtml+xml"):
        text = scrub(html_to_text(text))
    return _cut(text.strip(), limit)


def excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def render_observation(
    exchange: Exchange, *, max_chars: int, max_response_bytes: int, masker: SecretMasker
) -> str:
    """The observation: status, URL, type and size, and the body; a status of 400 or more
    is a ToolError with an excerpt. The body is masked before it is cut; the caller
    masks the rest."""
    request, response, body = exchange.request, exchange.response, exchange.body
    content_type = response.headers.get("content-type", "")
    clean = functools.partial(masker.mask, cut=exchange.truncated)
    text = render_body(body, content_type, response.charset_encoding, max_chars, clean)
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    if response.status_code >= 400:
        raise ToolError(f"{status} from {request.method} {request.url}: {excerpt(text)}")
    size = f"{len(body)} bytes" + (
        f" (cut at max_response_bytes={max_response_bytes})" if exchange.truncated else ""
    )
    lines = [f"{status} · {request.method} {request.url}"]
    if exchange.redirects:
        lines.append("redirected from: " + " -> ".join(exchange.redirects))
    lines.append(f"content-type: {content_type or 'none'} · {size}")
    if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
        lines.append(f"location: {response.headers['location']}")
    lines.append("")
    lines.append(text if text else "(empty body)")
    return "\n".join(lines)


__all__ = ["EXCERPT_CHARS", "excerpt", "html_to_text", "render_body", "render_observation"]
