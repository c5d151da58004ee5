"""Who is calling: the app (a tenant token) or a person (a user token), and which
endpoints take which token, with the user scopes each one wants.

Feishu's gateway decides by the token before the API sees the request, so the fake does
it in its middleware: every route takes the tenant token unless listed in
:data:`USER_ROUTES`; a listed route takes a user token too (``user_only``: only a user
token). A handler reads the caller with :func:`caller_of` and answers that caller's
data only: a person sees their calendar, the tasks assigned to them, the documents they
may read and the chats they are in.

Refusals (HTTP 400, Feishu's envelope):
    99991661  no ``Authorization: Bearer``
    99991663  an unknown or expired tenant token, or a user token on a route that takes
              only the tenant token
    99991668  an unknown or revoked user token, or the tenant token on a ``user_only`` route
    99991677  an expired user token
    99991679  a user token without any of the route's scopes: the message names them and
              ``error.permission_violations`` lists them, as Feishu's "how to resolve
              99991679" page shows the answer

The token-kind mismatches (99991663 / 99991668) are the gateway validating the token as
the kind the API takes; that reading is ours, not a captured Feishu answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from .wire import FakeError

CALENDARS = "/open-apis/calendar/v4/calendars"
_ANY_CALENDAR = ("calendar:calendar:readonly", "calendar:calendar")


@dataclass(frozen=True, slots=True)
class TokenRule:
    """A route that takes a user token: the user scopes of which any one will do."""

    scopes: tuple[str, ...]
    user_only: bool = False


# (method, route template) -> the rule. Scope names as Feishu's docs and the official
# clients (larksuite/cli, larksuite/openclaw-lark) give them.
USER_ROUTES: dict[tuple[str, str], TokenRule] = {
    ("POST", CALENDARS + "/primary"): TokenRule(("calendar:calendar:read", *_ANY_CALENDAR)),
    ("GET", CALENDARS + "/{calendar_id}/events"): TokenRule(
        ("calendar:calendar.event:read", *_ANY_CALENDAR)
    ),
    ("POST", CALENDARS + "/{calendar_id}/events"): TokenRule(
        ("calendar:calendar.event:create", "calendar:calendar")
    ),
    ("POST", CALENDARS + "/{calendar_id}/events/{event_id}/attendees"): TokenRule(
        ("calendar:calendar.event:update", "calendar:calendar")
    ),
    ("POST", "/open-apis/calendar/v4/freebusy/batch"): TokenRule(
        ("calendar:calendar.free_busy:read", *_ANY_CALENDAR)
    ),
    ("GET", "/open-apis/task/v2/tasks"): TokenRule(
        ("task:task:read", "task:task:write"), user_only=True
    ),
    ("POST", "/open-apis/task/v2/tasks"): TokenRule(("task:task:write", "task:task:writeonly")),
    ("PATCH", "/open-apis/task/v2/tasks/{task_guid}"): TokenRule(
        ("task:task:write", "task:task:writeonly")
    ),
    ("POST", "/open-apis/search/v2/doc_wiki/search"): TokenRule(
        ("search:docs:read",), user_only=True
    ),
    ("POST", "/open-apis/search/v2/message"): TokenRule(("search:message",), user_only=True),
    ("GET", "/open-apis/im/v1/messages/mget"): TokenRule(
        (
            "im:message.group_msg:get_as_user",
            "im:message.p2p_msg:get_as_user",
            "im:message:readonly",
        )
    ),
}


@dataclass(frozen=True, slots=True)
class Caller:
    """The app (``open_id`` empty: a tenant token) or the person a user token is for."""

    open_id: str = ""

    @property
    def is_user(self) -> bool:
        return bool(self.open_id)


APP = Caller()
CALLER = web.RequestKey("caller", Caller)


def caller_of(request: web.Request) -> Caller:
    """Who made ``request`` (the app for public routes, which check no token)."""
    return request.get(CALLER, APP)


def rule_for(request: web.Request) -> TokenRule | None:
    """The user-token rule of the route ``request`` matched, None when it takes only the
    tenant token."""
    route = request.match_info.route
    resource = route.resource
    template = resource.canonical if resource is not None else request.path
    return USER_ROUTES.get((request.method, template))


def require_scopes(rule: TokenRule, granted: frozenset[str]) -> None:
    """99991679 unless the user granted one of ``rule.scopes``."""
    if granted.intersection(rule.scopes):
        return
    names = ", ".join(rule.scopes)
    msg = (
        "Unauthorized. You do not have permission to perform the requested operation on the "
        "resource. Please request user re-authorization and try again. required one of these "
        f"privileges: [{names}].应用未获取所需的用户授权：[{names}]"
    )
    violations = [{"type": "action_privilege_required", "subject": s} for s in rule.scopes]
    raise FakeError(99991679, msg, extra={"permission_violations": violations})


def bearer(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    token = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""
    if not token:
        raise FakeError(99991661)
    return token


__all__ = [
    "APP",
    "CALLER",
    "USER_ROUTES",
    "Caller",
    "TokenRule",
    "bearer",
    "caller_of",
    "require_scopes",
    "rule_for",
]
