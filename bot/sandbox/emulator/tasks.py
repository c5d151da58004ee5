"""Tasks: v1 tasks the app created, v2 tasklists (their members) and their tasks, v2 task create
(members, due, ``client_token``), and, with a person's user token, "my tasks" (the
tasks assigned to them) and task patch (completing one).

A task made with a user token is that person's (``creator`` a user); one made with the
tenant token is the app's. Patch is for its creator or a member (1470403 otherwise)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .identity import Caller, caller_of
from .params import paged, query_bool, user_id_type
from .wire import APPLINK, FakeError, now_ms, request_body
from .workspace_state import WorkspaceState


@dataclass
class FakeTask:
    guid: str
    summary: str
    description: str = ""
    due_ms: int | None = None
    due_all_day: bool = False
    completed_ms: int = 0
    members: list[dict[str, str]] = field(default_factory=list)  # {id, type, role}
    tasklist_guids: list[str] = field(default_factory=list)
    creator: dict[str, str] = field(default_factory=dict)  # {id, type: "app"|"user"}
    created_ms: int = 0
    number: int = 0  # the human task id "t100001"

    def to_v2(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "guid": self.guid,
            "task_id": f"t{100000 + self.number}",
            "summary": self.summary,
            "description": self.description,
            "completed_at": str(self.completed_ms),
            "members": [dict(m) for m in self.members],
            "creator": dict(self.creator),
            "created_at": str(self.created_ms),
            "updated_at": str(self.created_ms),
            "status": "done" if self.completed_ms else "todo",
            "url": f"{APPLINK}/client/todo/detail?guid={self.guid}",
            "tasklists": [{"tasklist_guid": g, "section_guid": ""} for g in self.tasklist_guids],
            "subtask_count": 0,
            "mode": 2,
            "is_milestone": False,
        }
        if self.due_ms is not None:
            wire["due"] = {"timestamp": str(self.due_ms), "is_all_day": self.due_all_day}
        return wire

    def to_v2_summary(self) -> dict[str, Any]:
        """The short form ``tasklist.tasks`` lists."""
        wire = self.to_v2()
        keep = ("guid", "summary", "completed_at", "due", "members", "subtask_count")
        return {key: wire[key] for key in keep if key in wire}

    def to_v1(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.guid,
            "summary": self.summary,
            "description": self.description,
            "complete_time": str(self.completed_ms // 1000),
            "creator_id": self.creator.get("id", ""),
            "create_time": str(self.created_ms // 1000),
            "update_time": str(self.created_ms // 1000),
            "extra": "",
            "can_edit": True,
            "collaborators": [{"id": m["id"]} for m in self.members if m.get("role") == "assignee"],
            "followers": [{"id": m["id"]} for m in self.members if m.get("role") == "follower"],
        }
        if self.due_ms is not None:
            wire["due"] = {
                "time": str(self.due_ms // 1000),
                "timezone": "Asia/Shanghai",
                "is_all_day": self.due_all_day,
            }
        return wire


@dataclass
class FakeTasklist:
    guid: str
    name: str
    app_is_member: bool = True
    # Who shares it besides the app: {id, type: "user"|"chat", role: "editor"|"viewer"}
    # (people by open_id); every member of a chat member sees its tasks.
    members: list[dict[str, str]] = field(default_factory=list)
    owner: str = ""  # an open_id; "" when the app owns it

    def to_v2(self, owner_id: str, member_id: Callable[[dict[str, str]], str]) -> dict[str, Any]:
        return {
            "guid": self.guid,
            "name": self.name,
            "creator": {"id": owner_id, "type": "user"} if self.owner else {"type": "app"},
            "owner": {"id": owner_id, "type": "user", "role": "owner"}
            if self.owner
            else {"type": "app", "role": "owner"},
            "members": [m | {"id": member_id(m)} for m in self.members],
            "url": f"{APPLINK}/client/todo/task_list?guid={self.guid}",
            "created_at": "0",
            "updated_at": "0",
        }


class TasksApi(WorkspaceState):
    def add_task(
        self, summary: str, *, by_app: bool = True, creator: str = "", **fields: Any
    ) -> FakeTask:
        """A task made by the app, or (``by_app=False``) by ``creator`` (an open_id,
        Alice when not given)."""
        number = next(self._numbers)
        made_by = (
            {"id": self._fake.app_id, "type": "app"}
            if by_app
            else {"id": creator or "ou_fake_alice", "type": "user"}
        )
        task = FakeTask(
            guid=f"{secrets.token_hex(4)}-fake-task-{number:04d}",
            summary=summary,
            creator=made_by,
            created_ms=now_ms(),
            number=number,
            **fields,
        )
        self.tasks[task.guid] = task
        return task

    async def _list_tasks_v1(self, request: web.Request) -> web.Response:
        user_id_type(request)
        completed = query_bool(request, "task_completed")
        # With a tenant token: the tasks this app created (v1 and v2 share the ids).
        tasks = [
            t
            for t in self.tasks.values()
            if t.creator == {"id": self._fake.app_id, "type": "app"}
            and (completed is None or bool(t.completed_ms) == completed)
        ]
        tasks.sort(key=lambda t: t.created_ms)
        return self._fake._ok(paged([t.to_v1() for t in tasks], request, default=50, maximum=100))

    async def _get_tasklist(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        tasklist = self._tasklist(request.match_info["tasklist_guid"])

        def person(open_id: str) -> str:
            user = self.users.get(open_id)
            return user.id_of(id_type) if user is not None else open_id

        def member_id(member: dict[str, str]) -> str:
            return person(member["id"]) if member.get("type") == "user" else member["id"]

        return self._fake._ok({"tasklist": tasklist.to_v2(person(tasklist.owner), member_id)})

    async def _tasklist_tasks(self, request: web.Request) -> web.Response:
        user_id_type(request)
        tasklist = self._tasklist(request.match_info["tasklist_guid"])
        completed = query_bool(request, "completed")
        tasks = [
            t.to_v2_summary()
            for t in self.tasks.values()
            if tasklist.guid in t.tasklist_guids
            and (completed is None or bool(t.completed_ms) == completed)
        ]
        return self._fake._ok(paged(tasks, request, default=50, maximum=100))

    async def _my_tasks(self, request: web.Request) -> web.Response:
        """GET /task/v2/tasks (user token only): the tasks assigned to the caller."""
        user_id_type(request)
        if request.query.get("type", "my_tasks") != "my_tasks":
            raise FakeError(99992402, "field validation failed: type (my_tasks)")
        me = caller_of(request).open_id
        completed = query_bool(request, "completed")
        tasks = [
            t
            for t in self.tasks.values()
            if any(m["id"] == me and m.get("role") == "assignee" for m in t.members)
            and (completed is None or bool(t.completed_ms) == completed)
        ]
        tasks.sort(key=lambda t: t.created_ms)
        return self._fake._ok(paged([t.to_v2() for t in tasks], request, default=50, maximum=100))

    async def _patch_task(self, request: web.Request) -> web.Response:
        user_id_type(request)
        task = self.tasks.get(request.match_info["task_guid"])
        if task is None:
            raise FakeError(1470404, "resource not found: task")
        if not self._may_edit(task, caller_of(request)):
            raise FakeError(1470403)
        body = request_body(request)
        changes, fields = body.get("task"), body.get("update_fields")
        if not isinstance(changes, dict) or not isinstance(fields, list) or not fields:
            raise FakeError(1470400, "invalid request params: task and update_fields")
        for name in fields:
            if name not in _PATCHABLE:
                raise FakeError(1470400, f"invalid request params: update_fields {name!r}")
            _PATCHABLE[name](task, changes.get(name))
        return self._fake._ok({"task": task.to_v2()})

    def _may_edit(self, task: FakeTask, caller: Caller) -> bool:
        if not caller.is_user:
            return task.creator == {"id": self._fake.app_id, "type": "app"}
        mine = task.creator == {"id": caller.open_id, "type": "user"}
        return mine or any(m["id"] == caller.open_id for m in task.members)

    async def _create_task(self, request: web.Request) -> web.Response:
        id_type = user_id_type(request)
        body = request_body(request)
        token = body.get("client_token")
        if isinstance(token, str) and token in self.task_client_tokens:
            return self._fake._ok({"task": self.tasks[self.task_client_tokens[token]].to_v2()})
        summary = body.get("summary")
        if not isinstance(summary, str) or not summary.strip() or len(summary) > 3000:
            raise FakeError(1470400, "invalid request params: summary is required (max 3000)")
        fields: dict[str, Any] = {"description": str(body.get("description") or "")}
        due = body.get("due")
        if due is not None:
            stamp = str(due.get("timestamp") or "") if isinstance(due, dict) else ""
            if not stamp.isdigit():
                raise FakeError(1470400, "invalid request params: due.timestamp (ms)")
            fields |= {"due_ms": int(stamp), "due_all_day": bool(due.get("is_all_day"))}
        members = []
        for member in body.get("members") or []:
            member_id = member.get("id") if isinstance(member, dict) else None
            user = self._user(str(member_id), id_type)
            if member.get("role") not in ("assignee", "follower") or user is None:
                raise FakeError(1470400, f"invalid request params: member {member!r}")
            # Kept as open_ids: "my tasks" finds a person by theirs whatever id type made it.
            members.append({"id": user.open_id, "type": "user", "role": member["role"]})
        guids = []
        for item in body.get("tasklists") or []:
            guids.append(self._tasklist(str((item or {}).get("tasklist_guid") or "")).guid)
        caller = caller_of(request)
        task = self.add_task(
            summary,
            by_app=not caller.is_user,
            creator=caller.open_id,
            members=members,
            tasklist_guids=guids,
            **fields,
        )
        if isinstance(token, str) and token:
            self.task_client_tokens[token] = task.guid
        return self._fake._ok({"task": task.to_v2()})

    def _tasklist(self, guid: str) -> FakeTasklist:
        tasklist = self.tasklists.get(guid)
        if tasklist is None:
            raise FakeError(1470404, f"resource not found: tasklist {guid!r}")
        if not tasklist.app_is_member:
            raise FakeError(1470403)
        return tasklist


def _set_completed(task: FakeTask, value: Any) -> None:
    stamp = str(value if value is not None else "")
    if not stamp.isdigit():
        raise FakeError(1470400, "invalid request params: completed_at (ms, or 0 to reopen)")
    task.completed_ms = int(stamp)


def _set_summary(task: FakeTask, value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 3000:
        raise FakeError(1470400, "invalid request params: summary (1 to 3000 characters)")
    task.summary = value


def _set_description(task: FakeTask, value: Any) -> None:
    task.description = str(value or "")


# The fields ``update_fields`` may name here, and how each is applied.
_PATCHABLE: dict[str, Callable[[FakeTask, Any], None]] = {
    "completed_at": _set_completed,
    "summary": _set_summary,
    "description": _set_description,
}
