"""Contacts: the tenant's users, found by email or mobile, by id, or by department."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .params import paged, user_id_type
from .wire import TENANT_KEY, FakeError, request_body
from .workspace_state import WorkspaceState


@dataclass
class FakeUser:
    open_id: str
    name: str
    email: str = ""
    mobile: str = ""  # "+86..." like Feishu
    en_name: str = ""
    job_title: str = ""
    department_ids: list[str] = field(default_factory=lambda: ["0"])
    resigned: bool = False
    time_zone: str = "Asia/Shanghai"  # what the person set in Feishu (IANA)

    @property
    def user_id(self) -> str:
        return "u_" + self.open_id.removeprefix("ou_")

    @property
    def union_id(self) -> str:
        return "on_" + self.open_id.removeprefix("ou_")

    def id_of(self, user_id_type: str) -> str:
        return {"user_id": self.user_id, "union_id": self.union_id}.get(user_id_type, self.open_id)

    def to_wire(self) -> dict[str, Any]:
        return {
            "open_id": self.open_id,
            "user_id": self.user_id,
            "union_id": self.union_id,
            "name": self.name,
            "en_name": self.en_name,
            "nickname": "",
            "email": self.email,
            "enterprise_email": "",
            "mobile": self.mobile,
            "mobile_visible": True,
            "job_title": self.job_title,
            "time_zone": self.time_zone,
            "department_ids": list(self.department_ids),
            "status": {
                "is_activated": not self.resigned,
                "is_frozen": False,
                "is_resigned": self.resigned,
                "is_exited": False,
                "is_unjoin": False,
            },
            "avatar": {"avatar_72": "https://example.invalid/a72.png"},
            "tenant_key": TENANT_KEY,
        }


class ContactsApi(WorkspaceState):
    def add_user(self, open_id: str, name: str, **fields: Any) -> FakeUser:
        user = FakeUser(open_id, name, **fields)
        self.users[open_id] = user
        self.departments.update(user.department_ids)
        return user

    async def _batch_get_id(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        body = request_body(request)
        emails, mobiles = body.get("emails") or [], body.get("mobiles") or []
        if not isinstance(emails, list) or not isinstance(mobiles, list):
            raise FakeError(99992402, "field validation failed: emails/mobiles must be lists")
        if not (emails or mobiles) or len(emails) > 50 or len(mobiles) > 50:
            raise FakeError(99992402, "field validation failed: 1 to 50 emails or mobiles")
        active = [u for u in self.users.values() if body.get("include_resigned") or not u.resigned]
        found: list[dict[str, Any]] = []
        for email in emails:
            user = next((u for u in active if u.email.lower() == str(email).lower()), None)
            found.append({"email": email, **({"user_id": user.id_of(id_type)} if user else {})})
        for mobile in mobiles:
            key = _mobile_key(str(mobile))
            user = next((u for u in active if u.mobile and _mobile_key(u.mobile) == key), None)
            found.append({"mobile": mobile, **({"user_id": user.id_of(id_type)} if user else {})})
        return self._fake._ok({"user_list": found})

    async def _batch_users(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        ids = request.query.getall("user_ids", [])
        if not ids or len(ids) > 50:
            raise FakeError(99992402, "field validation failed: user_ids (1 to 50)")
        users = [self._user(user_id, id_type) for user_id in ids]
        return self._fake._ok({"items": [u.to_wire() for u in users if u is not None]})

    async def _find_by_department(self, request: web.Request) -> web.Response:
        user_id_type(request)
        department = request.query.get("department_id")
        if not department:
            raise FakeError(99992402, "field validation failed: department_id is required")
        if department not in self.departments:
            raise FakeError(40004)
        members = [u.to_wire() for u in self.users.values() if department in u.department_ids]
        return self._fake._ok(paged(members, request, default=10, maximum=50))


def _mobile_key(mobile: str) -> str:
    digits = re.sub(r"\D", "", mobile)
    return digits[2:] if len(digits) == 13 and digits.startswith("86") else digits
