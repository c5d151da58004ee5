"""Free/busy: when people are busy, from the events on their primary calendars, and
never what those events are.

    POST /open-apis/calendar/v4/freebusy/batch?user_id_type=..
         {"time_min", "time_max" (RFC 3339), "user_ids" (1-10), "include_external_calendar",
         "only_busy"} -> {"freebusy_lists": [{"user_id", "freebusy_items": [{"start_time",
         "end_time"}]}]} with RFC 3339 times in China time, as Feishu answers. Unknown
         people 190002; a bad time, range or list 99992402. The app's tenant token may ask
         too: Feishu shows colleagues' free/busy to the whole tenant.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from aiohttp import web

from .calendars import CalendarApi, FakeEvent
from .params import user_id_type
from .wire import FakeError, request_body

CHINA = timezone(timedelta(hours=8))
MAX_PEOPLE = 10


class FreeBusyApi(CalendarApi):
    async def _freebusy_batch(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        body = request_body(request)
        start = _rfc3339(body.get("time_min"), "time_min")
        end = _rfc3339(body.get("time_max"), "time_max")
        if end <= start:
            raise FakeError(99992402, "field validation failed: time_max must be after time_min")
        ids = body.get("user_ids")
        if (
            not isinstance(ids, list)
            or not 1 <= len(ids) <= MAX_PEOPLE
            or not all(isinstance(i, str) for i in ids)
        ):
            raise FakeError(99992402, f"field validation failed: user_ids (1 to {MAX_PEOPLE})")
        lists = []
        for user_id in ids:
            user = self._user(user_id, id_type)
            if user is None:
                raise FakeError(190002, f"invalid parameters in request: user_id {user_id!r}")
            calendar = self.user_calendar(user.open_id)
            busy = [e for e in calendar.events if _busy_within(e, start, end)]
            busy.sort(key=lambda e: e.bounds())
            lists.append({"user_id": user_id, "freebusy_items": [_item(e) for e in busy]})
        return self._fake._ok({"freebusy_lists": lists})


def _busy_within(event: FakeEvent, start: datetime, end: datetime) -> bool:
    if event.status == "cancelled" or event.free_busy_status == "free":
        return False
    begin, until = event.bounds()
    return until > start.timestamp() and begin < end.timestamp()


def _item(event: FakeEvent) -> dict[str, Any]:
    begin, until = event.bounds()
    return {
        "start_time": datetime.fromtimestamp(begin, CHINA).isoformat(),
        "end_time": datetime.fromtimestamp(until, CHINA).isoformat(),
    }


def _rfc3339(value: Any, name: str) -> datetime:
    if not isinstance(value, str):
        raise FakeError(99992402, f"field validation failed: {name} is required")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise FakeError(99992402, f"field validation failed: {name} (RFC 3339)") from None
    if moment.tzinfo is None:
        raise FakeError(99992402, f"field validation failed: {name} needs an offset")
    return moment
