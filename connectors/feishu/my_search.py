"""The asking person's own Feishu search, used as them: the documents and wiki pages they
may open, and the messages of the chats they are in.

Documents: ``POST /search/v2/doc_wiki/search`` (one call for cloud documents and wiki
pages; which ones it searches is which filters the body carries, and Feishu finds
nothing without either). Messages: ``POST /search/v2/message`` answers message ids only,
so their text is read back with ``GET /im/v1/messages/mget`` (one call for up to 50), as
the person, who sees exactly the chats they are in.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import lark_oapi as lark
from lark_oapi.api.search.v2 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    DocFilter,
    SearchDocWikiRequest,
    SearchDocWikiRequestBody,
    WikiFilter,
)
from pydantic import Field

from connectors.base import ToolError, action

from .common import UserCall, clip, items_of, more_hint, object_of
from .messages import MessageTools
from .times import format_time, from_epoch
from .users import ME

# Feishu's names: search:docs:read for document search; search:message for message
# search, and reading the found messages as the person takes the get_as_user ones.
DOCS_SCOPES = ("search:docs:read",)
MESSAGES_SCOPES = (
    "search:message",
    "im:message.group_msg:get_as_user",
    "im:message.p2p_msg:get_as_user",
)
MAX_DOC_QUERY = 50  # Feishu's limit on a document search's query
_HIGHLIGHT = re.compile(r"</?h>")
MGET_PATH = "/open-apis/im/v1/messages/mget"


class MySearchTools(MessageTools):
    @action(side_effect="read", acts_as="user", scopes=DOCS_SCOPES)
    async def feishu_my_search_docs(
        self,
        query: Annotated[str, Field(min_length=1, max_length=MAX_DOC_QUERY)],
        where: Literal["all", "docs", "wiki"] = "all",
        limit: Annotated[int, Field(ge=1, le=20)] = 10,
    ) -> str:
        """Search the Feishu documents and wiki pages the asking user can open, as them
        (their own Feishu search). Read one found with feishu_read_document when it is
        shared with the app.

        Args:
            query: Words to find in titles and text (at most 50 characters).
            where: "all" (the default), "docs" (cloud documents) or "wiki" (wiki pages).
            limit: The most results to return.
        """
        text = query.strip()
        if not text:
            raise ToolError("query must contain words, not only spaces")
        body = SearchDocWikiRequestBody.builder().query(text).page_size(limit)
        if where in ("all", "docs"):
            body.doc_filter(DocFilter.builder().build())
        if where in ("all", "wiki"):
            body.wiki_filter(WikiFilter.builder().build())
        request = SearchDocWikiRequest.builder().request_body(body.build()).build()

        async def work(user: UserCall) -> dict[str, Any]:
            return await user.data("search.doc_wiki.search", request)

        data = await self._as_user(
            DOCS_SCOPES, "search the documents you can open", "Searching your documents", work
        )
        units = [u for u in data.get("res_units") or [] if isinstance(u, dict)]
        if not units:
            return f'No document or wiki page you can open matches "{text}".'
        total = data.get("total")
        lines = [f'Documents matching "{text}" ({len(units)} shown of {total or len(units)}):']
        lines += [self._render_found(unit) for unit in units]
        if data.get("has_more"):
            lines.append("[More results: narrow the query.]")
        return "\n".join(lines)

    @action(side_effect="read", acts_as="user", scopes=MESSAGES_SCOPES)
    async def feishu_my_search_messages(
        self,
        query: Annotated[str, Field(max_length=200)] = "",
        chat_id: Annotated[str | None, Field(max_length=100)] = None,
        sender: Annotated[str | None, Field(max_length=200)] = None,
        start: str | None = None,
        end: str | None = None,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> str:
        """Search the messages of the chats the asking user is in, as them (their own
        Feishu message search), newest first. Give words, a chat, a sender or a time range.

        Args:
            query: Words the messages contain.
            chat_id: Only this chat (oc_...).
            sender: Only messages from this person: "me", an open_id (ou_...), email or name.
            start: Only messages from this time: ISO 8601 (2025-05-01T09:00) or unix seconds.
            end: Only messages until this time, same formats.
            limit: The most messages to return.
        """
        text = query.strip()
        if not (text or chat_id or sender or start or end):
            raise ToolError("give words to search for, or a chat, a sender or a time range")
        fields: dict[str, Any] = {"query": text}
        if chat_id:
            fields["chat_ids"] = [chat_id.strip()]
        senders = await self._people([sender.strip()]) if sender and sender.strip() else []
        since = self._epoch(start, "start") if start else None
        until = self._epoch(end, "end") if end else None
        if since is not None and until is not None and until < since:
            raise ToolError("end must not be before start")
        # Times are strings of epoch seconds on the wire (the SDK's builder declares ints
        # and int chat ids; the dict form sends what Feishu documents).
        fields |= {
            k: str(v) for k, v in (("start_time", since), ("end_time", until)) if v is not None
        }

        async def work(user: UserCall) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            if senders:
                me = await user.open_id() if ME in senders else ""
                fields["from_ids"] = [me if s == ME else s for s in senders]
            request = (
                CreateMessageRequest.builder()
                .user_id_type("open_id")
                .page_size(limit)
                .request_body(CreateMessageRequestBody(fields))
                .build()
            )
            found = await user.data("search.message.create", request)
            ids = [i for i in found.get("items") or [] if isinstance(i, str)][:limit]
            messages = items_of(await user.data("im.message.mget", _mget(ids))) if ids else []
            return found, messages

        found, messages = await self._as_user(
            MESSAGES_SCOPES, "search the messages of your chats", "Searching your messages", work
        )
        what = f'"{text}"' if text else "your filters"
        if not messages:
            return f"No message in your chats matches {what}."
        names = await self._sender_names(messages)
        lines = [f"Messages matching {what} in your chats (newest first, {self._tz}):"]
        for message in messages:
            lines.append(f"{self._render_message(message, names)} · chat {message.get('chat_id')}")
        lines += more_hint(found)
        return "\n".join(lines)

    def _render_found(self, unit: dict[str, Any]) -> str:
        meta = object_of(unit, "result_meta")
        title = _HIGHLIGHT.sub("", str(unit.get("title_highlighted") or "")) or "(untitled)"
        bits = [clip(title, 200), "wiki page" if unit.get("entity_type") == "WIKI" else "document"]
        if meta.get("owner_name"):
            bits.append(f"owner {meta['owner_name']}")
        updated = from_epoch(meta.get("update_time"), 1000)
        if updated is not None:
            bits.append(f"updated {format_time(updated, self._tz)}")
        summary = _HIGHLIGHT.sub("", str(unit.get("summary_highlighted") or ""))
        if summary:
            bits.append(clip(summary, 160))
        if meta.get("url"):
            bits.append(str(meta["url"]))
        return "- " + " · ".join(bits)


def _mget(ids: list[str]) -> lark.BaseRequest:
    """``GET /im/v1/messages/mget``: lark-oapi 1.7 has no builder for it."""
    return (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri(MGET_PATH)
        .token_types({lark.AccessTokenType.USER, lark.AccessTokenType.TENANT})
        .queries([*(("message_ids", i) for i in ids), ("user_id_type", "open_id")])
        .build()
    )


__all__ = ["DOCS_SCOPES", "MESSAGES_SCOPES", "MySearchTools"]
