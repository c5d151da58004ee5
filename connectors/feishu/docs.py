"""Feishu documents (docx): reading one's plain text, creating one from simple markdown."""

from __future__ import annotations

import re
from typing import Annotated

from lark_oapi.api.docx.v1 import (
    Block,
    CreateDocumentBlockChildrenRequest,
    CreateDocumentBlockChildrenRequestBody,
    CreateDocumentRequest,
    CreateDocumentRequestBody,
    RawContentDocumentRequest,
    Text,
    TextElement,
    TextRun,
)
from pydantic import Field

from connectors.base import ToolError, action

from .audience import Audience, current_audience, readers_text
from .common import WorkspaceTools, object_of, stable_id
from .shares import is_token

_BLOCKS_PER_CALL = 50  # docx block children create takes at most 50 blocks
_DOCX_URL = re.compile(r"/docx/([A-Za-z0-9]+)")


class DocumentTools(WorkspaceTools):
    # The app reads only what was shared with it, and owns what it creates: a new
    # document is visible to people only in a folder they can open (folder_token). It
    # reads a document for a run only when its audience may open it (shares.py).

    @action(side_effect="read", max_result_chars=101_000)
    async def feishu_read_document(
        self,
        document_id: Annotated[str, Field(min_length=1)],
    ) -> str:
        """Read the plain text of a Feishu document (docx) shared with the app and with
        the asker (in a group chat: with this chat).

        Args:
            document_id: The document's id (doxcn... or the token in its /docx/ URL), or its URL.
        """
        audience = current_audience("Reading a document")
        if "/wiki/" in document_id:
            raise ToolError(
                "wiki links are not supported here; open the page and use its /docx/ link or id"
            )
        match = _DOCX_URL.search(document_id)
        doc = match.group(1) if match else document_id.strip()
        if not is_token(doc):
            raise ToolError(f"{doc!r} is not a document id (letters and digits) or /docx/ link")
        if not await self._shares.audience_may_open(audience, "docx", doc):
            raise ToolError(not_shared(audience, f"document {doc}"))
        request = RawContentDocumentRequest.builder().document_id(doc).lang(0).build()
        data = await self._data("docx.document.raw_content", request, "Reading the document")
        text = str(data.get("content") or "")
        cap = self.settings.document_max_chars
        head = f"Document {doc} ({len(text)} characters):\n"
        if len(text) <= cap:
            return head + text
        return head + text[:cap] + f"\n[... {len(text) - cap} more characters not shown]"

    @action(side_effect="write", timeout=60.0)
    async def feishu_create_document(
        self,
        title: Annotated[str, Field(min_length=1, max_length=800)],
        content: str | None = None,
        folder_token: str | None = None,
    ) -> str:
        """Create a Feishu document (docx), optionally with content.
        The app owns the new document: create it in a folder people can open.

        Args:
            title: The document title.
            content: The text, a paragraph a line; "#" to "###" headings, "- " bullets, "1. " items.
            folder_token: The folder to create it in (fldcn...); default the app's own space.
        """
        body = CreateDocumentRequestBody.builder().title(title)
        if folder_token:
            body.folder_token(folder_token)
        request = CreateDocumentRequest.builder().request_body(body.build()).build()
        data = await self._data("docx.document.create", request, "Creating the document")
        doc = str(object_of(data, "document").get("document_id") or "")
        lines = [f'Created document "{title}" (document_id {doc}).']
        blocks = _blocks(content or "")
        if blocks:
            lines.append(await self._append_blocks(doc, blocks))
        if not folder_token:
            lines.append("It is in the app's own space: share it before people can open it.")
        return "\n".join(lines)

    async def _append_blocks(self, doc: str, blocks: list[Block]) -> str:
        """Add ``blocks`` to the end of the document, in batches; what was added, as a line."""
        added = 0
        for start in range(0, len(blocks), _BLOCKS_PER_CALL):
            batch = blocks[start : start + _BLOCKS_PER_CALL]
            children = (
                CreateDocumentBlockChildrenRequest.builder()
                .document_id(doc)
                .block_id(doc)
                .document_revision_id(-1)
                .client_token(stable_id("blocks", doc, start))
                .request_body(
                    CreateDocumentBlockChildrenRequestBody.builder()
                    .children(batch)
                    .index(-1)
                    .build()
                )
                .build()
            )
            try:
                await self._data("docx.block.children.create", children, "Adding the content")
            except ToolError as exc:
                # The document exists either way: say how far the content got.
                return f"Only {added} of {len(blocks)} paragraphs were added. {exc}"
            added += len(batch)
        return f"Added {added} paragraphs."


def not_shared(audience: Audience, what: str) -> str:
    """Why a document or Base is not read for this audience, and what the person can do."""
    if not audience.direct:
        return (
            f"In a group chat the bot reads {what} only when it is shared with this group "
            "(everyone here reads the answer). Nothing was read. Share it with this group "
            "chat in Feishu, or ask the bot in a direct message."
        )
    who = readers_text(audience)
    return (
        f"The bot reads {what} for {who} only when Feishu shows it shared with {who} "
        "directly, or with a group chat you are in, or owned by you; a share through a "
        "department, a folder or a company-wide link is not one the bot can check. Nothing "
        "was read. Ask its owner to share it with you (or with a group chat you are in), "
        "then ask again, or open it in Feishu yourself."
    )


def _blocks(content: str) -> list[Block]:
    """docx blocks for ``content``: one per line, with a little markdown understood."""
    blocks: list[Block] = []
    code: list[str] | None = None
    for line in content.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if code is None:
                code = []
            else:
                blocks.append(_block(14, "code", "\n".join(code) or " "))
                code = None
            continue
        if code is not None:
            code.append(line)
            continue
        if stripped:
            blocks.append(_line_block(stripped))
    if code:  # an unclosed fence still keeps its text
        blocks.append(_block(14, "code", "\n".join(code)))
    return blocks


def _line_block(line: str) -> Block:
    heading = re.match(r"^(#{1,3})\s+(.*)", line)
    if heading:
        level = len(heading.group(1))
        return _block(2 + level, f"heading{level}", heading.group(2))
    if line in ("---", "***"):
        return Block.builder().block_type(22).divider({}).build()
    if re.match(r"^[-*]\s+", line):
        return _block(12, "bullet", re.sub(r"^[-*]\s+", "", line))
    if re.match(r"^\d+[.)]\s+", line):
        return _block(13, "ordered", re.sub(r"^\d+[.)]\s+", "", line))
    return _block(2, "text", line)


def _block(block_type: int, kind: str, text: str) -> Block:
    run = TextElement.builder().text_run(TextRun.builder().content(text).build()).build()
    body = Text.builder().elements([run]).build()
    builder = Block.builder().block_type(block_type)
    getattr(builder, kind)(body)
    return builder.build()


__all__ = ["DocumentTools", "not_shared"]
