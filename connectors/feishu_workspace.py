"""The Feishu workspace as tools: people, chats, calendar, tasks, Base and docs.

Every call goes through the bot's own :class:`~bot.feishu.client.FeishuClient`
(``FeishuClient.call``), so it carries the app's *tenant* token, is counted, retried
once on a token error and mapped to the ``FeishuError`` tree; requests are built with
lark-oapi's generated builders. Failures become ``ToolError`` messages that say what
to do (which scope to grant, that the bot must join the chat, ...).

The app acts as itself, not as the person asking, and that shapes what is possible:

- **Users**: ``search/v1/user`` (search by name) accepts only a *user* token. Email and
  mobile lookups use ``contact.v3.user.batch_get_id`` then ``contact.v3.user.batch``
  for names; a name is matched against the direct members of one department
  (``contact.v3.user.find_by_department``, setting ``user_search_department_id``, the
  root ``"0"`` by default), within the app's contact range.
- **Tasks**: ``task.v2.task.list`` ("my tasks") accepts only a user token. Listing uses
  ``task.v1.task.list``, which with a tenant token returns the tasks the app created,
  or ``task.v2.tasklist.tasks`` for a tasklist the app is a member of.
- **Calendar**: ``"primary"`` is the *bot's* primary calendar
  (``calendar.v4.calendar.primary``); people see its events only as invited attendees.
- **Docs, Base**: the app reads only what was shared with it; a document it creates
  belongs to the app, so create it in a folder people can open (``folder_token``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Annotated, Any, Literal
from uuid import UUID, uuid5

import lark_oapi as lark
from lark_oapi.api.bitable.v1 import (
    AppTableRecord,
    Condition,
    CreateAppTableRecordRequest,
    FilterInfo,
    SearchAppTableRecordRequest,
    SearchAppTableRecordRequestBody,
    Sort,
)
from lark_oapi.api.calendar.v4 import (
    CalendarEvent,
    CalendarEventAttendee,
    CreateCalendarEventAttendeeRequest,
    CreateCalendarEventAttendeeRequestBody,
    CreateCalendarEventRequest,
    EventLocation,
    ListCalendarEventRequest,
    PrimaryCalendarRequest,
    TimeInfo,
)
from lark_oapi.api.contact.v3 import (
    BatchGetIdUserRequest,
    BatchGetIdUserRequestBody,
    BatchUserRequest,
    FindByDepartmentUserRequest,
)
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
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    ListChatRequest,
    ListMessageRequest,
)
from lark_oapi.api.task.v1 import ListTaskRequest as ListTaskV1Request
from lark_oapi.api.task.v2 import (
    CreateTaskRequest,
    Due,
    InputTask,
    Member,
    TaskInTasklistInfo,
    TasksTasklistRequest,
)
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.feishu.client import FeishuClient
from bot.feishu.errors import (
    FeishuError,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuTokenInvalid,
    FeishuTransportError,
    hint_for,
)
from bot.timezones import check_time_zone, time_zone
from connectors.base import (
    Connector,
    ConnectorContext,
    ConnectorSettings,
    ConnectorStatus,
    ToolError,
    action,
)

UserIdType = Literal["open_id", "union_id", "user_id"]

_IDS = UUID("5f0c7d52-7a51-4d0c-9d0e-6c1f7a3f2b10")  # namespace of our idempotency keys
_EVENT_WINDOW = 500  # events asked for per time range (Feishu answers one page, no paging)
_MAX_RANGE = timedelta(days=730)  # Feishu refuses event ranges over 2 years
_BLOCKS_PER_CALL = 50  # docx block children create takes at most 50 blocks
_CELL_CHARS = 200
_MESSAGE_CHARS = 500


_FIELDS_HELP = (
    'Column name to value, e.g. {"Name": "Ship v2", "Points": 3}. Values by column type: '
    "text: a string; number: a number; single select: the option's name; multi select: "
    "a list of names; date: epoch milliseconds; checkbox: true/false; person: "
    '[{"id": "ou_..."}]; link: {"link": url, "text": label}'
)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_MOBILE = re.compile(r"^\+?[\d\s-]{6,20}$")
_DOCX_URL = re.compile(r"/docx/([A-Za-z0-9]+)")
_BASE_URL = re.compile(r"/base/([A-Za-z0-9]+)")
_MENTION = re.compile(r"@_user_\d+")


class FeishuWorkspaceSettings(ConnectorSettings):
    """``FEISHU_CONNECTOR_<NAME>`` in the environment, or ``[connectors.feishu]``."""

    calendar_id: str = "primary"  # "primary": the bot's own primary calendar
    user_id_type: UserIdType = "open_id"
    timezone: str = "Asia/Shanghai"  # for times without an offset, and in results
    page_size: int = Field(default=20, ge=1, le=50)  # default number of items a list shows
    user_search_department_id: str = "0"  # name search scans this department's members
    user_search_max_pages: int = Field(default=4, ge=1, le=20)  # of 50 members each
    document_max_chars: int = Field(default=8000, ge=200, le=100_000)
    resolve_sender_names: bool = True  # one contact call per history read

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_time_zone(value)


class BitableCondition(BaseModel):
    """One Base filter condition, as Feishu's record search takes it."""

    model_config = ConfigDict(extra="forbid")

    field_name: str = Field(description="Column name, exactly as in the table")
    operator: Literal[
        "is",
        "isNot",
        "contains",
        "doesNotContain",
        "isEmpty",
        "isNotEmpty",
        "isGreater",
        "isGreaterEqual",
        "isLess",
        "isLessEqual",
    ] = "is"
    value: list[str] = Field(
        default_factory=list,
        description='Values as strings; dates: ["ExactDate", "<epoch ms>"], or ["Today"]',
    )


class FeishuWorkspace(Connector):
    """People, chats, calendar, tasks, Base and docs of the bot's Feishu tenant."""

    name = "feishu"
    Settings = FeishuWorkspaceSettings

    def __init__(self, settings: FeishuWorkspaceSettings, context: ConnectorContext) -> None:
        super().__init__(settings, context)
        self.settings: FeishuWorkspaceSettings = settings
        self._tz: tzinfo = time_zone(settings.timezone)
        self._primary_calendar: str | None = None

    async def check(self) -> ConnectorStatus:
        """One cheap call (the first chat of the bot): credentials, reachability, scope."""
        tools = len(self.tools())
        client = self.context.feishu
        if client is None:
            return ConnectorStatus(self.name, False, "no Feishu client configured", tools)
        try:
            await client.call("im.chat.list", ListChatRequest.builder().page_size(1).build())
        except FeishuScopeMissing as exc:
            detail = (
                f"the Feishu app lacks a permission scope ({_scope_text(exc)}); "
                "add it in the Feishu developer console"
            )
            return ConnectorStatus(self.name, False, detail, tools)
        except FeishuError as exc:
            return ConnectorStatus(self.name, False, f"Feishu check failed: {exc}", tools)
        return ConnectorStatus(self.name, True, "ready", tools)

    # -- people and chats ----------------------------------------------------------------

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
        parts = [part.strip() for part in re.split(r"[,;]", query) if part.strip()]
        exact = bool(parts) and all(_EMAIL.match(p) or _MOBILE.match(p) for p in parts)
        if exact:
            return await self._users_by_contact(parts, limit)
        return await self._users_by_name(query.strip(), limit)

    @action(side_effect="read")
    async def feishu_list_chats(
        self,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
        page_token: str | None = None,
    ) -> str:
        """List the group chats the bot is a member of, most recently active first.

        Args:
            limit: The most chats to return (default: the configured page size).
            page_token: From a previous result's "more" line, to continue the list.
        """
        limit = limit or self.settings.page_size
        request = (
            ListChatRequest.builder()
            .user_id_type(self.settings.user_id_type)
            .sort_type("ByActiveTimeDesc")
            .page_size(limit)
        )
        if page_token:
            request.page_token(page_token)
        data = await self._data("im.chat.list", request.build(), "Listing chats")
        chats = _items(data)
        if not chats:
            return "The bot is not a member of any group chat."
        lines = [f"Chats the bot is in ({len(chats)} shown):"]
        for chat in chats:
            bits = [str(chat.get("name") or "(no name)"), f"chat_id {chat.get('chat_id')}"]
            if chat.get("description"):
                bits.append(_clip(str(chat["description"]), 120))
            if chat.get("external"):
                bits.append("external")
            lines.append("- " + " · ".join(bits))
        lines += _more(data)
        return "\n".join(lines)

    @action(side_effect="read")
    async def feishu_get_chat_history(
        self,
        chat_id: Annotated[str, Field(min_length=1)],
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
        start_time: str | None = None,
        end_time: str | None = None,
    ) -> str:
        """Read the latest messages of a chat the bot is in, newest first.

        Args:
            chat_id: The chat's id (oc_...), e.g. from feishu_list_chats.
            limit: The most messages to return (default: the configured page size).
            start_time: Only messages from this time: ISO 8601 (2025-05-01T09:00) or unix seconds.
            end_time: Only messages at or before this time: ISO 8601 or unix seconds.
        """
        limit = limit or self.settings.page_size
        messages: list[dict[str, Any]] = []
        page_token = ""
        while len(messages) < limit:
            request = (
                ListMessageRequest.builder()
                .container_id_type("chat")
                .container_id(chat_id)
                .sort_type("ByCreateTimeDesc")
                .page_size(min(50, limit - len(messages)))
            )
            if start_time:
                request.start_time(str(self._epoch(start_time, "start_time")))
            if end_time:
                request.end_time(str(self._epoch(end_time, "end_time")))
            if page_token:
                request.page_token(page_token)
            data = await self._data("im.message.list", request.build(), "Reading chat history")
            messages += _items(data)
            page_token = str(data.get("page_token") or "")
            if not data.get("has_more") or not page_token:
                break
        if not messages:
            return f"No messages in chat {chat_id} for that time range."
        names = await self._sender_names(messages)
        lines = [f"Last {len(messages)} messages in chat {chat_id} (newest first, {self._tz}):"]
        for message in messages[:limit]:
            lines.append(self._render_message(message, names))
        return "\n".join(lines)

    @action(side_effect="write")
    async def feishu_send_message(
        self,
        receive_id: Annotated[str, Field(min_length=1)],
        text: Annotated[str, Field(min_length=1, max_length=30_000)],
        format: Literal["text", "markdown"] = "text",
        receive_id_type: Literal["chat_id", "open_id", "union_id", "user_id", "email"]
        | None = None,
        uuid: Annotated[str | None, Field(max_length=50)] = None,
    ) -> str:
        """Send a message as the bot to a group chat or a person.
        Sending is idempotent: the same uuid within an hour sends nothing new. Without a
        uuid, one is derived from the recipient and the text, so an identical message to
        the same recipient is sent once an hour.

        Args:
            receive_id: A chat_id (oc_...), open_id (ou_...), union_id (on_...), user_id or email.
            text: The message. With format "markdown" it is rendered (bold, links, lists, code).
            format: "text" for plain text, "markdown" for a rich-text (post) message.
            receive_id_type: The kind of receive_id; guessed from its prefix when left out.
            uuid: Idempotency key of at most 50 characters.
        """
        id_type = receive_id_type or _receive_id_type(receive_id)
        if format == "markdown":
            msg_type = "post"
            post = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
            content = json.dumps(post, ensure_ascii=False)
        else:
            msg_type, content = "text", json.dumps({"text": text}, ensure_ascii=False)
        key = uuid or _stable_id("message", id_type, receive_id, msg_type, content)
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(receive_id)
            .msg_type(msg_type)
            .content(content)
            .uuid(key)
            .build()
        )
        request = CreateMessageRequest.builder().receive_id_type(id_type).request_body(body)
        data = await self._data("im.message.create", request.build(), "Sending the message")
        message_id = data.get("message_id") or "?"
        chat = data.get("chat_id") or receive_id
        return f"Sent message {message_id} to {id_type} {receive_id} (chat {chat}); uuid {key}."

    # -- calendar ------------------------------------------------------------------------

    @action(side_effect="read")
    async def feishu_list_calendar_events(
        self,
        start: str | None = None,
        end: str | None = None,
        calendar_id: str | None = None,
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
    ) -> str:
        """List the events of a calendar in a time range (default: the next 7 days).

        Args:
            start: Range start: ISO 8601 (2025-05-01T09:00) or unix time; default: now.
            end: Range end, same formats; default 7 days after the start.
            calendar_id: The calendar; default the configured one ("primary": the bot's calendar).
            limit: The most events to return, earliest first (default: the page size).
        """
        limit = limit or self.settings.page_size
        begin = self._when(start, "start") if start else datetime.now(self._tz)
        until = self._when(end, "end") if end else begin + timedelta(days=7)
        if until <= begin:
            raise ToolError("end must be after start")
        if until - begin > _MAX_RANGE:
            raise ToolError("the time range may span at most 2 years; narrow it")
        calendar = await self._calendar_id(calendar_id)
        request = (
            ListCalendarEventRequest.builder()
            .calendar_id(calendar)
            .start_time(str(int(begin.timestamp())))
            .end_time(str(int(until.timestamp())))
            .page_size(_EVENT_WINDOW)
            .user_id_type(self.settings.user_id_type)
            .build()
        )
        data = await self._data("calendar.event.list", request, "Listing calendar events")
        raw = _items(data)
        events = [e for e in raw if e.get("status") != "cancelled"]
        events.sort(key=lambda e: _event_start(e))
        span = f"{_fmt(begin, self._tz)} to {_fmt(until, self._tz)} ({self._tz})"
        if not events:
            return f"No events on calendar {calendar} from {span}."
        lines = [f"Events on calendar {calendar} from {span}, {min(limit, len(events))} shown:"]
        lines += [self._render_event(event) for event in events[:limit]]
        if len(events) > limit or len(raw) >= _EVENT_WINDOW:
            lines.append("[More events in this range: narrow the range to see them.]")
        return "\n".join(lines)

    @action(side_effect="write")
    async def feishu_create_calendar_event(
        self,
        summary: Annotated[str, Field(min_length=1, max_length=1000)],
        start: str,
        end: str | None = None,
        description: str | None = None,
        location: str | None = None,
        attendees: list[str] | None = None,
        calendar_id: str | None = None,
    ) -> str:
        """Create an event on a calendar and invite people or group chats.
        On the bot's own calendar ("primary"), people see the event only when invited.
        Creating the same event twice (same calendar, title and times) makes one event.

        Args:
            summary: The event title.
            start: Start time: ISO 8601 (2025-05-01T14:00, offset optional) or unix seconds.
            end: End time, same formats; default one hour after the start.
            description: Details shown on the event.
            location: A place name, e.g. a meeting room.
            attendees: Whom to invite: open_ids (ou_...) of people, chat_ids (oc_...) of groups.
            calendar_id: The calendar; default the configured one ("primary": the bot's calendar).
        """
        begin = self._when(start, "start")
        until = self._when(end, "end") if end else begin + timedelta(hours=1)
        if until <= begin:
            raise ToolError("end must be after start")
        calendar = await self._calendar_id(calendar_id)
        zone = str(self._tz)
        event = (
            CalendarEvent.builder()
            .summary(summary)
            .start_time(_time_info(begin, zone))
            .end_time(_time_info(until, zone))
            .need_notification(True)
            .attendee_ability("can_see_others")
        )
        if description:
            event.description(description)
        if location:
            event.location(EventLocation.builder().name(location).build())
        key = _stable_id("event", calendar, summary, begin.timestamp(), until.timestamp())
        request = (
            CreateCalendarEventRequest.builder()
            .calendar_id(calendar)
            .idempotency_key(key)
            .user_id_type(self.settings.user_id_type)
            .request_body(event.build())
            .build()
        )
        data = await self._data("calendar.event.create", request, "Creating the event")
        created = _object(data, "event")
        event_id = str(created.get("event_id") or "")
        lines = [
            f'Created event "{summary}" (event_id {event_id}) on calendar {calendar}: '
            f"{_fmt(begin, self._tz)} to {_fmt(until, self._tz)} ({zone})."
        ]
        if attendees:
            lines.append(await self._invite(calendar, event_id, attendees))
        elif self.settings.calendar_id == "primary" and calendar_id in (None, "primary"):
            lines.append("Nobody is invited: on the bot's calendar only attendees see it.")
        return "\n".join(lines)

    # -- tasks ---------------------------------------------------------------------------

    @action(side_effect="read")
    async def feishu_list_tasks(
        self,
        tasklist_guid: str | None = None,
        completed: bool | None = None,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
    ) -> str:
        """List tasks: those of a tasklist the app belongs to, or those the app created.
        Feishu lets an app (unlike a person) list only the tasks it created itself or the
        tasks of a tasklist it is a member of.

        Args:
            tasklist_guid: A tasklist's guid; without it, the tasks this app created.
            completed: true: only completed tasks; false: only open ones; leave out for both.
            limit: The most tasks to return (default: the configured page size).
        """
        limit = limit or self.settings.page_size
        if tasklist_guid:
            request = (
                TasksTasklistRequest.builder()
                .tasklist_guid(tasklist_guid)
                .page_size(limit)
                .user_id_type(self.settings.user_id_type)
            )
            if completed is not None:
                request.completed(completed)
            data = await self._data("task.tasklist.tasks", request.build(), "Listing tasks")
            tasks = [_task_v2(t) for t in _items(data)]
            where = f"in tasklist {tasklist_guid}"
        else:
            request_v1 = (
                ListTaskV1Request.builder()
                .page_size(limit)
                .user_id_type(self.settings.user_id_type)
            )
            if completed is not None:
                request_v1.task_completed(completed)
            data = await self._data("task.task.list", request_v1.build(), "Listing tasks")
            tasks = [_task_v1(t) for t in _items(data)]
            where = "created by this app"
        if not tasks:
            return f"No tasks {where}." + (
                "" if tasklist_guid else " Pass a tasklist_guid to list a shared tasklist."
            )
        lines = [f"Tasks {where} ({len(tasks)} shown):"]
        for done, summary, due, guid in tasks:
            due_text = f" · due {_fmt(due, self._tz)}" if due else ""
            lines.append(
                f"- [{'x' if done else ' '}] {_clip(summary, 200)}{due_text} · guid {guid}"
            )
        lines += _more(data)
        return "\n".join(lines)

    @action(side_effect="write")
    async def feishu_create_task(
        self,
        summary: Annotated[str, Field(min_length=1, max_length=3000)],
        description: str | None = None,
        due: str | None = None,
        assignees: list[str] | None = None,
        tasklist_guid: str | None = None,
    ) -> str:
        """Create a Feishu task, optionally assigned to people and put in a tasklist.
        People see a task only when they are assigned (or follow it).

        Args:
            summary: The task title.
            description: Details.
            due: Due time: ISO 8601 (2025-05-01T18:00) or unix seconds.
            assignees: open_ids (ou_...) of the people to assign.
            tasklist_guid: Put the task in this tasklist (the app must be a member).
        """
        task = InputTask.builder().summary(summary)
        if description:
            task.description(description)
        due_at = self._when(due, "due") if due else None
        if due_at is not None:
            stamp = int(due_at.timestamp() * 1000)
            task.due(Due.builder().timestamp(stamp).is_all_day(False).build())
        people = list(assignees or [])
        if people:
            task.members(
                [Member.builder().id(p).type("user").role("assignee").build() for p in people]
            )
        if tasklist_guid:
            task.tasklists([TaskInTasklistInfo.builder().tasklist_guid(tasklist_guid).build()])
        task.client_token(
            _stable_id("task", summary, description, due, sorted(people), tasklist_guid)
        )
        request = (
            CreateTaskRequest.builder()
            .user_id_type(self.settings.user_id_type)
            .request_body(task.build())
            .build()
        )
        data = await self._data("task.task.create", request, "Creating the task")
        created = _object(data, "task")
        lines = [f'Created task "{summary}" (guid {created.get("guid")}).']
        if created.get("url"):
            lines.append(f"Link: {created['url']}")
        if due_at is not None:
            lines.append(f"Due {_fmt(due_at, self._tz)} ({self._tz}).")
        lines.append(
            f"Assigned to {', '.join(people)}."
            if people
            else "Nobody is assigned: people see the task only once assigned."
        )
        return "\n".join(lines)

    # -- Base (bitable) ------------------------------------------------------------------

    @action(side_effect="read")
    async def feishu_search_bitable_records(
        self,
        app_token: Annotated[str, Field(min_length=1)],
        table_id: Annotated[str, Field(min_length=1)],
        conditions: list[BitableCondition] | None = None,
        conjunction: Literal["and", "or"] = "and",
        field_names: list[str] | None = None,
        sort_field: str | None = None,
        sort_desc: bool = False,
        view_id: str | None = None,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
        page_token: str | None = None,
    ) -> str:
        """Find records in a Feishu Base (bitable) table, optionally filtered and sorted.
        The app must have been added to the Base. Date columns show as dates.

        Args:
            app_token: The Base's app_token (bascn...), or the Base URL.
            table_id: The table's id (tbl...).
            conditions: Filters: [{"field_name": "Status", "operator": "is", "value": ["Done"]}].
            conjunction: "and": every condition must hold; "or": any.
            field_names: Only these columns in the result.
            sort_field: Sort by this column.
            sort_desc: Sort descending.
            view_id: Read through this view (ignored by Feishu when filtering or sorting).
            limit: The most records to return (default: the configured page size).
            page_token: From a previous result's "more" line, to continue.
        """
        limit = limit or self.settings.page_size
        app_token = _base_token(app_token)
        body = SearchAppTableRecordRequestBody.builder().automatic_fields(False)
        if view_id:
            body.view_id(view_id)
        if field_names:
            body.field_names(field_names)
        if sort_field:
            body.sort([Sort.builder().field_name(sort_field).desc(sort_desc).build()])
        if conditions:
            body.filter(
                FilterInfo.builder()
                .conjunction(conjunction)
                .conditions(
                    [
                        Condition.builder()
                        .field_name(c.field_name)
                        .operator(c.operator)
                        .value(c.value)
                        .build()
                        for c in conditions
                    ]
                )
                .build()
            )
        request = (
            SearchAppTableRecordRequest.builder()
            .app_token(app_token)
            .table_id(table_id)
            .user_id_type(self.settings.user_id_type)
            .page_size(limit)
            .request_body(body.build())
        )
        if page_token:
            request.page_token(page_token)
        data = await self._data("bitable.record.search", request.build(), "Searching records")
        records = _items(data)
        if not records:
            return f"No records in table {table_id} match."
        total = data.get("total")
        count = f"{len(records)} of {total}" if isinstance(total, int) else str(len(records))
        lines = [f"Records in table {table_id} ({count}):"]
        for record in records:
            fields = _fields_text(record.get("fields"), self._tz)
            lines.append(f"- {record.get('record_id')} · {fields}")
        lines += _more(data)
        return "\n".join(lines)

    @action(side_effect="write")
    async def feishu_create_bitable_record(
        self,
        app_token: Annotated[str, Field(min_length=1)],
        table_id: Annotated[str, Field(min_length=1)],
        fields: Annotated[dict[str, Any], Field(min_length=1, description=_FIELDS_HELP)],
    ) -> str:
        """Add a record (row) to a Feishu Base (bitable) table the app was added to.

        Args:
            app_token: The Base's app_token (bascn...), or the Base URL.
            table_id: The table's id (tbl...).
        """
        app_token = _base_token(app_token)
        request = (
            CreateAppTableRecordRequest.builder()
            .app_token(app_token)
            .table_id(table_id)
            .user_id_type(self.settings.user_id_type)
            .client_token(_stable_id("record", app_token, table_id, fields))
            .request_body(AppTableRecord.builder().fields(fields).build())
            .build()
        )
        data = await self._data("bitable.record.create", request, "Creating the record")
        record = _object(data, "record")
        written = _fields_text(record.get("fields") or fields, self._tz)
        return f"Created record {record.get('record_id')} in table {table_id}: {written}"

    # -- docs ----------------------------------------------------------------------------

    @action(side_effect="read", max_result_chars=101_000)
    async def feishu_read_document(
        self,
        document_id: Annotated[str, Field(min_length=1)],
    ) -> str:
        """Read the plain text of a Feishu document (docx) shared with the app.

        Args:
            document_id: The document's id (doxcn... or the token in its /docx/ URL), or its URL.
        """
        if "/wiki/" in document_id:
            raise ToolError(
                "wiki links are not supported here; open the page and use its /docx/ link or id"
            )
        match = _DOCX_URL.search(document_id)
        doc = match.group(1) if match else document_id.strip()
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
        document = _object(data, "document")
        doc = str(document.get("document_id") or "")
        lines = [f'Created document "{title}" (document_id {doc}).']
        blocks = _blocks(content or "")
        added = 0
        for start in range(0, len(blocks), _BLOCKS_PER_CALL):
            batch = blocks[start : start + _BLOCKS_PER_CALL]
            children = (
                CreateDocumentBlockChildrenRequest.builder()
                .document_id(doc)
                .block_id(doc)
                .document_revision_id(-1)
                .client_token(_stable_id("blocks", doc, start))
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
                lines.append(f"Only {added} of {len(blocks)} paragraphs were added. {exc}")
                break
            added += len(batch)
        else:
            if blocks:
                lines.append(f"Added {added} paragraphs.")
        if not folder_token:
            lines.append("It is in the app's own space: share it before people can open it.")
        return "\n".join(lines)

    # -- plumbing --------------------------------------------------------------------------

    def _client(self) -> FeishuClient:
        client = self.context.feishu
        if client is None:
            raise ToolError("the Feishu workspace tools are not configured (no Feishu client)")
        return client

    async def _data(self, endpoint: str, request: lark.BaseRequest, doing: str) -> dict[str, Any]:
        """The ``data`` of one call; any Feishu failure as a ToolError saying what to do."""
        try:
            body = await self._client().call(endpoint, request)
        except FeishuError as exc:
            raise _tool_error(exc, doing) from exc
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    def _when(self, value: str, name: str) -> datetime:
        """ISO 8601 (the configured zone when no offset is given) or unix seconds/ms."""
        text = value.strip()
        if re.fullmatch(r"\d{9,13}", text):
            number = int(text)
            return datetime.fromtimestamp(number / 1000 if number > 10**11 else number, self._tz)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ToolError(
                f"{name}: {value!r} is neither ISO 8601 (2025-05-01T14:00, "
                "2025-05-01T14:00+08:00) nor unix seconds"
            ) from None
        return moment if moment.tzinfo else moment.replace(tzinfo=self._tz)

    def _epoch(self, value: str, name: str) -> int:
        return int(self._when(value, name).timestamp())

    async def _calendar_id(self, calendar_id: str | None) -> str:
        wanted = (calendar_id or self.settings.calendar_id).strip()
        if wanted != "primary":
            return wanted
        if self._primary_calendar is None:
            request = PrimaryCalendarRequest.builder().user_id_type(self.settings.user_id_type)
            data = await self._data(
                "calendar.primary", request.build(), "Finding the bot's calendar"
            )
            found = [
                (item.get("calendar") or {}).get("calendar_id")
                for item in data.get("calendars") or []
                if isinstance(item, dict)
            ]
            if not found or not found[0]:
                raise ToolError("Feishu returned no primary calendar for the bot")
            self._primary_calendar = str(found[0])
        return self._primary_calendar

    async def _invite(self, calendar: str, event_id: str, ids: list[str]) -> str:
        people = [
            CalendarEventAttendee.builder().type("chat").chat_id(i).build()
            if i.startswith("oc_")
            else CalendarEventAttendee.builder().type("user").user_id(i).build()
            for i in ids
        ]
        request = (
            CreateCalendarEventAttendeeRequest.builder()
            .calendar_id(calendar)
            .event_id(event_id)
            .user_id_type(self.settings.user_id_type)
            .request_body(
                CreateCalendarEventAttendeeRequestBody.builder()
                .attendees(people)
                .need_notification(True)
                .build()
            )
            .build()
        )
        try:
            data = await self._data("calendar.attendee.create", request, "Inviting attendees")
        except ToolError as exc:
            return f"The event exists, but no one was invited. {exc}"
        invited = [
            str(a.get("display_name") or a.get("user_id") or a.get("chat_id"))
            for a in data.get("attendees") or []
            if isinstance(a, dict)
        ]
        return f"Invited: {', '.join(invited) or ', '.join(ids)}."

    async def _users_by_contact(self, parts: list[str], limit: int) -> str:
        emails = [p for p in parts if "@" in p][:50]
        mobiles = [p for p in parts if "@" not in p][:50]
        body = BatchGetIdUserRequestBody.builder().include_resigned(False)
        if emails:
            body.emails(emails)
        if mobiles:
            body.mobiles(mobiles)
        request = (
            BatchGetIdUserRequest.builder()
            .user_id_type(self.settings.user_id_type)
            .request_body(body.build())
            .build()
        )
        data = await self._data("contact.user.batch_get_id", request, "Looking up users")
        found: dict[str, str] = {}  # user id -> the email or mobile it matched
        missing = []
        for entry in data.get("user_list") or []:
            given = str(entry.get("email") or entry.get("mobile") or "")
            if entry.get("user_id"):
                found.setdefault(str(entry["user_id"]), given)
            else:
                missing.append(given)
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

    async def _users_by_name(self, name: str, limit: int) -> str:
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
            members = _items(data)
            scanned += len(members)
            matches += [u for u in members if _name_matches(u, needle)]
            page_token = str(data.get("page_token") or "")
            if len(matches) >= limit or not data.get("has_more") or not page_token:
                break
        if not matches:
            return (
                f'No user matching "{name}" among the {scanned} members of department '
                f"{department} the app can see. Name search covers only that department's "
                "direct members; an email or mobile number finds anyone in the app's range."
            )
        lines = [f'Users matching "{name}" ({min(limit, len(matches))} shown):']
        lines += [self._render_user(user) for user in matches[:limit]]
        return "\n".join(lines)

    async def _users(self, ids: list[str]) -> list[dict[str, Any]]:
        request = (
            BatchUserRequest.builder()
            .user_ids(ids[:50])
            .user_id_type(self.settings.user_id_type)
            .build()
        )
        return _items(await self._data("contact.user.batch", request, "Reading user profiles"))

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

    def _render_message(self, message: Mapping[str, Any], names: Mapping[str, str]) -> str:
        sender = message.get("sender") or {}
        sender_id = str(sender.get("id") or "?")
        if sender.get("sender_type") == "app":
            who = f"app {sender_id}"  # a bot: this one or another
        else:
            who = f"{names[sender_id]} ({sender_id})" if names.get(sender_id) else sender_id
        when = _fmt(_ms(message.get("create_time")), self._tz)
        text = (
            "[recalled]"
            if message.get("deleted")
            else _message_text(message.get("msg_type"), (message.get("body") or {}).get("content"))
        )
        text = _MENTION.sub(lambda m: _mention_name(m.group(0), message.get("mentions")), text)
        reply = " ↳" if message.get("parent_id") else ""
        return f"[{when}]{reply} {who}: {_clip(text, _MESSAGE_CHARS)}"

    def _render_event(self, event: Mapping[str, Any]) -> str:
        start, end = event.get("start_time") or {}, event.get("end_time") or {}
        if start.get("date"):
            last = end.get("date") or start["date"]
            when = start["date"] + (f" – {last}" if last != start["date"] else "") + " (all day)"
        else:
            begin = _fmt(_ms(start.get("timestamp"), 1000), self._tz)
            until = _fmt(_ms(end.get("timestamp"), 1000), self._tz)
            same_day = begin[:10] == until[:10]
            when = f"{begin}–{until[11:] if same_day else until}"
        bits = [when, _clip(str(event.get("summary") or "(no title)"), 200)]
        location = (event.get("location") or {}).get("name")
        if location:
            bits.append(str(location))
        if event.get("description"):
            bits.append(_clip(str(event["description"]), 120))
        if event.get("recurrence"):
            bits.append("recurring")
        bits.append(f"event_id {event.get('event_id')}")
        return "- " + " · ".join(bits)


# -- rendering and small helpers ----------------------------------------------------------


def _tool_error(exc: FeishuError, doing: str) -> ToolError:
    if isinstance(exc, FeishuScopeMissing):
        return ToolError(
            f"{doing} failed: the Feishu app lacks a permission scope ({_scope_text(exc)}). "
            "An admin must add it in the Feishu developer console and publish a new app "
            f"version. Feishu said: {exc.msg}"
        )
    if isinstance(exc, FeishuRateLimited):
        wait = f"{exc.retry_after:g} seconds" if exc.retry_after else "a little"
        return ToolError(f"{doing} failed: Feishu's rate limit was hit; wait {wait} and retry.")
    if isinstance(exc, FeishuTransportError):
        return ToolError(
            f"{doing} failed: Feishu could not be reached or gave no usable answer "
            f"({exc.msg}). Try again later."
        )
    if isinstance(exc, FeishuTokenInvalid):
        return ToolError(f"{doing} failed: Feishu refused the app's access token ({exc.msg}).")
    hint = hint_for(exc.code or 0)
    if not hint and exc.http_status is not None and exc.http_status >= 500:
        hint = "Feishu had a server error; try again later"
    said = f"Feishu said: {exc.msg} (code {exc.code})"
    return ToolError(f"{doing} failed: {hint}. {said}." if hint else f"{doing} failed. {said}.")


def _scope_text(exc: FeishuScopeMissing) -> str:
    if not exc.scopes:
        return "named in Feishu's message"
    if len(exc.scopes) == 1:
        return exc.scopes[0]
    return "any one of " + ", ".join(exc.scopes)


def _items(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = data.get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _more(data: Mapping[str, Any]) -> list[str]:
    token = data.get("page_token")
    if data.get("has_more") and token:
        return [f"[More: call again with page_token={token}]"]
    return []


def _time_info(moment: datetime, zone: str) -> TimeInfo:
    return TimeInfo.builder().timestamp(str(int(moment.timestamp()))).timezone(zone).build()


def _stable_id(*parts: Any) -> str:
    """A UUID derived from ``parts``: the same request twice gets the same key."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return str(uuid5(_IDS, text))


def _object(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a JSON object, else {} (Feishu omits empty ones)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _receive_id_type(receive_id: str) -> str:
    for prefix, kind in (("oc_", "chat_id"), ("ou_", "open_id"), ("on_", "union_id")):
        if receive_id.startswith(prefix):
            return kind
    if "@" in receive_id:
        return "email"
    raise ToolError(
        f"cannot tell what kind of id {receive_id!r} is; pass receive_id_type "
        "(chat_id, open_id, union_id, user_id or email)"
    )


def _base_token(value: str) -> str:
    match = _BASE_URL.search(value)
    return match.group(1) if match else value.strip()


def _name_matches(user: Mapping[str, Any], needle: str) -> bool:
    fields = ("name", "en_name", "nickname", "email")
    return any(needle in str(user.get(key) or "").casefold() for key in fields)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ms(value: Any, scale: int = 1) -> datetime | None:
    """A Feishu time string (ms by default; ``scale=1000`` for seconds) as a UTC datetime."""
    try:
        number = int(str(value))
    except ValueError:
        return None
    return datetime.fromtimestamp(number * scale / 1000, UTC) if number else None


def _fmt(moment: datetime | None, zone: tzinfo) -> str:
    return "?" if moment is None else moment.astimezone(zone).strftime("%Y-%m-%d %H:%M")


def _event_start(event: Mapping[str, Any]) -> float:
    start = event.get("start_time") or {}
    if start.get("timestamp"):
        return float(start["timestamp"])
    try:
        return datetime.fromisoformat(str(start.get("date"))).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def _task_v1(task: Mapping[str, Any]) -> tuple[bool, str, datetime | None, str]:
    due = (task.get("due") or {}).get("time")
    done = str(task.get("complete_time") or "0") != "0"
    return done, str(task.get("summary") or ""), _ms(due, 1000), str(task.get("id") or "")


def _task_v2(task: Mapping[str, Any]) -> tuple[bool, str, datetime | None, str]:
    due = (task.get("due") or {}).get("timestamp")
    done = str(task.get("completed_at") or "0") != "0"
    return done, str(task.get("summary") or ""), _ms(due), str(task.get("guid") or "")


def _mention_name(key: str, mentions: Any) -> str:
    for mention in mentions if isinstance(mentions, list) else []:
        if isinstance(mention, dict) and mention.get("key") == key and mention.get("name"):
            return f"@{mention['name']}"
    return key


def _message_text(msg_type: Any, raw: Any) -> str:
    """A message's content as one line of text (Feishu sends it as a JSON string)."""
    try:
        content = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return str(raw)
    if not isinstance(content, dict):
        return str(content)
    if msg_type == "text":
        return str(content.get("text") or "")
    if msg_type == "post":
        return _post_text(content)
    if msg_type == "interactive":
        texts = list(_strings(content, ("content", "text", "title")))
        return "[card] " + _clip(" ".join(texts), 300) if texts else "[card]"
    if msg_type in ("file", "media", "audio"):
        name = content.get("file_name")
        return f"[{msg_type}{' ' + str(name) if name else ''}]"
    labels = {"image": "[image]", "sticker": "[sticker]", "share_chat": "[shared a chat]"}
    return labels.get(str(msg_type), f"[{msg_type}]")


def _post_text(content: Mapping[str, Any]) -> str:
    # Received posts are {"title", "content"}; sent ones wrap that in a locale key.
    if "content" not in content:
        inner = next((v for v in content.values() if isinstance(v, dict)), {})
        content = inner
    rendered = {
        "text": lambda e: e.get("text", ""),
        "a": lambda e: e.get("text") or e.get("href", ""),
        "at": lambda e: "@" + str(e.get("user_name") or e.get("user_id") or ""),
        "md": lambda e: e.get("text", ""),
        "code_block": lambda e: e.get("text", ""),
        "img": lambda e: "[image]",
        "media": lambda e: "[video]",
        "emotion": lambda e: f":{e.get('emoji_type', '')}:",
        "hr": lambda e: "---",
    }
    paragraphs = []
    for paragraph in content.get("content") or []:
        parts = [
            str(rendered.get(str(e.get("tag")), lambda _: "")(e))
            for e in paragraph
            if isinstance(e, dict)
        ]
        paragraphs.append("".join(parts))
    title = str(content.get("title") or "")
    body = " / ".join(p for p in paragraphs if p)
    return f"{title}: {body}" if title else body


def _strings(node: Any, keys: Iterable[str]) -> Iterable[str]:
    wanted = tuple(keys)
    if isinstance(node, dict):
        for key, value in node.items():
            if key in wanted and isinstance(value, str) and value.strip():
                yield value.strip()
            else:
                yield from _strings(value, wanted)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value, wanted)


def _fields_text(fields: Any, zone: tzinfo) -> str:
    if not isinstance(fields, dict) or not fields:
        return "(no values)"
    parts = []
    for name, value in fields.items():
        text = _cell(value, zone)
        if text:
            parts.append(f"{name}: {_clip(text, _CELL_CHARS)}")
    return " · ".join(parts) or "(no values)"


def _cell(value: Any, zone: tzinfo) -> str:
    """One Base cell as text, whatever its column type."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and 10**12 <= value < 10**13:  # a date column: epoch ms
        return _fmt(datetime.fromtimestamp(value / 1000, UTC), zone)
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if value and all(isinstance(item, dict) and "type" in item for item in value):
            # Rich text: segments of one text (plain, @mention, link) read as one string.
            return "".join(str(item.get("text") or "") for item in value)
        return ", ".join(filter(None, (_cell(item, zone) for item in value)))
    if isinstance(value, dict):
        if "link" in value:
            return f"{value.get('text') or value['link']} ({value['link']})"
        for key in ("text", "name", "full_address", "en_name", "id"):
            if value.get(key):
                return str(value[key])
        if "link_record_ids" in value:
            return ", ".join(map(str, value["link_record_ids"]))
        if "value" in value:  # formula and lookup columns
            return _cell(value["value"], zone)
    return json.dumps(value, ensure_ascii=False)


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
        if not stripped:
            continue
        heading = re.match(r"^(#{1,3})\s+(.*)", stripped)
        if heading:
            level = len(heading.group(1))
            blocks.append(_block(2 + level, f"heading{level}", heading.group(2)))
        elif stripped in ("---", "***"):
            blocks.append(Block.builder().block_type(22).divider({}).build())
        elif re.match(r"^[-*]\s+", stripped):
            blocks.append(_block(12, "bullet", re.sub(r"^[-*]\s+", "", stripped)))
        elif re.match(r"^\d+[.)]\s+", stripped):
            blocks.append(_block(13, "ordered", re.sub(r"^\d+[.)]\s+", "", stripped)))
        else:
            blocks.append(_block(2, "text", stripped))
    if code:  # an unclosed fence still keeps its text
        blocks.append(_block(14, "code", "\n".join(code)))
    return blocks


def _block(block_type: int, kind: str, text: str) -> Block:
    run = TextElement.builder().text_run(TextRun.builder().content(text).build()).build()
    body = Text.builder().elements([run]).build()
    builder = Block.builder().block_type(block_type)
    getattr(builder, kind)(body)
    return builder.build()


__all__ = ["BitableCondition", "FeishuWorkspace", "FeishuWorkspaceSettings"]
