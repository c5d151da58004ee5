"""The console's routes and their auth.

Every route needs ``Authorization: Bearer <LARKGATE_CONSOLE_TOKEN>`` (compared in constant
time; 401 without it), except ``GET /console``, the page itself, which holds no data: it
shows a sign-in form and sends the token it is given on each API call. With an empty
token the console is off: none of its routes exists (404), the page included.

The events stream takes the token only from the header, never from the URL (query strings
end up in access logs): the page reads the stream with ``fetch()``, not ``EventSource``.

A body is read and parsed by the guard, for every route, before the handler runs
(``bodies.py``: bounded, untrusted JSON); handlers take it from ``bodies.json_body``.

    GET  /console                          the page (static HTML + JS)
    GET  /api/runs?limit=50                recent runs, newest first (+ runs in progress here)
    GET  /api/runs/{run_id}/events         the run's events, Server-Sent Events (see sse.py)
    GET  /api/approvals                    pending approvals, newest first
    POST /api/approvals/{id}/approve|deny  decide one, as an admin (bot.governance.console)
    GET  /api/readonly                     the org's read-only mode
    POST /api/readonly {"on": true|false}  switch it, as an admin
    GET  /api/audit?limit=50&action=...    the audit log, newest first
    GET  /api/usage                        tokens and messages per user and group, today
    GET  /api/schedules                    every scheduled task (bot.runtime.schedules.console)
    POST /api/schedules/{id}/cancel        cancel one, as an admin (audited)
    GET  /api/memories                     what people asked the bot to remember (bot.memory)
    POST /api/memories/{id}/forget         forget one, as an admin (audited, without its text)
    GET  /api/profiles                     the agent profiles (larkgate.toml) and their routes
    GET  /api/authorizations               who let the bot act as them, until when (no token)
    POST /api/authorizations/{open_id}/revoke   forget a person's grant, as an admin (audited)
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, TypeVar

from aiohttp import web

from bot.governance.service import Governance
from bot.governance.user_auth.service import UserAuth
from bot.memory.console import MemoryConsole
from bot.runtime.api_budget import ApiUsage
from bot.runtime.schedules.console import ScheduleConsole, task_json
from bot.runtime.turn.run_events import RunChannel, RunEventHub
from bot.store.approvals import ApprovalRecord
from bot.store.runs import RunRecord, RunStore

from . import bodies, sse

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_LIMIT = 200


@dataclass(frozen=True)
class Console:
    """What the console reads and acts on, set by the composition root once it is built."""

    hub: RunEventHub
    runs: RunStore
    governance: Governance
    api_usage: ApiUsage | None = None
    schedules: ScheduleConsole | None = None
    # Memories (None: LARKGATE_MEMORY is off, and their routes answer 404).
    memories: MemoryConsole | None = None
    heartbeat_seconds: float = sse.HEARTBEAT_SECONDS
    # Per-user authorisation (None: off, and its routes answer 404).
    user_auth: UserAuth | None = None


CONSOLE = web.AppKey("console", Console)


def add_console(app: web.Application, token: str) -> None:
    """Add the console's routes, guarded by ``token``; with no token, add none."""
    if not token:
        return
    expected = token.encode()

    def guarded(handler: Handler) -> Handler:
        async def guard(request: web.Request) -> web.StreamResponse:
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), expected
            ):
                raise web.HTTPUnauthorized(
                    text=json.dumps({"error": "a console token is required"}),
                    content_type="application/json",
                    headers={"WWW-Authenticate": 'Bearer realm="larkgate console"'},
                )
            if CONSOLE not in request.app:
                raise web.HTTPServiceUnavailable(text="starting")
            # Here, so that no route reads a body any other way (bodies.py).
            refusal = await bodies.admit(request)
            if refusal is not None:
                return refusal
            return await handler(request)

        return guard

    app.router.add_get("/console", _page)
    app.router.add_get("/api/runs", guarded(_runs))
    app.router.add_get("/api/runs/{run_id}/events", guarded(_events))
    app.router.add_get("/api/approvals", guarded(_approvals))
    app.router.add_post("/api/approvals/{approval_id}/{decision}", guarded(_decide))
    app.router.add_get("/api/readonly", guarded(_read_only))
    app.router.add_post("/api/readonly", guarded(_set_read_only))
    app.router.add_get("/api/audit", guarded(_audit))
    app.router.add_get("/api/profiles", guarded(_profiles))
    app.router.add_get("/api/usage", guarded(_usage))
    app.router.add_get("/api/schedules", guarded(_schedules))
    app.router.add_post("/api/schedules/{task_id}/cancel", guarded(_cancel_schedule))
    app.router.add_get("/api/memories", guarded(_memories))
    app.router.add_post("/api/memories/{memory_id}/forget", guarded(_forget_memory))
    app.router.add_get("/api/authorizations", guarded(_authorizations))
    app.router.add_post("/api/authorizations/{open_id}/revoke", guarded(_revoke_authorization))


async def _page(request: web.Request) -> web.Response:
    html = resources.files(__package__).joinpath("console.html").read_text(encoding="utf-8")
    return web.Response(
        text=html,
        content_type="text/html",
        headers={
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": (
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; form-action 'none'; frame-ancestors 'none'"
            ),
        },
    )


def _limit(request: web.Request, default: int = 50) -> int:
    try:
        value = int(request.query.get("limit", default))
    except ValueError:
        raise web.HTTPBadRequest(text="limit must be a number") from None
    return max(1, min(value, MAX_LIMIT))


async def _runs(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    limit = _limit(request)
    live = console.hub.live()
    rows = [_run_json(r, live=False) for r in await console.runs.recent(limit)]
    live_ids = {c.run_id for c in live}
    runs = [_live_json(c) for c in live] + [r for r in rows if r["id"] not in live_ids]
    runs.sort(key=lambda r: (r["started_at"], r["id"]), reverse=True)
    return web.json_response({"runs": runs[:limit]})


def _run_json(record: RunRecord, *, live: bool) -> dict[str, Any]:
    return {
        "id": record.id,
        "conversation_id": record.conversation_id,
        "message_id": record.message_id,
        "status": record.status,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "model": record.model,
        "profile": record.profile,
        "tokens": {
            "prompt": record.prompt_tokens,
            "completion": record.completion_tokens,
            "total": record.total_tokens,
        },
        "iterations": record.iterations,
        "tool_calls": record.tool_calls,
        "error": record.error,
        "live": live,
    }


def _live_json(channel: RunChannel) -> dict[str, Any]:
    return {
        "id": channel.run_id,
        "conversation_id": channel.conversation_id,
        "message_id": channel.message_id,
        "status": channel.status,
        "started_at": channel.started_at,
        "finished_at": channel.finished_at,
        "model": channel.model,
        "tokens": None,  # counted when the run ends
        "iterations": None,
        "tool_calls": None,
        "error": None,
        "live": True,
    }


async def _events(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    run_id = request.match_info["run_id"]
    after = sse.last_event_id(request)
    channel = console.hub.get(run_id)
    if channel is not None:
        return await sse.stream(request, channel, after, heartbeat=console.heartbeat_seconds)
    record = await console.runs.get(run_id)
    if record is None:
        raise web.HTTPNotFound(
            text=json.dumps({"error": "no such run"}), content_type="application/json"
        )
    return await sse.single_done(request, sse.done_from_record(record), after)


async def _profiles(request: web.Request) -> web.Response:
    """Each profile as configured (instructions included: the console is for admins), and
    which chats use it."""
    profiles = request.app[CONSOLE].governance.config.profiles
    routes = profiles.routes()
    return web.json_response(
        {
            "profiles": [
                {
                    "name": name,
                    "instructions": p.instructions,
                    "tools": list(p.tools) if p.tools is not None else None,
                    "model": p.model or None,
                    "approvers": list(p.approvers),
                    "mode": p.mode,
                    "read_only": p.read_only,
                    "used_in": [where for where, used in routes if used == name],
                }
                for name, p in sorted(profiles.profiles.items())
            ]
        }
    )


def _approval_json(record: ApprovalRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "run_id": record.run_id,
        "state": record.state,
        "tool": record.tool,
        "connector": record.connector,
        "arguments": record.arguments,
        "reason": record.reason,
        "requester": record.requester,
        # Everyone whose message was in the run that asked, the requester first.
        "requesters": list(record.requesters),
        "approvers": list(record.approvers),
        "chat_id": record.chat_id,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "decided_at": record.decided_at,
        "decided_by": record.decided_by,
        "note": record.note,
        "side_effect": record.side_effect,
        "profile": record.profile,
    }


async def _approvals(request: web.Request) -> web.Response:
    governance = request.app[CONSOLE].governance
    pending = await governance.approvals.pending(limit=_limit(request))
    return web.json_response({"approvals": [_approval_json(r) for r in pending]})


async def _decide(request: web.Request) -> web.Response:
    governance = request.app[CONSOLE].governance
    asked = request.match_info["decision"]
    if asked not in ("approve", "deny"):
        raise web.HTTPNotFound()
    decision: Literal["approve", "deny"] = "approve" if asked == "approve" else "deny"
    result = await governance.console.decide(request.match_info["approval_id"], decision)
    record = _approval_json(result.record) if result.record is not None else None
    status = {"decided": 200, "unknown": 404, "closed": 409, "forbidden": 403, "read_only": 409}[
        result.outcome
    ]
    body: dict[str, Any] = {"outcome": result.outcome, "approval": record}
    if result.outcome == "forbidden":
        body["error"] = "no admin (LARKGATE_ADMINS) may decide this approval"
    if result.outcome == "read_only":
        body["error"] = "read-only mode is on: the write's approval was cancelled instead"
    return web.json_response(body, status=status)


async def _read_only(request: web.Request) -> web.Response:
    mode = await request.app[CONSOLE].governance.org.read_only()
    return web.json_response(
        {
            "on": mode.on,
            "changed_by": mode.changed_by,
            "changed_at": mode.changed_at,
            "version": mode.version,
        }
    )


async def _set_read_only(request: web.Request) -> web.Response:
    body = bodies.json_body(request)
    if body is None or not isinstance(body.get("on"), bool):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": 'send {"on": true} or {"on": false}'}),
            content_type="application/json",
        )
    toggle = await request.app[CONSOLE].governance.console.set_read_only(body["on"])
    if not toggle.allowed or toggle.mode is None:
        return web.json_response({"error": toggle.refusal}, status=403)
    mode = toggle.mode
    return web.json_response(
        {
            "on": mode.on,
            "changed": toggle.changed,
            "changed_by": mode.changed_by,
            "changed_at": mode.changed_at,
        }
    )


async def _audit(request: web.Request) -> web.Response:
    audit = request.app[CONSOLE].governance.audit
    entries = await audit.recent(limit=_limit(request), action=request.query.get("action") or None)
    return web.json_response(
        {
            "entries": [
                {
                    "id": e.id,
                    "at": e.at,
                    "action": e.action,
                    "actor": e.actor,
                    "target": e.target,
                    "chat_id": e.chat_id,
                    "detail": e.detail,
                }
                for e in entries
            ]
        }
    )


async def _usage(request: web.Request) -> web.Response:
    governance = request.app[CONSOLE].governance
    day, rows = await governance.budgets.today_usage()
    subjects = []
    for subject, tokens, messages in rows:
        kind, _, ident = subject.partition(":")
        subjects.append(
            {"subject": subject, "kind": kind, "id": ident, "tokens": tokens, "messages": messages}
        )
    budgets = governance.config.budgets
    return web.json_response(
        {
            "day": day,
            "timezone": governance.config.timezone,
            # Tokens are counted only while a daily token budget is set (LARKGATE_*_TOKENS);
            # the rate limit counts messages a minute, not tokens.
            "counting": governance.budgets.counts_tokens,
            "limits": {
                "user_daily_tokens": budgets.user_daily_tokens,
                "group_daily_tokens": budgets.group_daily_tokens,
                "messages_per_minute": budgets.messages_per_minute,
            },
            "subjects": subjects,
            "feishu_api": _api_usage_json(request.app[CONSOLE].api_usage),
        }
    )


_Feature = TypeVar("_Feature")


def _available(feature: _Feature | None, why_not: str) -> _Feature:
    """A part of the console the bot may run without: 404 saying why when it is off."""
    if feature is None:
        raise web.HTTPNotFound(text=json.dumps({"error": why_not}), content_type="application/json")
    return feature


def _schedule_console(request: web.Request) -> ScheduleConsole:
    return _available(request.app[CONSOLE].schedules, "scheduled tasks are not available")


async def _schedules(request: web.Request) -> web.Response:
    return web.json_response({"schedules": await _schedule_console(request).tasks()})


async def _cancel_schedule(request: web.Request) -> web.Response:
    result = await _schedule_console(request).cancel(request.match_info["task_id"])
    status = {"cancelled": 200, "unknown": 404, "closed": 409, "forbidden": 403}[result.outcome]
    body: dict[str, Any] = {
        "outcome": result.outcome,
        "schedule": task_json(result.task) if result.task is not None else None,
    }
    if result.outcome == "forbidden":
        body["error"] = "no admin (LARKGATE_ADMINS) to cancel it as"
    return web.json_response(body, status=status)


def _memory_console(request: web.Request) -> MemoryConsole:
    return _available(request.app[CONSOLE].memories, "memory is off (LARKGATE_MEMORY)")


async def _memories(request: web.Request) -> web.Response:
    return web.json_response({"memories": await _memory_console(request).memories()})


async def _forget_memory(request: web.Request) -> web.Response:
    result = await _memory_console(request).forget(request.match_info["memory_id"])
    status = {"forgotten": 200, "unknown": 404, "forbidden": 403}[result.outcome]
    body: dict[str, Any] = {"outcome": result.outcome}
    if result.memory is not None:
        body["memory"] = {"id": result.memory.id, "scope": result.memory.scope}
    if result.outcome == "forbidden":
        body["error"] = "no admin (LARKGATE_ADMINS) to forget it as"
    return web.json_response(body, status=status)


def _user_auth(request: web.Request) -> UserAuth:
    return _available(
        request.app[CONSOLE].user_auth, "per-user authorisation is off (LARKGATE_TOKEN_KEY)"
    )


async def _authorizations(request: web.Request) -> web.Response:
    grants = await _user_auth(request).granted()
    return web.json_response(
        {
            "authorizations": [
                {
                    "open_id": grant.open_id,
                    "scopes": grant.scope.split(),
                    "expires_at": grant.expires_at,
                    "refresh_expires_at": grant.refresh_expires_at,
                    "created_at": grant.created_at,
                    "updated_at": grant.updated_at,
                }
                for grant in grants
            ]
        }
    )


async def _revoke_authorization(request: web.Request) -> web.Response:
    user_auth = _user_auth(request)
    actor = request.app[CONSOLE].governance.console.admin
    if actor is None:
        return web.json_response(
            {"outcome": "forbidden", "error": "no admin (LARKGATE_ADMINS) to revoke it as"},
            status=403,
        )
    open_id = request.match_info["open_id"]
    revoked = await user_auth.revoke(open_id, actor=actor)
    return web.json_response(
        {"outcome": "revoked" if revoked else "unknown", "open_id": open_id},
        status=200 if revoked else 404,
    )


def _api_usage_json(usage: ApiUsage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    delivery = usage.delivery()
    return {
        "month": usage.month,
        "calls": usage.total,
        "budget": usage.budget,
        "delivery": delivery.name,
        "level": delivery.level,
        "summary": usage.summary(),
    }
