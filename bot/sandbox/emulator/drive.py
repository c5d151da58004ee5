"""Drive: who a document or Base is shared with (its collaborators), and its metadata
(owner, title), as Feishu answers the app.

    GET  /open-apis/drive/v1/permissions/{token}/members?type=docx|bitable[&fields=...]
         ``data.items``: the direct collaborators, not paged: ``{member_type: "openid",
         member_id, perm, perm_type, type: "user"}`` for people and ``{member_type:
         "openchat", member_id: chat_id, ..., type: "chat"}`` for group chats (with
         ``fields`` naming ``name``, their names). The owner is not among them (read it
         from the metadata): a direct collaborator list, as larksuite/cli describes it,
         "not the full inheritance chain".
    POST /open-apis/drive/v1/metas/batch_query?user_id_type=open_id
         ``{request_docs: [{doc_token, doc_type}] (1-200), with_url}`` -> ``metas`` [{doc_token,
         doc_type, title, owner_id, create_time, latest_modify_user, latest_modify_time,
         url?}] and ``failed_list`` [{token, code}] for the ones the app may not read.

Refusals: a missing or unknown ``type`` 99992402; a token of no document or Base of that
type 1063001; one the app has no access to 1063002 (HTTP 403). In ``failed_list``: 970005
(no such document), 970003 (no permission). The codes for the two refusals and the failed
list are our reading of Feishu's drive docs, not captured answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .params import user_id_type
from .wire import FakeError, request_body
from .workspace_state import WorkspaceState

# The types these endpoints take; the emulator holds documents (docx) and Bases.
DRIVE_TYPES = ("doc", "docx", "sheet", "bitable", "file", "wiki", "mindnote", "slides")
META_NOT_FOUND, META_FORBIDDEN = 970005, 970003


@dataclass(frozen=True, slots=True)
class Shared:
    """A document or Base as its permissions see it."""

    token: str
    kind: str  # docx | bitable
    title: str
    owner_open_id: str
    people: frozenset[str]  # person collaborators (the owner not among them)
    chats: frozenset[str]  # group chats it is shared with
    app_has_access: bool
    updated_s: int = 0


class DriveApi(WorkspaceState):
    def shared(self, token: str, kind: str) -> Shared | None:
        """The document or Base ``token`` of type ``kind``, None when there is none."""
        if kind == "docx" and (document := self.documents.get(token)) is not None:
            return Shared(
                token,
                kind,
                document.title,
                document.owner_open_id,
                frozenset(document.readers - {document.owner_open_id}),
                frozenset(document.chats),
                document.app_has_access,
                document.updated_s,
            )
        if kind == "bitable" and (base := self.bitables.get(token)) is not None:
            return Shared(
                token,
                kind,
                base.name,
                base.owner_open_id,
                frozenset(base.readers - {base.owner_open_id}),
                frozenset(base.chats),
                base.app_has_access,
            )
        return None

    async def _permission_members(self, request: web.Request) -> web.Response:
        kind = request.query.get("type", "")
        if kind not in DRIVE_TYPES:
            raise FakeError(99992402, "field validation failed: type")
        target = self.shared(request.match_info["token"], kind)
        if target is None:
            raise FakeError(1063001)
        if not target.app_has_access:
            raise FakeError(1063002, http_status=403)
        named = "name" in request.query.get("fields", "") or request.query.get("fields") == "*"
        items = [self._person_entry(p, named) for p in sorted(target.people)]
        items += [self._chat_entry(c, named) for c in sorted(target.chats)]
        return self._fake._ok({"items": items})

    def _person_entry(self, open_id: str, named: bool) -> dict[str, Any]:
        entry = {
            "member_type": "openid",
            "member_id": open_id,
            "perm": "view",
            "perm_type": "container",
            "type": "user",
        }
        user = self.users.get(open_id)
        return entry | {"name": user.name if user else open_id} if named else entry

    def _chat_entry(self, chat_id: str, named: bool) -> dict[str, Any]:
        entry = {
            "member_type": "openchat",
            "member_id": chat_id,
            "perm": "view",
            "perm_type": "container",
            "type": "chat",
        }
        chat = self.chats.get(chat_id)
        return entry | {"name": chat.name if chat else chat_id} if named else entry

    async def _batch_query_metas(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        body = request_body(request)
        wanted = body.get("request_docs")
        if not isinstance(wanted, list) or not 1 <= len(wanted) <= 200:
            raise FakeError(99992402, "field validation failed: request_docs (1 to 200)")
        metas: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for item in wanted:
            token = str(item.get("doc_token") or "") if isinstance(item, dict) else ""
            kind = str(item.get("doc_type") or "") if isinstance(item, dict) else ""
            if not token or kind not in DRIVE_TYPES:
                raise FakeError(99992402, f"field validation failed: request_docs {item!r}")
            target = self.shared(token, kind)
            if target is None:
                failed.append({"token": token, "code": META_NOT_FOUND})
            elif not target.app_has_access:
                failed.append({"token": token, "code": META_FORBIDDEN})
            else:
                metas.append(self._meta(target, id_type, bool(body.get("with_url"))))
        return self._fake._ok({"metas": metas, "failed_list": failed})

    def _meta(self, target: Shared, id_type: str, with_url: bool) -> dict[str, Any]:
        owner = self.users.get(target.owner_open_id)
        owner_id = owner.id_of(id_type) if owner is not None else target.owner_open_id
        meta: dict[str, Any] = {
            "doc_token": target.token,
            "doc_type": target.kind,
            "title": target.title,
            "owner_id": owner_id,
            "create_time": str(target.updated_s),
            "latest_modify_user": owner_id,
            "latest_modify_time": str(target.updated_s),
        }
        if with_url:
            meta["url"] = f"https://example.feishu.cn/{target.kind}/{target.token}"
        return meta
