"""Calendar events: listing a time range, creating an event and inviting people or chats."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from lark_oapi.api.calendar.v4 import (
    CalendarEvent,
    CalendarEventAttendee,
    CreateCalendarEventAttendeeRequest,
    CreateCalendarEventAttendeeRequestBody,
    CreateCalendarEventRequest,
    EventLocation,
    ListCalendarEventAttendeeRequest,
    ListCalendarEventRequest,
    PrimaryCalendarRequest,
    TimeInfo,
)
from pydantic import Field

from bot.feishu.errors import FeishuError
from connectors.base import ToolError, action

from .audience import Audience, current_audience, readers_text
from .brief_cache import BriefCache
from .common import WorkspaceTools, clip, items_of, object_of, stable_id
from .errors import tool_error
from .times import format_time, from_epoch

EVENT_WINDOW = 500  # events asked for per time range (Feishu answers one page, no paging)
_MAX_RANGE = timedelta(days=730)  # Feishu refuses event ranges over 2 years
# Each event's attendees are one call: a listing asks for at most this many.
MAX_EVENT_CHECKS = 30
_ATTENDEE_PAGES = 5  # of 100 attendees: past that, a chat or person is not found there
# (people, chats) an event was sent to.
Invited = tuple[frozenset[str], frozenset[str]]


class CalendarTools(WorkspaceTools):
    # "primary" is the *bot's* primary calendar: people see its events only as invitees,
    # so a listing shows the events whose attendees cover everyone reading the answer,
    # and no calendar but the bot's own (which the app may read where a person may not).
    _primary_calendar: str | None = None  # looked up once per connector
    _invited_cache: BriefCache[tuple[str, str], Invited] | None = None

    @action(side_effect="read")
    async def feishu_list_calendar_events(
        self,
        start: str | None = None,
        end: str | None = None,
        calendar_id: str | None = None,
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
    ) -> str:
        """List the events of the bot's calendar in a time range (default: the next 7
        days) that the asker was invited to (in a group chat: this chat, or everyone in
        it). For the asker's own calendar, use feishu_my_calendar_events.

        Args:
            start: Range start: ISO 8601 (2025-05-01T09:00) or unix time; default: now.
            end: Range end, same formats; default 7 days after the start.
            calendar_id: The calendar; default the configured one ("primary": the bot's calendar).
            limit: The most events to return, earliest first (default: the page size).
        """
        audience = current_audience("Listing calendar events")
        limit = limit or self.settings.page_size
        begin, until = self._listing_range(start, end)
        calendar = await self._own_calendar(calendar_id)
        request = (
            ListCalendarEventRequest.builder()
            .calendar_id(calendar)
            .start_time(str(int(begin.timestamp())))
            .end_time(str(int(until.timestamp())))
            .page_size(EVENT_WINDOW)
            .user_id_type(self.settings.user_id_type)
            .build()
        )
        data = await self._data("calendar.event.list", request, "Listing calendar events")
        raw = items_of(data)
        visible, unchecked = await self._invited_events(audience, calendar, raw, limit)
        span = self._span(begin, until)
        invited = _invited_text(audience)
        text = self._listing(
            visible,
            limit,
            empty=f"No events on calendar {calendar} from {span} that {invited} invited to.",
            heading=lambda shown: (
                f"Events on calendar {calendar} from {span} that {invited} invited to, "
                f"{shown} shown:"
            ),
        )
        if unchecked or len(raw) >= EVENT_WINDOW:
            text += "\n[More events in this range were not looked at: narrow the range.]"
        return text

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
        key = stable_id("event", calendar, summary, begin.timestamp(), until.timestamp())
        request = (
            CreateCalendarEventRequest.builder()
            .calendar_id(calendar)
            .idempotency_key(key)
            .user_id_type(self.settings.user_id_type)
            .request_body(self._new_event(summary, begin, until, description, location))
            .build()
        )
        data = await self._data("calendar.event.create", request, "Creating the event")
        event_id = str(object_of(data, "event").get("event_id") or "")
        lines = [
            f'Created event "{summary}" (event_id {event_id}) on calendar {calendar}: '
            f"{self._shown(begin)} to {self._shown(until)} ({self._tz})."
        ]
        if attendees:
            lines.append(await self._invite(calendar, event_id, attendees))
        elif self.settings.calendar_id == "primary" and calendar_id in (None, "primary"):
            lines.append("Nobody is invited: on the bot's calendar only attendees see it.")
        return "\n".join(lines)

    async def _own_calendar(self, calendar_id: str | None) -> str:
        """The bot's calendar ``calendar_id`` names (the configured one by default);
        refused for any other calendar."""
        wanted = (calendar_id or "").strip()
        primary = await self._calendar_id("primary")
        if wanted in ("", "primary", self.settings.calendar_id.strip(), primary):
            return await self._calendar_id(wanted or None)
        raise ToolError(
            "feishu_list_calendar_events reads only the bot's own calendar: the app may "
            "read calendars that the people asking may not, and Feishu does not tell the bot "
            "who may read another calendar. Nothing was read. For your own calendar use "
            "feishu_my_calendar_events; a shared calendar, open in Feishu."
        )

    async def _invited_events(
        self, audience: Audience, calendar: str, raw: list[dict[str, Any]], limit: int
    ) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``limit`` + 1 events of ``raw`` (earliest first) whose attendees cover the
        audience, and whether some were left unchecked (at most MAX_EVENT_CHECKS are)."""
        candidates = sorted((e for e in raw if e.get("status") != "cancelled"), key=event_start)
        visible: list[dict[str, Any]] = []
        for checked, event in enumerate(candidates):
            if len(visible) > limit:
                break
            if checked >= MAX_EVENT_CHECKS:
                return visible, True
            people, chats = await self._invited().get((calendar, str(event.get("event_id"))))
            if await self._access.covers(audience, people, chats):
                visible.append(event)
        return visible, False

    def _invited(self) -> BriefCache[tuple[str, str], Invited]:
        if self._invited_cache is None:
            self._invited_cache = BriefCache(self._fetch_invited, clock=self._clock)
        return self._invited_cache

    async def _fetch_invited(self, key: tuple[str, str]) -> Invited:
        calendar, event_id = key
        people: set[str] = set()
        chats: set[str] = set()
        page_token = ""
        for _ in range(_ATTENDEE_PAGES):
            request = (
                ListCalendarEventAttendeeRequest.builder()
                .calendar_id(calendar)
                .event_id(event_id)
                .user_id_type("open_id")
                .page_size(100)
            )
            if page_token:
                request.page_token(page_token)
            try:
                body = await self._client().call("calendar.attendee.list", request.build())
            except FeishuError as exc:
                if type(exc) is FeishuError and (exc.http_status or 0) < 500:
                    break  # the event is gone, or its attendees are not the app's to see
                raise tool_error(exc, "Checking who an event was sent to") from exc
            data = object_of(body, "data")
            for attendee in items_of(data):
                if attendee.get("type") == "user" and attendee.get("user_id"):
                    people.add(str(attendee["user_id"]))
                elif attendee.get("type") == "chat" and attendee.get("chat_id"):
                    chats.add(str(attendee["chat_id"]))
            page_token = str(data.get("page_token") or "")
            if not data.get("has_more") or not page_token:
                break
        return frozenset(people), frozenset(chats)

    def _listing_range(self, start: str | None, end: str | None) -> tuple[datetime, datetime]:
        begin = self._when(start, "start") if start else datetime.now(self._tz)
        until = self._when(end, "end") if end else begin + timedelta(days=7)
        if until <= begin:
            raise ToolError("end must be after start")
        if until - begin > _MAX_RANGE:
            raise ToolError("the time range may span at most 2 years; narrow it")
        return begin, until

    def _new_event(
        self,
        summary: str,
        begin: datetime,
        until: datetime,
        description: str | None,
        location: str | None,
    ) -> CalendarEvent:
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
        return event.build()

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
        request = attendees_request(calendar, event_id, ids, self.settings.user_id_type)
        try:
            data = await self._data("calendar.attendee.create", request, "Inviting attendees")
        except ToolError as exc:
            return f"The event exists, but no one was invited. {exc}"
        return invited_text(data, ids)

    def _render_event(self, event: Mapping[str, Any]) -> str:
        start, end = event.get("start_time") or {}, event.get("end_time") or {}
        if start.get("date"):
            last = end.get("date") or start["date"]
            when = start["date"] + (f" – {last}" if last != start["date"] else "") + " (all day)"
        else:
            begin = format_time(from_epoch(start.get("timestamp"), 1000), self._tz)
            until = format_time(from_epoch(end.get("timestamp"), 1000), self._tz)
            same_day = begin[:10] == until[:10]
            when = f"{begin}–{until[11:] if same_day else until}"
        bits = [when, clip(str(event.get("summary") or "(no title)"), 200)]
        location = (event.get("location") or {}).get("name")
        if location:
            bits.append(str(location))
        if event.get("description"):
            bits.append(clip(str(event["description"]), 120))
        if event.get("recurrence"):
            bits.append("recurring")
        bits.append(f"event_id {event.get('event_id')}")
        return "- " + " · ".join(bits)

    def _listing(
        self,
        raw: list[dict[str, Any]],
        limit: int,
        *,
        empty: str,
        heading: Callable[[int], str],
    ) -> str:
        """One page of events (``raw``, as Feishu listed them) as the tool's text: the
        cancelled left out, the first ``limit`` by start time, a note when there are more."""
        events = sorted((e for e in raw if e.get("status") != "cancelled"), key=event_start)
        if not events:
            return empty
        lines = [heading(min(limit, len(events)))]
        lines += [self._render_event(event) for event in events[:limit]]
        if len(events) > limit or len(raw) >= EVENT_WINDOW:
            lines.append("[More events in this range: narrow the range to see them.]")
        return "\n".join(lines)

    def _span(self, begin: datetime, until: datetime) -> str:
        return f"{self._shown(begin)} to {self._shown(until)} ({self._tz})"

    def _shown(self, moment: datetime) -> str:
        return format_time(moment, self._tz)


def _invited_text(audience: Audience) -> str:
    """'you were' / 'everyone in this group chat was': who an event must have invited."""
    who = readers_text(audience)
    return f"{who} were" if who == "you" else f"{who} was"


def attendees_request(
    calendar: str, event_id: str, ids: list[str], id_type: str
) -> CreateCalendarEventAttendeeRequest:
    """Invite people (``ids`` of ``id_type``) and group chats (oc_...) to an event."""
    people = [
        CalendarEventAttendee.builder().type("chat").chat_id(i).build()
        if i.startswith("oc_")
        else CalendarEventAttendee.builder().type("user").user_id(i).build()
        for i in ids
    ]
    body = (
        CreateCalendarEventAttendeeRequestBody.builder()
        .attendees(people)
        .need_notification(True)
        .build()
    )
    return (
        CreateCalendarEventAttendeeRequest.builder()
        .calendar_id(calendar)
        .event_id(event_id)
        .user_id_type(id_type)
        .request_body(body)
        .build()
    )


def invited_text(data: Mapping[str, Any], ids: list[str]) -> str:
    """Who an attendee answer says was invited, as a sentence."""
    invited = [
        str(a.get("display_name") or a.get("user_id") or a.get("chat_id"))
        for a in data.get("attendees") or []
        if isinstance(a, dict)
    ]
    return f"Invited: {', '.join(invited) or ', '.join(ids)}."


def _time_info(moment: datetime, zone: str) -> TimeInfo:
    return TimeInfo.builder().timestamp(str(int(moment.timestamp()))).timezone(zone).build()


def event_start(event: Mapping[str, Any]) -> float:
    start = event.get("start_time") or {}
    if start.get("timestamp"):
        return float(start["timestamp"])
    try:
        return datetime.fromisoformat(str(start.get("date"))).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


__all__ = ["CalendarTools", "attendees_request", "event_start", "invited_text"]
