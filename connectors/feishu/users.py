"""Finding people: exact lookups by email or mobile, and name search within one department."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from lark_oapi.api.contact.v3 import (
    BatchGetIdUserRequest,
    BatchGetIdUserRequestBody,
    BatchUserRequest,
    FindByDepartmentUserRequest,
)
from pydantic import Field

from connectors.base import ToolError, action

from .audience import current_audience
from .common import WorkspaceTools, items_of

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# What the model passes for the person asking, in the tools that act as them.
ME = "me"
_MAX_NAMES = 10
_MOBILE = re.compile(r"^\+?[\d\s-]{6,20}$")


class UserTools(WorkspaceTools):
    # Feishu's search by name (search/v1/user) accepts only a *user* token, so with the
    # tenant token emails and mobiles go through batch_get_id, and a name is matched
    # against the direct members of one department, within the app's contact range. That
    # range is what the tenant's admin opened to this app for the people who may use it;
    # it is never read for a run whose readers may include people of another company (an
    # external group chat) or for no one in a chat.

    @action(side_effect="read")
    async def feishu_search_users(
        self,
        query: Annotated[str, Field(min_length=1, max_length=500)],
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> str:
        """Find people in the Feishu tenant by email, mobile number or name.
        Emails and mobile numbers (several may be given, comma-separated) match exactly.
        A name matches part of a person's name, English name or email, among the members
        of the app's configured department that the app may see.

        Args:
            query: An email, a mobile number (+8613800000000), several comma-separated, or a name.
            limit: The most people to return.
        """
        audience = current_audience("Looking people up in the company directory")
        if not await self._access.inside_tenant(audience):
            raise ToolError(
                "This group chat is external (or Feishu did not say it is not): people of "
                "another company may read the answer here, and the company directory is not "
                "theirs to see. Nothing was looked up. Ask the bot in a direct message."
            )
        parts = [part.strip() for part in re.split(r"[,;]", query) if part.strip()]
        exact = bool(parts) and all(_EMAIL.match(p) or _MOBILE.match(p) for p in parts)
        if exact:
            return await self._users_by_contact(parts, limit)
        return await self._users_by_name(query.strip(), limit)

    async def _users_by_contact(self, parts: list[str], limit: int) -> str:
        found, missing = await self._ids_by_contact(parts)
        lines: list[str] = []
        if found:
            ids = list(found)[:limit]
            try:
                users = await self._users(ids)
            except ToolError as exc:
                users, lines = [], [f"(Names unavailable: {exc})"]
            by_id = {self._user_id(u): u for u in users}
            lines.insert(0, f"Found {len(ids)} user(s):")
            for user_id in ids:
                user = by_id.get(user_id)
                line = self._render_user(user) if user else f"- {self._id_label(user_id)}"
                lines.append(f"{line} · matched {found[user_id]}")
        if missing:
            lines.append("No Feishu user (or none the app may see) for: " + ", ".join(missing))
        return "\n".join(lines)

    async def _ids_by_contact(
        self, parts: list[str], id_type: str | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """user id -> the email or mobile it matched, and the ones nobody matched."""
        emails = [p for p in parts if "@" in p][:50]
        mobiles = [p for p in parts if "@" not in p][:50]
        body = BatchGetIdUserRequestBody.builder().include_resigned(False)
        if emails:
            body.emails(emails)
        if mobiles:
            body.mobiles(mobiles)
        request = (
            BatchGetIdUserRequest.builder()
            .user_id_type(id_type or self.settings.user_id_type)
            .request_body(body.build())
            .build()
        )
        data = await self._data("contact.user.batch_get_id", request, "Looking up users")
        found: dict[str, str] = {}
        missing = []
        for entry in data.get("user_list") or []:
            given = str(entry.get("email") or entry.get("mobile") or "")
            if entry.get("user_id"):
                found.setdefault(str(entry["user_id"]), given)
            else:
                missing.append(given)
        return found, missing

    async def _users_by_name(self, name: str, limit: int) -> str:
        department = self.settings.user_search_department_id
        matches, scanned = await self._named(name, limit)
        if not matches:
            return (
                f'No user matching "{name}" among the {scanned} members of department '
                f"{department} the app can see. Name search covers only that department's "
                "direct members; an email or mobile number finds anyone in the app's range."
            )
        lines = [f'Users matching "{name}" ({min(limit, len(matches))} shown):']
        lines += [self._render_user(user) for user in matches[:limit]]
        return "\n".join(lines)

    async def _people(self, entries: list[str], *, chats: bool = False) -> list[str]:
        """The open_ids of the people ``entries`` name, in order and without repeats:
        ``ME`` stays as it is (only the asker's own token says who that is), ou_ ids
        pass, emails and mobiles are looked up exactly, and a name must match exactly one
        person of the configured department. ``chats``: oc_ chat ids pass too."""
        entries = [e.strip() for e in entries]
        if any(not e for e in entries):
            raise ToolError("a person was given as an empty string; give a name, email or id")
        found: list[str] = []
        problems: list[str] = []
        contacts = [e for e in entries if _EMAIL.match(e) or _MOBILE.match(e)]
        named = [e for e in entries if e not in contacts and _is_name(e, chats)]
        if len(named) > _MAX_NAMES:
            # Each name is a department scan of up to user_search_max_pages calls.
            raise ToolError(
                f"at most {_MAX_NAMES} people may be given by name in one call; "
                "give the others as open_ids (ou_...) or emails"
            )
        by_contact: dict[str, str] = {}
        if contacts:
            ids, _ = await self._ids_by_contact(contacts, "open_id")
            by_contact = {given: user_id for user_id, given in ids.items()}
        for entry in entries:
            if entry in contacts:
                if entry in by_contact:
                    found.append(by_contact[entry])
                else:
                    problems.append(f"no Feishu user (or none the app may see) has {entry}")
            elif entry in named:
                found += await self._one_named(entry, problems)
            else:
                found.append(ME if entry.casefold() == ME else entry)
        if problems:
            raise ToolError("Could not tell who is meant: " + "; ".join(problems) + ".")
        return list(dict.fromkeys(found))

    async def _one_named(self, name: str, problems: list[str]) -> list[str]:
        matches, scanned = await self._named(name, 5)
        if len(matches) == 1:
            return [str(matches[0].get("open_id") or "")]
        if not matches:
            problems.append(
                f'no one named "{name}" among the {scanned} people of department '
                f"{self.settings.user_search_department_id} (give an email or an open_id)"
            )
        else:
            who = ", ".join(f"{u.get('name')} ({u.get('open_id')})" for u in matches)
            problems.append(f'"{name}" could be {who}: pass the open_id')
        return []

    async def _named(self, name: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """People of the configured department whose name matches ``name``, and how many
        were scanned."""
        needle = name.casefold()
        department = self.settings.user_search_department_id
        matches: list[dict[str, Any]] = []
        scanned, page_token = 0, ""
        for _ in range(self.settings.user_search_max_pages):
            request = (
                FindByDepartmentUserRequest.builder()
                .department_id(department)
                .user_id_type(self.settings.user_id_type)
                .page_size(50)
            )
            if page_token:
                request.page_token(page_token)
            data = await self._data(
                "contact.user.find_by_department", request.build(), "Searching users"
            )
            members = items_of(data)
            scanned += len(members)
            matches += [u for u in members if _name_matches(u, needle)]
            page_token = str(data.get("page_token") or "")
            if len(matches) >= limit or not data.get("has_more") or not page_token:
                break
        return matches, scanned

    async def _users(self, ids: list[str]) -> list[dict[str, Any]]:
        request = (
            BatchUserRequest.builder()
            .user_ids(ids[:50])
            .user_id_type(self.settings.user_id_type)
            .build()
        )
        return items_of(await self._data("contact.user.batch", request, "Reading user profiles"))

    async def _sender_names(self, messages: list[dict[str, Any]]) -> dict[str, str]:
        """open_id -> name for the people among ``messages``' senders (best effort)."""
        if not self.settings.resolve_sender_names or self.settings.user_id_type != "open_id":
            return {}
        ids = sorted(
            {
                str((m.get("sender") or {}).get("id"))
                for m in messages
                if (m.get("sender") or {}).get("sender_type") == "user"
            }
        )
        if not ids:
            return {}
        try:
            users = await self._users(ids)
        except ToolError:
            return {}  # names are a nicety: the ids still say who wrote what
        return {str(u.get("open_id")): str(u.get("name") or "") for u in users}

    def _user_id(self, user: Mapping[str, Any]) -> str:
        return str(user.get(self.settings.user_id_type) or "")

    def _id_label(self, user_id: str) -> str:
        return f"{self.settings.user_id_type} {user_id}"

    def _render_user(self, user: Mapping[str, Any]) -> str:
        name = str(user.get("name") or "(no name)")
        bits = [name]
        if user.get("en_name") and user["en_name"] != name:
            bits[0] += f" ({user['en_name']})"
        bits.append(self._id_label(self._user_id(user)))
        for key in ("email", "job_title"):
            if user.get(key):
                bits.append(str(user[key]))
        if (user.get("status") or {}).get("is_resigned"):
            bits.append("resigned")
        return "- " + " · ".join(bits)


def _is_name(entry: str, chats: bool) -> bool:
    """Whether ``entry`` names a person (rather than being "me" or an id)."""
    if entry.casefold() == ME or entry.startswith("ou_"):
        return False
    return not (chats and entry.startswith("oc_"))


def _name_matches(user: Mapping[str, Any], needle: str) -> bool:
    fields = ("name", "en_name", "nickname", "email")
    return any(needle in str(user.get(key) or "").casefold() for key in fields)


__all__ = ["ME", "UserTools"]
