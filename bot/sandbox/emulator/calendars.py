"""Calendar: primary calendars (the bot's, and each person's for their user token),
events listed and created (TimeInfo checks, idempotency keys) and attendees invited and
listed (people kept by open_id).

Access is the caller's: the app's ``role`` on a calendar with the tenant token, a
person's entry in ``user_roles`` with their user token (a person owns their primary
calendar and has no access to anyone else's: 191002)."""

from __future__ import annotations

import re
import secrets
import time
from calendar import timegm
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .identity import caller_of
from .params import paged, query_int, user_id_type
from .wire import APPLINK, FakeError, request_body
from .workspace_state import WorkspaceState

HOUR_S = 3600
DAY_S = 24 * HOUR_S


@dataclass
class FakeEvent:
    event_id: str
    calendar_id: str
    summary: str
    start: dict[str, str]  # TimeInfo as sent: {"timestamp": "...", "timezone": ...} or {"date"}
    end: dict[str, str]
    description: str = ""
    location: dict[str, Any] | None = None
    status: str = "confirmed"
    attendees: list[dict[str, Any]] = field(default_factory=list)
    create_time: int = 0  # epoch seconds
    recurrence: str = ""
    organizer: str = "larkgate"  # the display name of whose calendar it is on
    free_busy_status: str = "busy"  # "free": it does not show in free/busy

    def bounds(self) -> tuple[int, int]:
        """(start, end) in epoch seconds; an all-day event spans its dates in UTC."""
        return _event_time(self.start), _event_time(self.end, end=True)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "event_id": self.event_id,
            "organizer_calendar_id": self.calendar_id,
            "summary": self.summary,
            "description": self.description,
            "start_time": dict(self.start),
            "end_time": dict(self.end),
            "vchat": {"vc_type": "no_meeting"},
            "visibility": "default",
            "attendee_ability": "can_see_others",
            "free_busy_status": self.free_busy_status,
            "color": -1,
            "reminders": [],
            "recurrence": self.recurrence,
            "status": self.status,
            "is_exception": False,
            "recurring_event_id": "",
            "create_time": str(self.create_time),
            "app_link": f"{APPLINK}/client/calendar/event/detail?eventId={self.event_id}",
            "event_organizer": {"user_id": "", "display_name": self.organizer},
        }
        if self.location:
            wire["location"] = dict(self.location)
        return wire


@dataclass
class FakeCalendar:
    calendar_id: str
    summary: str
    type: str = "shared"  # primary, shared, google, resource, exchange
    role: str = "owner"  # the app's access: owner, writer, reader, free_busy_reader, ""
    events: list[FakeEvent] = field(default_factory=list)
    # People's access with their user tokens: open_id -> owner, writer, reader, ...
    user_roles: dict[str, str] = field(default_factory=dict)
    idempotency: dict[str, str] = field(default_factory=dict)  # key -> event_id

    def to_wire(self) -> dict[str, Any]:
        return {
            "calendar_id": self.calendar_id,
            "summary": self.summary,
            "description": "",
            "permissions": "private",
            "color": -1,
            "type": self.type,
            "summary_alias": "",
            "is_deleted": False,
            "is_third_party": False,
            "role": self.role,
        }


class CalendarApi(WorkspaceState):
    def add_event(
        self,
        summary: str,
        start_s: int,
        end_s: int,
        *,
        calendar_id: str | None = None,
        **fields: Any,
    ) -> FakeEvent:
        calendar = self.calendars[calendar_id or self.primary_calendar_id]
        event = FakeEvent(
            event_id=f"{secrets.token_hex(4)}-fake-{next(self._numbers):04d}_0",
            calendar_id=calendar.calendar_id,
            summary=summary,
            start={"timestamp": str(start_s), "timezone": "Asia/Shanghai"},
            end={"timestamp": str(end_s), "timezone": "Asia/Shanghai"},
            create_time=int(time.time()),
            organizer=fields.pop("organizer", calendar.summary),
            **fields,
        )
        calendar.events.append(event)
        return event

    def invite(
        self, event: FakeEvent, *, people: tuple[str, ...] = (), chats: tuple[str, ...] = ()
    ) -> None:
        """Seed attendees: people by open_id, group chats by chat_id."""
        for open_id in people:
            user = self.users.get(open_id)
            name = user.name if user is not None else open_id
            event.attendees.append(_seeded("user", "user_id", open_id, name, next(self._numbers)))
        for chat_id in chats:
            chat = self.chats.get(chat_id)
            name = chat.name if chat is not None else chat_id
            event.attendees.append(_seeded("chat", "chat_id", chat_id, name, next(self._numbers)))

    def user_calendar(self, open_id: str) -> FakeCalendar:
        """The person's primary calendar, made on first use (they own it, the app has no
        access to it)."""
        known = self.primary_calendars.get(open_id)
        if known is not None:
            return self.calendars[known]
        user = self.users.get(open_id)
        calendar = FakeCalendar(
            f"feishu.cn_fake{open_id.removeprefix('ou_')}@group.calendar.feishu.cn",
            user.name if user is not None else open_id,
            "primary",
            role="",
            user_roles={open_id: "owner"},
        )
        self.calendars[calendar.calendar_id] = calendar
        self.primary_calendars[open_id] = calendar.calendar_id
        return calendar

    async def _primary_calendar(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        caller = caller_of(request)
        if caller.is_user:
            calendar = self.user_calendar(caller.open_id)
            user = self.users.get(caller.open_id)
            owner = user.id_of(id_type) if user is not None else caller.open_id
        else:
            calendar, owner = self.calendars[self.primary_calendar_id], ""
        return self._fake._ok({"calendars": [{"calendar": calendar.to_wire(), "user_id": owner}]})

    async def _list_events(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer", "reader"))
        query = request.query
        if ("start_time" in query) != ("end_time" in query):
            raise FakeError(
                99992402, "field validation failed: start_time and end_time go together"
            )
        size = query_int(request, "page_size", 500, 50, 1000)
        events = list(calendar.events)
        if "start_time" in query:
            if any(name in query for name in ("page_token", "sync_token", "anchor_time")):
                raise FakeError(
                    99992402, "field validation failed: start_time/end_time with paging"
                )
            start, end = query_int(request, "start_time", 0), query_int(request, "end_time", 0)
            if end < start:
                raise FakeError(190002, "invalid parameters in request: end_time < start_time")
            hits = [e.to_wire() for e in events if e.bounds()[1] > start and e.bounds()[0] < end]
            # One shot: no paging, anything past page_size is cut off.
            return self._fake._ok(
                {"items": hits[:size], "has_more": False, "page_token": "", "sync_token": "fake"}
            )
        anchor = query_int(request, "anchor_time", 0)
        wire = [e.to_wire() for e in events if e.bounds()[1] >= anchor]
        return self._fake._ok(paged(wire, request, default=500, maximum=1000, minimum=50))

    async def _create_event(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer"))
        user_id_type(request)
        key = request.query.get("idempotency_key")
        if key and key in calendar.idempotency:
            earlier = next(e for e in calendar.events if e.event_id == calendar.idempotency[key])
            return self._fake._ok({"event": earlier.to_wire()})
        body = request_body(request)
        start, end = (
            _time_info(body.get("start_time"), "start_time"),
            _time_info(body.get("end_time"), "end_time"),
        )
        if _event_time(end, end=True) < _event_time(start):
            raise FakeError(190002, "invalid parameters in request: end_time before start_time")
        summary = body.get("summary") or ""
        if not isinstance(summary, str) or len(summary) > 1000:
            raise FakeError(99992402, "field validation failed: summary")
        location = body.get("location") if isinstance(body.get("location"), dict) else None
        event = FakeEvent(
            event_id=f"{secrets.token_hex(4)}-fake-{next(self._numbers):04d}_0",
            calendar_id=calendar.calendar_id,
            summary=summary,
            description=str(body.get("description") or ""),
            start=start,
            end=end,
            location=location,
            create_time=int(time.time()),
            organizer=calendar.summary,
        )
        calendar.events.append(event)
        if key:
            calendar.idempotency[key] = event.event_id
        return self._fake._ok({"event": event.to_wire()})

    async def _add_attendees(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer"))
        id_type = user_id_type(request)
        event_id = request.match_info["event_id"]
        event = next((e for e in calendar.events if e.event_id == event_id), None)
        if event is None:
            raise FakeError(193001)
        attendees = request_body(request).get("attendees")
        if not isinstance(attendees, list) or not 1 <= len(attendees) <= 1000:
            raise FakeError(99992402, "field validation failed: attendees (1 to 1000)")
        added = []
        for item in attendees:
            kind = item.get("type") if isinstance(item, dict) else None
            entry: dict[str, Any]
            if kind == "user":
                user = self._user(str(item.get("user_id") or ""), id_type)
                if user is None:
                    raise FakeError(
                        190002, f"invalid parameters in request: user_id {item.get('user_id')!r}"
                    )
                entry = {"type": "user", "user_id": user.open_id, "display_name": user.name}
            elif kind == "chat":
                chat = self.chats.get(str(item.get("chat_id") or ""))
                if chat is None:
                    raise FakeError(
                        190002, f"invalid parameters in request: chat_id {item.get('chat_id')!r}"
                    )
                entry = {"type": "chat", "chat_id": chat.chat_id, "display_name": chat.name}
            else:
                raise FakeError(
                    99992402, "field validation failed: attendees.type (user or chat here)"
                )
            entry |= {
                "attendee_id": f"{kind}_{next(self._numbers)}",
                "rsvp_status": "needs_action",
                "is_optional": bool(item.get("is_optional")),
                "is_organizer": False,
                "is_external": False,
            }
            added.append(entry)
        # Inviting someone already invited changes nothing (and answers them again).
        known = {(a["type"], a.get("user_id") or a.get("chat_id")) for a in event.attendees}
        event.attendees += [
            a for a in added if (a["type"], a.get("user_id") or a.get("chat_id")) not in known
        ]
        return self._fake._ok({"attendees": [self._attendee_out(a, id_type) for a in added]})

    async def _list_attendees(self, request: web.Request) -> web.Response:
        """An event's attendees, paged (people kept by open_id, answered in the id type
        asked for)."""
        calendar = self._calendar(request, roles=("owner", "writer", "reader"))
        id_type = user_id_type(request)
        event_id = request.match_info["event_id"]
        event = next((e for e in calendar.events if e.event_id == event_id), None)
        if event is None:
            raise FakeError(193001)
        wire = [self._attendee_out(a, id_type) for a in event.attendees]
        return self._fake._ok(paged(wire, request, default=20, maximum=100))

    def _attendee_out(self, attendee: Mapping[str, Any], id_type: str) -> dict[str, Any]:
        wire = dict(attendee)
        if attendee.get("type") == "user":
            user = self.users.get(str(attendee.get("user_id")))
            wire["user_id"] = user.id_of(id_type) if user is not None else attendee["user_id"]
        return wire

    def _calendar(self, request: web.Request, *, roles: tuple[str, ...]) -> FakeCalendar:
        calendar = self.calendars.get(request.match_info["calendar_id"])
        if calendar is None:
            raise FakeError(191000)
        caller = caller_of(request)
        role = calendar.user_roles.get(caller.open_id, "") if caller.is_user else calendar.role
        if role not in roles:
            raise FakeError(191002)
        return calendar


def _seeded(kind: str, key: str, value: str, name: str, number: int) -> dict[str, Any]:
    return {
        "type": kind,
        key: value,
        "display_name": name,
        "attendee_id": f"{kind}_{number}",
        "rsvp_status": "accept",
        "is_optional": False,
        "is_organizer": False,
        "is_external": False,
    }


def _time_info(value: Any, name: str) -> dict[str, str]:
    """A calendar TimeInfo as Feishu validates it: a second timestamp xor a date."""
    if not isinstance(value, dict) or ("timestamp" in value) == ("date" in value):
        raise FakeError(99992402, f"field validation failed: {name} needs timestamp or date")
    if "timestamp" in value and not str(value["timestamp"]).isdigit():
        raise FakeError(99992402, f"field validation failed: {name}.timestamp (seconds)")
    if "date" in value and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(value["date"])):
        raise FakeError(99992402, f"field validation failed: {name}.date (YYYY-MM-DD)")
    info = {key: str(v) for key, v in value.items() if key in ("timestamp", "date", "timezone")}
    info.setdefault("timezone", "Asia/Shanghai" if "timestamp" in info else "UTC")
    return info


def _event_time(info: Mapping[str, str], *, end: bool = False) -> int:
    if "timestamp" in info:
        return int(info["timestamp"])
    day = time.strptime(info["date"], "%Y-%m-%d")
    return int(timegm(day)) + (DAY_S if end else 0)
