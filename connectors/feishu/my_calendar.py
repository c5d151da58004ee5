"""The asking person's own calendar, used as them (their user token): their events, when
people are busy, and a new event on their calendar.

The ``feishu_my_*`` tools never take whose calendar: it is always the asker's primary
calendar, found with their token (``calendars/primary`` answers the caller's own), so no
argument the model writes can point them at someone else's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any

from lark_oapi.api.calendar.v4 import (
    BatchFreebusyRequest,
    BatchFreebusyRequestBody,
    CreateCalendarEventRequest,
    ListCalendarEventRequest,
    PrimaryCalendarRequest,
)
from pydantic import Field

from bot.feishu.errors import FeishuError
from connectors.base import ToolError, action

from .calendar import EVENT_WINDOW, CalendarTools, attendees_request, invited_text
from .common import UserCall, items_of, object_of, stable_id
from .errors import user_tool_error
from .users import ME, UserTools

# The user permissions each tool asks the person for (Feishu's names, as its docs and the
# official clients use them): the primary-calendar lookup needs calendar:calendar:read.
READ_SCOPES = ("calendar:calendar:read", "calendar:calendar.event:read")
FREE_BUSY_SCOPES = ("calendar:calendar.free_busy:read",)
WRITE_SCOPES = (
    "calendar:calendar:read",
    "calendar:calendar.event:create",
    "calendar:calendar.event:update",  # inviting attendees
)
_MAX_FREE_BUSY = timedelta(days=90)  # ours: a longer free/busy answer helps no one
_MAX_PEOPLE = 10  # freebusy/batch takes 1 to 10 people


class MyCalendarTools(UserTools, CalendarTools):
    @action(side_effect="read", acts_as="user", scopes=READ_SCOPES)
    async def feishu_my_calendar_events(
        self,
        start: str | None = None,
        end: str | None = None,
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
    ) -> str:
        """List the events on the asking user's own Feishu calendar, read as them.
        Use it for "my calendar", "my meetings", "what do I have tomorrow".

        Args:
            start: Range start: ISO 8601 (2025-05-01T09:00) or unix time; default: now.
            end: Range end, same formats; default 7 days after the start.
            limit: The most events to return, earliest first (default: the page size).
        """
        limit = limit or self.settings.page_size
        begin, until = self._listing_range(start, end)

        async def work(user: UserCall) -> list[dict[str, Any]]:
            calendar = await _my_calendar(user)
            request = (
                ListCalendarEventRequest.builder()
                .calendar_id(calendar)
                .start_time(str(int(begin.timestamp())))
                .end_time(str(int(until.timestamp())))
                .page_size(EVENT_WINDOW)
                .user_id_type("open_id")
                .build()
            )
            return items_of(await user.data("calendar.event.list", request))

        raw = await self._as_user(READ_SCOPES, "read your calendar", "Reading your calendar", work)
        span = self._span(begin, until)
        return self._listing(
            raw,
            limit,
            empty=f"Nothing on your calendar from {span}.",
            heading=lambda shown: f"Your events from {span}, {shown} shown:",
        )

    @action(side_effect="read", acts_as="user", scopes=FREE_BUSY_SCOPES)
    async def feishu_my_free_busy(
        self,
        start: str | None = None,
        end: str | None = None,
        people: Annotated[list[str] | None, Field(max_length=_MAX_PEOPLE)] = None,
    ) -> str:
        """When the asking user (and colleagues) are busy in a time range, read as them:
        busy periods only, never what the events are. Use it to find a meeting time.

        Args:
            start: Range start: ISO 8601 (2025-05-01T09:00) or unix time; default: now.
            end: Range end, same formats; default 24 hours after the start (at most 90 days).
            people: Whose: "me" (the asker, the default), open_ids (ou_...), emails or names.
        """
        begin = self._when(start, "start") if start else datetime.now(self._tz)
        until = self._when(end, "end") if end else begin + timedelta(days=1)
        if until <= begin:
            raise ToolError("end must be after start")
        if until - begin > _MAX_FREE_BUSY:
            raise ToolError("free/busy covers at most 90 days; narrow the range")
        wanted = await self._people(people or [ME])

        async def work(user: UserCall) -> tuple[str, list[str], dict[str, Any]]:
            me = await user.open_id() if ME in wanted else ""
            ids = list(dict.fromkeys(me if p == ME else p for p in wanted))
            body = (
                BatchFreebusyRequestBody.builder()
                .time_min(begin.isoformat())
                .time_max(until.isoformat())
                .user_ids(ids)
                .include_external_calendar(True)
                .only_busy(True)
                .build()
            )
            request = (
                BatchFreebusyRequest.builder().user_id_type("open_id").request_body(body).build()
            )
            return me, ids, await user.data("calendar.freebusy.batch", request)

        me, ids, data = await self._as_user(
            FREE_BUSY_SCOPES, "see when you and others are busy", "Reading free/busy", work
        )
        names = await self._names(ids)
        busy = {
            str(entry.get("user_id")): entry.get("freebusy_items") or []
            for entry in data.get("freebusy_lists") or []
            if isinstance(entry, dict)
        }
        lines = [f"Busy times from {self._shown(begin)} to {self._shown(until)} ({self._tz}):"]
        for person in ids:
            who = names.get(person, person) + (" (you)" if person == me else "")
            lines.append(f"- {who}: {self._busy_text(busy.get(person) or [])}")
        return "\n".join(lines)

    @action(side_effect="write", acts_as="user", scopes=WRITE_SCOPES)
    async def feishu_my_create_event(
        self,
        summary: Annotated[str, Field(min_length=1, max_length=1000)],
        start: str,
        end: str | None = None,
        description: Annotated[str | None, Field(max_length=10_000)] = None,
        location: Annotated[str | None, Field(max_length=500)] = None,
        attendees: Annotated[list[str] | None, Field(max_length=50)] = None,
    ) -> str:
        """Create an event on the asking user's own Feishu calendar, as them (they are its
        organiser), and invite people or group chats. The same title and times twice make
        one event.

        Args:
            summary: The event title.
            start: Start time: ISO 8601 (2025-05-01T14:00, offset optional) or unix seconds.
            end: End time, same formats; default one hour after the start.
            description: Details shown on the event.
            location: A place name, e.g. a meeting room.
            attendees: Whom to invite: open_ids (ou_...), emails, names, or group chat_ids (oc_...).
        """
        begin = self._when(start, "start")
        until = self._when(end, "end") if end else begin + timedelta(hours=1)
        if until <= begin:
            raise ToolError("end must be after start")
        invitees = [p for p in await self._people(attendees or [], chats=True) if p != ME]
        event = self._new_event(summary, begin, until, description, location)

        async def work(user: UserCall) -> tuple[str, str]:
            calendar = await _my_calendar(user)
            key = stable_id("my-event", calendar, summary, begin.timestamp(), until.timestamp())
            request = (
                CreateCalendarEventRequest.builder()
                .calendar_id(calendar)
                .idempotency_key(key)
                .user_id_type("open_id")
                .request_body(event)
                .build()
            )
            data = await user.data("calendar.event.create", request)
            event_id = str(object_of(data, "event").get("event_id") or "")
            return event_id, await _invite(user, calendar, event_id, invitees)

        event_id, invited = await self._as_user(
            WRITE_SCOPES, "create an event on your calendar", "Creating your event", work
        )
        lines = [
            f'Created "{summary}" (event_id {event_id}) on your calendar: '
            f"{self._shown(begin)} to {self._shown(until)} ({self._tz})."
        ]
        if invited:
            lines.append(invited)
        return "\n".join(lines)

    async def _names(self, ids: list[str]) -> dict[str, str]:
        """open_id -> name, best effort with the app's contact access (ids without)."""
        try:
            users = await self._users(ids) if ids else []
        except ToolError:
            return {}
        return {str(u.get("open_id")): str(u.get("name") or "") for u in users if u.get("name")}

    def _span_text(self, begin: datetime, until: datetime) -> str:
        start, stop = self._shown(begin), self._shown(until)
        return f"{start}–{stop[11:] if stop[:10] == start[:10] else stop}"

    def _busy_text(self, items: list[Any]) -> str:
        spans = sorted(
            (begin, until)
            for item in items
            if isinstance(item, Mapping)
            for begin, until in [_span(item)]
            if begin is not None and until is not None
        )
        merged: list[tuple[datetime, datetime]] = []
        for begin, until in spans:
            if merged and begin <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], until))
            else:
                merged.append((begin, until))
        if not merged:
            return "free the whole time"
        shown = [self._span_text(b, u) for b, u in merged[:50]]
        more = f" (+{len(merged) - 50} more)" if len(merged) > 50 else ""
        return "busy " + ", ".join(shown) + more


async def _my_calendar(user: UserCall) -> str:
    """The calendar_id of the token owner's primary calendar."""
    request = PrimaryCalendarRequest.builder().user_id_type("open_id").build()
    data = await user.data("calendar.primary", request)
    found = [
        str(object_of(item, "calendar").get("calendar_id") or "")
        for item in data.get("calendars") or []
        if isinstance(item, dict)
    ]
    if not found or not found[0]:
        raise ToolError("Feishu returned no primary calendar for you")
    return found[0]


async def _invite(user: UserCall, calendar: str, event_id: str, ids: list[str]) -> str:
    if not ids:
        return ""
    request = attendees_request(calendar, event_id, ids, "open_id")
    try:
        data = await user.data("calendar.attendee.create", request)
    except FeishuError as exc:
        return f"The event exists, but no one was invited. {user_tool_error(exc, 'Inviting')}"
    return invited_text(data, ids)


def _span(item: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    try:
        return (
            datetime.fromisoformat(str(item.get("start_time"))),
            datetime.fromisoformat(str(item.get("end_time"))),
        )
    except ValueError:
        return None, None


__all__ = ["FREE_BUSY_SCOPES", "READ_SCOPES", "WRITE_SCOPES", "MyCalendarTools"]
