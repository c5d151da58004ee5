"""Docs (docx): a document's raw text, document create in a known folder, and block
children create (text, headings, lists, code, quote, divider)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .wire import FakeError, request_body
from .workspace_state import WorkspaceState

# docx block types the fake accepts in block children create, with their content key.
DOCX_BLOCKS = {
    2: "text",
    **{2 + level: f"heading{level}" for level in range(1, 10)},
    12: "bullet",
    13: "ordered",
    14: "code",
    15: "quote",
    22: "divider",
}


@dataclass
class FakeDocument:
    document_id: str
    title: str
    blocks: list[dict[str, Any]] = field(default_factory=list)  # docx blocks as sent
    folder_token: str = ""
    revision_id: int = 1
    app_has_access: bool = True
    client_tokens: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Who may open it with their user token (open_ids), and whose it is. The readers
    # other than the owner are its person collaborators; ``chats`` the group chats it is
    # shared with (every member may open it).
    readers: set[str] = field(default_factory=set)
    owner_open_id: str = ""
    chats: set[str] = field(default_factory=set)
    # A wiki page: the knowledge space it is in and its node token ("": a cloud document).
    wiki_space_id: str = ""
    node_token: str = ""
    updated_s: int = 0  # epoch seconds

    def text(self) -> str:
        """The document's words, for search: the body without the title line."""
        return self.raw_text().split("\n", 1)[1] if "\n" in self.raw_text() else ""

    def raw_text(self) -> str:
        """What ``raw_content`` answers: the title, then each block's text on its line."""
        lines = [self.title]
        for block in self.blocks:
            key = DOCX_BLOCKS.get(block.get("block_type", 0), "")
            elements = (block.get(key) or {}).get("elements") or []
            lines.append(
                "".join(str((e.get("text_run") or {}).get("content", "")) for e in elements)
            )
        return "\n".join(lines) + "\n"


class DocxApi(WorkspaceState):
    def add_document(
        self, document_id: str, title: str, text: str = "", **fields: Any
    ) -> FakeDocument:
        blocks = [_text_block(line) for line in text.splitlines()]
        document = FakeDocument(document_id, title, blocks, **fields)
        self.documents[document_id] = document
        return document

    async def _raw_content(self, request: web.Request) -> web.Response:
        document = self._document(request.match_info["document_id"])
        if request.query.get("lang", "0") not in ("0", "1", "2"):
            raise FakeError(99992402, "field validation failed: lang")
        return self._fake._ok({"content": document.raw_text()})

    async def _create_document(self, request: web.Request) -> web.Response:
        body = request_body(request)
        title, folder = body.get("title") or "", body.get("folder_token") or ""
        if not isinstance(title, str) or len(title) > 800:
            raise FakeError(1770001, "invalid param: title (at most 800 characters)")
        if folder and folder not in self.folders:
            raise FakeError(1770001, f"invalid param: folder_token {folder!r} not found")
        document = FakeDocument(f"doxcnFake{secrets.token_hex(8)}", title, folder_token=folder)
        self.documents[document.document_id] = document
        wire = {"document_id": document.document_id, "revision_id": 1, "title": title}
        return self._fake._ok({"document": wire})

    async def _create_blocks(self, request: web.Request) -> web.Response:
        document = self._document(request.match_info["document_id"])
        if request.match_info["block_id"] != document.document_id:
            raise FakeError(1770001, "invalid param: block_id (the fake knows the page block)")
        revision = request.query.get("document_revision_id", "-1")
        if not revision.lstrip("-").isdigit():
            raise FakeError(99992402, "field validation failed: document_revision_id")
        token = request.query.get("client_token")
        if token and token in document.client_tokens:
            return self._fake._ok(
                self._blocks_answer(document, document.client_tokens[token], token)
            )
        body = request_body(request)
        children = body.get("children")
        if not isinstance(children, list) or not 1 <= len(children) <= 50:
            raise FakeError(1770001, "invalid param: children (1 to 50 blocks)")
        for child in children:
            block_type = child.get("block_type") if isinstance(child, dict) else None
            key = DOCX_BLOCKS.get(block_type) if isinstance(block_type, int) else None
            if key is None or not isinstance(child.get(key), dict):
                raise FakeError(1770001, f"invalid param: block {child!r}")
            if key != "divider" and not _text_elements_ok(child[key].get("elements")):
                raise FakeError(1770001, f"invalid param: {key}.elements")
        index = body.get("index", -1)
        if not isinstance(index, int) or not -1 <= index <= len(document.blocks):
            raise FakeError(1770001, "invalid param: index")
        made = [
            {
                **child,
                "block_id": f"doxcnBlk{secrets.token_hex(6)}",
                "parent_id": document.document_id,
            }
            for child in children
        ]
        at = len(document.blocks) if index == -1 else index
        document.blocks[at:at] = made
        document.revision_id += 1
        if token:
            document.client_tokens[token] = made
        return self._fake._ok(self._blocks_answer(document, made, token))

    @staticmethod
    def _blocks_answer(
        document: FakeDocument, made: list[dict[str, Any]], token: str | None
    ) -> dict[str, Any]:
        return {
            "children": made,
            "document_revision_id": document.revision_id,
            "client_token": token or "",
        }

    def _document(self, document_id: str) -> FakeDocument:
        document = self.documents.get(document_id)
        if document is None:
            raise FakeError(1770002, http_status=404)
        if not document.app_has_access:
            raise FakeError(1770032, http_status=403)
        return document


def _text_block(line: str) -> dict[str, Any]:
    return {"block_type": 2, "text": {"elements": [{"text_run": {"content": line}}], "style": {}}}


def _text_elements_ok(elements: Any) -> bool:
    return (
        isinstance(elements, list)
        and len(elements) > 0
        and all(
            isinstance(e, dict) and isinstance((e.get("text_run") or {}).get("content"), str)
            for e in elements
        )
    )
