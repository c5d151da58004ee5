"""The seeded tenant behind the workspace endpoints: :class:`FakeWorkspace`, made of the
family mixins (contacts, chats, calendar, tasks, Base, docx), its seed and its routes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .bitable import BitableApi, FakeBitableApp, FakeBitableTable
from .calendars import DAY_S, HOUR_S, FakeCalendar
from .chats import ChatsApi
from .contacts import ContactsApi, FakeUser
from .docx import DocxApi
from .drive import DriveApi
from .freebusy import FreeBusyApi
from .search import SearchApi
from .tasks import FakeTasklist, TasksApi
from .workspace_state import BOT_CALENDAR_ID

if TYPE_CHECKING:
    from .server import FakeFeishu


class FakeWorkspace(
    ContactsApi, ChatsApi, FreeBusyApi, TasksApi, BitableApi, DocxApi, DriveApi, SearchApi
):
    """The workspace behind the contact, chat, calendar, task, Base, docx, drive and search
    endpoints.

    Seeded with a small, realistic tenant (see the package doc); every list is public
    state a test may change or extend with the ``add_*`` helpers.
    """

    def __init__(self, fake: FakeFeishu) -> None:
        super().__init__(fake)
        self._seed()

    # -- the seed ---------------------------------------------------------------------------

    def _seed(self) -> None:
        now = int(time.time())
        hour = now - now % HOUR_S  # the hour we are in: events and due dates sit on whole hours
        alice, bob = self._seed_people()
        self._seed_messages(alice, bob, now * 1000)
        self._seed_calendar(hour)
        self._seed_people_calendars(alice, bob, hour)
        self._seed_tasks(alice, hour, now * 1000)
        self._seed_people_tasks(alice, bob, hour, now * 1000)
        self._seed_base(alice, bob, hour)
        self._seed_documents(alice, bob, now)

    def _seed_people(self) -> tuple[FakeUser, FakeUser]:
        alice = self.add_user(
            "ou_fake_alice",
            "Alice Wang",
            email="alice@example.com",
            mobile="+8613800000001",
            en_name="Alice Wang",
            job_title="Engineer",
        )
        bob = self.add_user(
            "ou_fake_bob",
            "Bob Li",
            email="bob@example.com",
            mobile="+8613800000002",
            en_name="Bob Li",
            job_title="Product manager",
        )
        self.add_user(
            "ou_fake_zhang",
            "张伟",
            email="zhangwei@example.com",
            mobile="+8613800000003",
            en_name="Zhang Wei",
            job_title="Sales",
            department_ids=["od-fake-sales"],
        )
        both = {alice.open_id, bob.open_id}
        self.add_chat(
            "oc_fake_eng", "Engineering", "Backend and infra", alice.open_id, members=set(both)
        )
        self.add_chat(
            "oc_fake_launch", "Launch 2025", "Launch coordination", bob.open_id, members=both
        )
        self.add_chat(
            "oc_fake_hr", "HR private", "", bob.open_id, bot_is_member=False, members={bob.open_id}
        )
        # The bot is in it, Alice is not: what she must never read through the bot.
        self.add_chat(
            "oc_fake_board", "Leadership", "Board prep", bob.open_id, members={bob.open_id}
        )
        # An external group: a partner's person from another tenant is in it.
        self.add_chat(
            "oc_fake_partners",
            "Acme x Partner",
            "Shared with Partner Inc.",
            alice.open_id,
            external=True,
            members={alice.open_id},
            outside_members={"ou_fake_partner": "partner_tenant"},
        )
        return alice, bob

    def _seed_messages(self, alice: FakeUser, bob: FakeUser, now_ms: int) -> None:
        fake = self._fake
        fake.add_message(
            "om_fake_hist_1",
            chat_id="oc_fake_eng",
            chat_type="group",
            content={"text": "Standup moved to 10:30 tomorrow"},
            sender_open_id=alice.open_id,
            create_time_ms=now_ms - 3600_000,
        )
        fake.add_message(
            "om_fake_hist_2",
            chat_id="oc_fake_eng",
            chat_type="group",
            msg_type="post",
            content={
                "title": "Release notes",
                "content": [
                    [
                        {"tag": "text", "text": "v2.3 ships on Friday, "},
                        {"tag": "at", "user_id": "@_user_1", "user_name": "Alice Wang"},
                    ],
                    [{"tag": "a", "text": "changelog", "href": "https://example.invalid/cl"}],
                ],
            },
            sender_open_id=bob.open_id,
            create_time_ms=now_ms - 2400_000,
        )
        fake.add_message(
            "om_fake_hist_3",
            chat_id="oc_fake_eng",
            chat_type="group",
            msg_type="image",
            content={"image_key": "img_v3_fake"},
            sender_open_id=alice.open_id,
            create_time_ms=now_ms - 1200_000,
        )
        mentioned = fake.add_message(
            "om_fake_hist_4",
            chat_id="oc_fake_eng",
            chat_type="group",
            content={"text": "@_user_1 can you review the migration?"},
            sender_open_id=bob.open_id,
            create_time_ms=now_ms - 600_000,
        )
        mentioned.mentions = [
            {"key": "@_user_1", "id": alice.open_id, "id_type": "open_id", "name": alice.name}
        ]
        for number, text in enumerate(
            ("Reorg: the Berlin office closes in May", "Keep the reorg quiet until the all-hands"),
            start=1,
        ):
            fake.add_message(
                f"om_fake_board_{number}",
                chat_id="oc_fake_board",
                chat_type="group",
                content={"text": text},
                sender_open_id=bob.open_id,
                create_time_ms=now_ms - (3 - number) * 900_000,
            )
        fake.add_message(
            "om_fake_hist_5",
            chat_id="oc_fake_hr",
            chat_type="group",
            content={"text": "salary review"},
            sender_open_id=bob.open_id,
        )

    def _seed_calendar(self, hour: int) -> None:
        """The bot's calendar; each event's attendees are who sees it in Feishu."""
        self.calendars[BOT_CALENDAR_ID] = FakeCalendar(BOT_CALENDAR_ID, "larkgate", "primary")
        self.calendars["feishu.cn_fakeprivate@group.calendar.feishu.cn"] = FakeCalendar(
            "feishu.cn_fakeprivate@group.calendar.feishu.cn", "Board", role="free_busy_reader"
        )
        sync = self.add_event(
            "Weekly sync",
            hour + DAY_S,
            hour + DAY_S + HOUR_S,
            location={"name": "Room 301"},
            description="Agenda in the doc",
        )
        self.invite(sync, chats=("oc_fake_eng",))
        review = self.add_event("Design review", hour + 2 * DAY_S, hour + 2 * DAY_S + 2 * HOUR_S)
        self.invite(review, people=("ou_fake_alice", "ou_fake_bob"))
        retro = self.add_event("Retro", hour - 3 * DAY_S, hour - 3 * DAY_S + HOUR_S)
        self.invite(retro, chats=("oc_fake_eng",))
        cancelled = self.add_event(
            "Cancelled 1:1",
            hour + DAY_S + 2 * HOUR_S,
            hour + DAY_S + 3 * HOUR_S,
            status="cancelled",
        )
        self.invite(cancelled, people=("ou_fake_alice",))
        # Bob alone was invited: nobody else may read it through the bot.
        briefing = self.add_event(
            "Reorg briefing",
            hour + DAY_S + 3 * HOUR_S,
            hour + DAY_S + 4 * HOUR_S,
            description="Berlin office closure",
        )
        self.invite(briefing, people=("ou_fake_bob",))
        offsite = time.strftime("%Y-%m-%d", time.gmtime(hour + 4 * DAY_S))
        offsite_end = time.strftime("%Y-%m-%d", time.gmtime(hour + 5 * DAY_S))
        event = self.add_event("Team offsite", 0, 0)
        event.start, event.end = {"date": offsite}, {"date": offsite_end}
        self.invite(event, chats=("oc_fake_eng", "oc_fake_launch"))

    def _seed_people_calendars(self, alice: FakeUser, bob: FakeUser, hour: int) -> None:
        """Alice's and Bob's own calendars: each sees only theirs (Bob's board prep is
        his alone), and the free/busy of both."""
        mine = self.user_calendar(alice.open_id).calendar_id
        self.add_event(
            "1:1 with Bob",
            hour + DAY_S + 3 * HOUR_S,
            hour + DAY_S + 3 * HOUR_S + 1800,
            calendar_id=mine,
        )
        self.add_event(
            "Dentist",
            hour + 2 * DAY_S + 5 * HOUR_S,
            hour + 2 * DAY_S + 6 * HOUR_S,
            calendar_id=mine,
            location={"name": "Smile clinic"},
        )
        self.add_event(
            "Focus time",
            hour + DAY_S + 5 * HOUR_S,
            hour + DAY_S + 7 * HOUR_S,
            calendar_id=mine,
            free_busy_status="free",
        )
        self.add_event(
            "Cancelled lunch",
            hour + DAY_S + 4 * HOUR_S,
            hour + DAY_S + 5 * HOUR_S,
            calendar_id=mine,
            status="cancelled",
        )
        self.add_event(
            "Board prep",
            hour + DAY_S + HOUR_S,
            hour + DAY_S + 2 * HOUR_S,
            calendar_id=self.user_calendar(bob.open_id).calendar_id,
            description="Salary bands for next year",
        )

    def _seed_people_tasks(self, alice: FakeUser, bob: FakeUser, hour: int, now_ms: int) -> None:
        """Tasks people made with their own tokens, each assigned to its maker."""

        def assignee(user: FakeUser) -> list[dict[str, str]]:
            return [{"id": user.open_id, "type": "user", "role": "assignee"}]

        self.add_task(
            "Write the migration plan",
            by_app=False,
            creator=alice.open_id,
            members=assignee(alice),
            due_ms=(hour + 3 * DAY_S) * 1000,
        )
        self.add_task(
            "Submit expense report",
            by_app=False,
            creator=alice.open_id,
            members=assignee(alice),
            completed_ms=now_ms - 2 * DAY_S * 1000,
        )
        self.add_task("Review Q3 budget", by_app=False, creator=bob.open_id, members=assignee(bob))

    def _seed_documents(self, alice: FakeUser, bob: FakeUser, now: int) -> None:
        both = {alice.open_id, bob.open_id}
        self.add_document(
            "doxcnFakeHandbook",
            "Team handbook",
            "Welcome to the team.\nOn-call rotates weekly; the schedule is in the Base.\n"
            "Deploys happen Tuesday and Thursday.",
            readers=set(both),
            owner_open_id=bob.open_id,
            chats={"oc_fake_eng"},
            updated_s=now - 5 * DAY_S,
        )
        self.add_document(
            "doxcnFakeSecret",
            "Board minutes",
            "Confidential: the on-call bonus doubles next year.",
            app_has_access=False,
            readers={bob.open_id},
            owner_open_id=bob.open_id,
            updated_s=now - DAY_S,
        )
        self.add_document(
            "doxcnFakeBudget",
            "Budget 2026",
            "Marketing spend drops by 40% next quarter.",
            readers={bob.open_id},
            owner_open_id=bob.open_id,
            updated_s=now - DAY_S,
        )
        self.add_document(
            "doxcnFakeLaunchPlan",
            "Launch plan",
            "The press release goes out on the 12th.",
            readers={alice.open_id},
            owner_open_id=alice.open_id,
            chats={"oc_fake_launch"},
            updated_s=now - 3 * DAY_S,
        )
        self.add_document(
            "doxcnFakeRunbook",
            "On-call runbook",
            "Page the on-call engineer first.\nRoll back before you debug.",
            app_has_access=False,
            readers=set(both),
            owner_open_id=alice.open_id,
            wiki_space_id="7034502641455497244",
            node_token="wikcnFakeRunbook",
            updated_s=now - 2 * DAY_S,
        )

    def _seed_tasks(self, alice: FakeUser, hour: int, now_ms: int) -> None:
        """The app's tasks and tasklists; a task's members are who sees it in Feishu, and
        a tasklist's members see all its tasks."""
        self.tasklists["fake-tasklist-launch"] = FakeTasklist(
            "fake-tasklist-launch",
            "Launch",
            members=[{"id": "oc_fake_launch", "type": "chat", "role": "viewer"}],
        )
        self.tasklists["fake-tasklist-secret"] = FakeTasklist(
            "fake-tasklist-secret", "Secret", app_is_member=False
        )
        self.tasklists["fake-tasklist-leads"] = FakeTasklist(
            "fake-tasklist-leads",
            "Leads",
            members=[{"id": "ou_fake_bob", "type": "user", "role": "editor"}],
        )
        assignee = [{"id": alice.open_id, "type": "user", "role": "assignee"}]
        self.add_task(
            "Prepare launch checklist",
            due_ms=(hour + 2 * DAY_S) * 1000,
            members=assignee,
            tasklist_guids=["fake-tasklist-launch"],
        )
        self.add_task(
            "Renew TLS certificate",
            completed_ms=now_ms - DAY_S * 1000,
            members=[
                {"id": "ou_fake_bob", "type": "user", "role": "assignee"},
                {"id": alice.open_id, "type": "user", "role": "follower"},
            ],
        )
        # Bob's alone: nobody else may read it through the bot.
        self.add_task(
            "Draft the reorg memo",
            members=[{"id": "ou_fake_bob", "type": "user", "role": "assignee"}],
            tasklist_guids=["fake-tasklist-leads"],
        )
        self.add_task("Book the venue", by_app=False, tasklist_guids=["fake-tasklist-launch"])

    def _seed_base(self, alice: FakeUser, bob: FakeUser, hour: int) -> None:
        table = FakeBitableTable(
            "tblFakeTasks",
            "Tasks",
            {
                "Name": "text",
                "Status": "single_select",
                "Owner": "person",
                "Points": "number",
                "Due": "date",
                "Tags": "multi_select",
                "Done": "checkbox",
                "Link": "url",
            },
            options={
                "Status": ["Todo", "In progress", "Done"],
                "Tags": ["backend", "frontend", "ops"],
            },
        )
        both = {alice.open_id, bob.open_id}
        self.bitables["bascnFakeProjects"] = FakeBitableApp(
            "bascnFakeProjects",
            "Projects",
            {table.table_id: table},
            readers=set(both),
            owner_open_id=alice.open_id,
            chats={"oc_fake_eng"},
        )
        self.bitables["bascnFakeLocked"] = FakeBitableApp(
            "bascnFakeLocked",
            "Payroll",
            {"tblFakePay": FakeBitableTable("tblFakePay", "Pay", {"Name": "text"})},
            app_has_access=False,
        )
        # Shared with both, but with advanced permissions: who sees which rows is set per
        # role inside the Base, which no app-token call reveals.
        levels = FakeBitableTable("tblFakeLevels", "Levels", {"Name": "text", "Level": "text"})
        levels.records.append(
            {"record_id": "recFakeLevel1", "fields": {"Name": "Bob", "Level": "L7"}}
        )
        self.bitables["bascnFakeLevels"] = FakeBitableApp(
            "bascnFakeLevels",
            "Levels",
            {levels.table_id: levels},
            readers=set(both),
            owner_open_id=bob.open_id,
            is_advanced=True,
        )
        rows = [
            ("Migrate the database", "In progress", alice, 8, ["backend"], False),
            ("New landing page", "Todo", bob, 5, ["frontend"], False),
            ("Rotate on-call keys", "Done", alice, 2, ["ops", "backend"], True),
            ("Fix login bug", "Done", bob, 3, ["frontend"], True),
        ]
        for i, (name, status, owner, points, tags, done) in enumerate(rows):
            self.add_record(
                "bascnFakeProjects",
                "tblFakeTasks",
                {
                    "Name": name,
                    "Status": status,
                    "Owner": [{"id": owner.open_id}],
                    "Points": points,
                    "Due": (hour + (i + 1) * DAY_S) * 1000,
                    "Tags": tags,
                    "Done": done,
                    "Link": {"link": f"https://example.invalid/{i}", "text": f"ticket {i}"},
                },
            )

    # -- routes ---------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, Any]]:
        users = "/open-apis/contact/v3/users"
        calendars = "/open-apis/calendar/v4/calendars"
        records = "/open-apis/bitable/v1/apps/{app_token}/tables/{table_id}/records"
        docs = "/open-apis/docx/v1/documents"
        return [
            ("POST", users + "/batch_get_id", self._batch_get_id),
            ("GET", users + "/batch", self._batch_users),
            ("GET", users + "/find_by_department", self._find_by_department),
            ("GET", "/open-apis/im/v1/chats", self._list_chats),
            ("GET", "/open-apis/im/v1/chats/{chat_id}", self._get_chat),
            ("GET", "/open-apis/im/v1/chats/{chat_id}/members", self._chat_members),
            ("GET", "/open-apis/im/v1/messages", self._list_messages),
            ("POST", calendars + "/primary", self._primary_calendar),
            ("GET", calendars + "/{calendar_id}/events", self._list_events),
            ("POST", calendars + "/{calendar_id}/events", self._create_event),
            ("POST", calendars + "/{calendar_id}/events/{event_id}/attendees", self._add_attendees),
            ("GET", calendars + "/{calendar_id}/events/{event_id}/attendees", self._list_attendees),
            ("POST", "/open-apis/calendar/v4/freebusy/batch", self._freebusy_batch),
            ("GET", "/open-apis/task/v1/tasks", self._list_tasks_v1),
            ("GET", "/open-apis/task/v2/tasks", self._my_tasks),
            ("PATCH", "/open-apis/task/v2/tasks/{task_guid}", self._patch_task),
            ("POST", "/open-apis/search/v2/doc_wiki/search", self._search_doc_wiki),
            ("POST", "/open-apis/search/v2/message", self._search_messages),
            ("GET", "/open-apis/task/v2/tasklists/{tasklist_guid}", self._get_tasklist),
            ("GET", "/open-apis/task/v2/tasklists/{tasklist_guid}/tasks", self._tasklist_tasks),
            ("POST", "/open-apis/task/v2/tasks", self._create_task),
            ("GET", "/open-apis/bitable/v1/apps/{app_token}", self._get_app),
            ("POST", records + "/search", self._search_records),
            ("POST", records, self._create_record),
            ("GET", docs + "/{document_id}/raw_content", self._raw_content),
            ("POST", docs, self._create_document),
            ("POST", docs + "/{document_id}/blocks/{block_id}/children", self._create_blocks),
            ("GET", "/open-apis/drive/v1/permissions/{token}/members", self._permission_members),
            ("POST", "/open-apis/drive/v1/metas/batch_query", self._batch_query_metas),
        ]
