"""The seeded tenant's state, shared by the workspace families (contacts, chats, calendar,
tasks, Base, docx), and the lookups more than one of them needs."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .bitable import FakeBitableApp
    from .calendars import FakeCalendar
    from .chats import FakeChat
    from .contacts import FakeUser
    from .docx import FakeDocument
    from .server import FakeFeishu
    from .tasks import FakeTask, FakeTasklist

BOT_CALENDAR_ID = "feishu.cn_fakebot0001@group.calendar.feishu.cn"


class WorkspaceState:
    def __init__(self, fake: FakeFeishu) -> None:
        self._fake = fake
        self._numbers = itertools.count(1)
        self.users: dict[str, FakeUser] = {}  # open_id -> user
        self.departments: set[str] = {"0"}
        self.chats: dict[str, FakeChat] = {}
        self.calendars: dict[str, FakeCalendar] = {}
        self.primary_calendar_id = BOT_CALENDAR_ID
        self.primary_calendars: dict[str, str] = {}  # open_id -> their primary calendar
        self.tasks: dict[str, FakeTask] = {}
        self.tasklists: dict[str, FakeTasklist] = {}
        self.task_client_tokens: dict[str, str] = {}  # client_token -> guid
        self.bitables: dict[str, FakeBitableApp] = {}
        self.documents: dict[str, FakeDocument] = {}
        self.folders: set[str] = {"fldcnFakeShared"}

    # -- lookups ----------------------------------------------------------------------------

    def _user(self, user_id: str, id_type: str) -> FakeUser | None:
        return next((u for u in self.users.values() if u.id_of(id_type) == user_id), None)

    def _chat_has_messages(self, chat_id: str) -> bool:
        return any(m.chat_id == chat_id for m in self._fake.message_by_id.values())
