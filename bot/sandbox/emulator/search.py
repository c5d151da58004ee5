"""A person's own search, with their user token: documents and wiki pages they may open,
messages of the chats they are in, and those messages read back by id.

    POST /open-apis/search/v2/doc_wiki/search   (user token only; search:docs:read)
         {"query" (<= 50 characters), "doc_filter": {...}, "wiki_filter": {...},
         "page_size" (<= 20, default 15), "page_token"}. Documents are searched when
         ``doc_filter`` is sent, wiki pages when ``wiki_filter`` is: Feishu answers
         nothing without either (the official clients send empty objects). A filter's
         ``only_title`` matches titles only. -> {"total", "has_more", "page_token",
         "res_units": [{"title_highlighted", "summary_highlighted" (the match in
         <h></h>), "entity_type" ("DOC" | "WIKI"), "result_meta": {"token", "url",
         "doc_types", "owner_id", "owner_name", "update_time", ...}}]}
    POST /open-apis/search/v2/message?page_size=&page_token=   (user token only;
         search:message) {"query", "from_ids", "chat_ids", "at_chatter_ids",
         "message_type" (file|image|media), "from_type" (bot|user), "chat_type"
         (group_chat|p2p_chat), "start_time", "end_time" (epoch seconds)} ->
         {"items": [message_id, ...], "has_more", "page_token"}, newest first, only
         messages of chats the caller is a member of.
    GET  /open-apis/im/v1/messages/mget?message_ids=..&message_ids=..   (1-50 ids) ->
         {"items": [message]}: with a user token the messages of the caller's chats, with
         the tenant token those of chats the bot is in; the others are left out.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from .docx import FakeDocument
from .identity import caller_of
from .messages import FakeMessage
from .params import paged, user_id_type
from .wire import FakeError, request_body
from .workspace_state import WorkspaceState

MAX_DOC_QUERY = 50
MAX_MGET = 50
DOCS_HOST = "https://fake.feishu.cn"


class SearchApi(WorkspaceState):
    async def _search_doc_wiki(self, request: web.Request) -> web.Response:
        body = request_body(request)
        query = body.get("query", "")
        if not isinstance(query, str) or len(query) > MAX_DOC_QUERY:
            raise FakeError(99992402, f"field validation failed: query (<= {MAX_DOC_QUERY})")
        size = body.get("page_size", 15)
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= 20:
            raise FakeError(99992402, "field validation failed: page_size (0 to 20)")
        filters = {
            "doc": body.get("doc_filter"),
            "wiki": body.get("wiki_filter"),
        }
        if any(f is not None and not isinstance(f, dict) for f in filters.values()):
            raise FakeError(99992402, "field validation failed: doc_filter / wiki_filter")
        me = caller_of(request).open_id
        hits = [
            d
            for d in self.documents.values()
            if me in d.readers and _doc_matches(d, query, filters)
        ]
        hits.sort(key=lambda d: (-d.updated_s, d.document_id))
        units = [self._res_unit(d, query) for d in hits]
        page = _page(units, str(body.get("page_token") or ""), size or 15)
        return self._fake._ok(
            {
                "total": len(units),
                "has_more": page["has_more"],
                "page_token": page["page_token"],
                "res_units": page["items"],
            }
        )

    async def _search_messages(self, request: web.Request) -> web.Response:
        user_id_type(request)
        body = request_body(request)
        me = caller_of(request).open_id
        wanted = _message_filter(body)
        found = [
            m
            for m in self._fake.message_by_id.values()
            if self._in_chat(me, m) and wanted(m, self.chats.get(m.chat_id))
        ]
        found.sort(key=lambda m: (m.create_time_ms, m.message_id), reverse=True)
        ids = [m.message_id for m in found]
        return self._fake._ok(paged(ids, request, default=20, maximum=50))

    async def _mget_messages(self, request: web.Request) -> web.Response:
        user_id_type(request)
        ids = request.query.getall("message_ids", [])
        if not 1 <= len(ids) <= MAX_MGET:
            raise FakeError(99992402, f"field validation failed: message_ids (1 to {MAX_MGET})")
        caller = caller_of(request)
        items = []
        for message_id in ids:
            message = self._fake.message_by_id.get(message_id)
            if message is None:
                continue
            chat = self.chats.get(message.chat_id)
            readable = (
                self._in_chat(caller.open_id, message)
                if caller.is_user
                else chat is None or chat.bot_is_member
            )
            if readable:
                items.append(message.to_wire())
        return self._fake._ok({"items": items})

    def _in_chat(self, open_id: str, message: FakeMessage) -> bool:
        chat = self.chats.get(message.chat_id)
        return chat is not None and open_id in chat.members

    def _res_unit(self, document: FakeDocument, query: str) -> dict[str, Any]:
        owner = self.users.get(document.owner_open_id)
        wiki = bool(document.wiki_space_id)
        path = f"wiki/{document.node_token}" if wiki else f"docx/{document.document_id}"
        return {
            "title_highlighted": _highlight(document.title, query),
            "summary_highlighted": _highlight(_snippet(document.text(), query), query),
            "entity_type": "WIKI" if wiki else "DOC",
            "result_meta": {
                "token": document.node_token if wiki else document.document_id,
                "url": f"{DOCS_HOST}/{path}",
                "doc_types": "DOCX",
                "owner_id": document.owner_open_id,
                "owner_name": owner.name if owner is not None else "",
                "is_cross_tenant": False,
                "create_time": document.updated_s,
                "update_time": document.updated_s,
                "last_open_time": document.updated_s,
                "edit_user_id": document.owner_open_id,
                "edit_user_name": owner.name if owner is not None else "",
                "file_type": "",
                "icon_info": "",
            },
        }


def _doc_matches(document: FakeDocument, query: str, filters: dict[str, Any]) -> bool:
    chosen = filters["wiki"] if document.wiki_space_id else filters["doc"]
    if chosen is None:
        return False
    needle = query.casefold().strip()
    words = document.title if chosen.get("only_title") else document.title + " " + document.text()
    return not needle or needle in words.casefold()


def _highlight(text: str, query: str) -> str:
    needle = query.strip()
    if not needle:
        return text
    return re.sub(re.escape(needle), lambda m: f"<h>{m.group(0)}</h>", text, flags=re.IGNORECASE)


def _snippet(text: str, query: str) -> str:
    flat = " ".join(text.split())
    at = flat.casefold().find(query.casefold().strip()) if query.strip() else 0
    start = max(0, at - 20)
    return flat[start : start + 80]


def _page(items: list[Any], token: str, size: int) -> dict[str, Any]:
    """Paging in a JSON body (doc search takes its page_token there, not in the query)."""
    if token and not token.isdigit():
        raise FakeError(99992402, "field validation failed: page_token")
    start = int(token or 0)
    more = start + size < len(items)
    return {
        "items": items[start : start + size],
        "has_more": more,
        "page_token": str(start + size) if more else "",
    }


def _message_filter(body: dict[str, Any]) -> Any:
    """A predicate over (message, its chat) for the search body, its fields checked as
    Feishu checks them (99992402)."""
    query = body.get("query", "")
    if not isinstance(query, str):
        raise FakeError(99992402, "field validation failed: query")
    lists = {name: _id_list(body, name) for name in ("from_ids", "chat_ids", "at_chatter_ids")}
    kinds = {"message_type": ("file", "image", "media"), "from_type": ("bot", "user")}
    for name, allowed in [*kinds.items(), ("chat_type", ("group_chat", "p2p_chat"))]:
        if body.get(name) is not None and body.get(name) not in allowed:
            raise FakeError(99992402, f"field validation failed: {name}")
    start, end = _seconds(body, "start_time", 0), _seconds(body, "end_time", 2**62)
    if start > end:
        raise FakeError(99992402, "field validation failed: start_time after end_time")
    needle = query.casefold().strip()

    def wanted(message: FakeMessage, chat: Any) -> bool:
        mentioned = {str(m.get("id")) for m in message.mentions}
        checks = (
            start <= message.create_time_ms // 1000 <= end,
            not needle or needle in _words(message).casefold(),
            lists["from_ids"] is None or message.sender_id in lists["from_ids"],
            lists["chat_ids"] is None or message.chat_id in lists["chat_ids"],
            lists["at_chatter_ids"] is None or bool(mentioned & set(lists["at_chatter_ids"])),
            body.get("message_type") is None or message.msg_type == body["message_type"],
            body.get("from_type") is None
            or (message.sender_type == "app") == (body["from_type"] == "bot"),
            body.get("chat_type") is None
            or (message.chat_type == "p2p") == (body["chat_type"] == "p2p_chat"),
        )
        return all(checks)

    return wanted


def _id_list(body: dict[str, Any], name: str) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FakeError(99992402, f"field validation failed: {name}")
    return value


def _seconds(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None or value == "":
        return default
    text = str(value)
    if isinstance(value, bool) or not text.isdigit():
        raise FakeError(99992402, f"field validation failed: {name} (epoch seconds)")
    return int(text)


def _words(message: FakeMessage) -> str:
    """The words a search matches in a message: a text's text, a post's title and runs."""
    content = message.content
    if isinstance(content, dict) and message.msg_type == "text":
        return str(content.get("text") or "")
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            parts.extend(str(node[k]) for k in ("title", "text") if isinstance(node.get(k), str))
            for value in node.values():
                if isinstance(value, dict | list):
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(content)
    return " ".join(parts)


__all__ = ["SearchApi"]
