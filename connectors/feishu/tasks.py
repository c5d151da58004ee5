"""Tasks: those of a tasklist the app belongs to, or the ones it created; creating one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from lark_oapi.api.task.v1 import ListTaskRequest as ListTaskV1Request
from lark_oapi.api.task.v2 import (
    CreateTaskRequest,
    Due,
    GetTasklistRequest,
    InputTask,
    Member,
    TaskInTasklistInfo,
    TasksTasklistRequest,
)
from pydantic import Field

from connectors.base import ToolError, action

from .audience import Audience, current_audience, readers_text
from .common import WorkspaceTools, clip, items_of, more_hint, object_of, stable_id
from .times import format_time, from_epoch

# done, summary, due, guid: what a listing shows of a v1 or a v2 task.
_Task = tuple[bool, str, datetime | None, str]
# (people, chats) a task or tasklist is shared with.
_Grant = tuple[frozenset[str], frozenset[str]]
_NO_GRANT: _Grant = (frozenset(), frozenset())
_TASKLIST_GUID = re.compile(r"[A-Za-z0-9_-]{1,100}")


class TaskTools(WorkspaceTools):
    # task.v2.task.list ("my tasks") accepts only a user token; with the tenant token,
    # task.v1.task.list returns the tasks the app created, and task.v2.tasklist.tasks
    # those of a tasklist the app is a member of. A person sees a task in Feishu when they
    # are one of its members (assignees, followers) or a member of its tasklist, so a
    # listing keeps the tasks whose members cover everyone reading the answer.

    @action(side_effect="read")
    async def feishu_list_tasks(
        self,
        tasklist_guid: str | None = None,
        completed: bool | None = None,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
    ) -> str:
        """List tasks: those of a tasklist the app belongs to, or those the app created,
        that the asker is a member of (in a group chat: everyone in it). Feishu lets an
        app (unlike a person) list only the tasks it created itself or the tasks of a
        tasklist it is a member of; the asker's own tasks: feishu_my_tasks.

        Args:
            tasklist_guid: A tasklist's guid; without it, the tasks this app created.
            completed: true: only completed tasks; false: only open ones; leave out for both.
            limit: The most tasks to return (default: the configured page size).
        """
        audience = current_audience("Listing tasks")
        limit = limit or self.settings.page_size
        if tasklist_guid:
            tasks, data = await self._tasklist_tasks(audience, tasklist_guid, completed, limit)
            where = f"in tasklist {tasklist_guid}"
        else:
            tasks, data = await self._app_tasks(audience, completed, limit)
            where = "created by this app"
        where += f" that {readers_text(audience)} may see"
        if not tasks:
            return (
                f"No tasks {where} on this page."
                + ("" if tasklist_guid else " Pass a tasklist_guid to list a shared tasklist.")
                + "".join(f" {hint}" for hint in more_hint(data))
            )
        lines = [f"Tasks {where} ({len(tasks)} shown):"]
        for done, summary, due, guid in tasks:
            due_text = f" · due {format_time(due, self._tz)}" if due else ""
            lines.append(f"- [{'x' if done else ' '}] {clip(summary, 200)}{due_text} · guid {guid}")
        lines += more_hint(data)
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
        due_at = self._when(due, "due") if due else None
        people = list(assignees or [])
        key = stable_id("task", summary, description, due, sorted(people), tasklist_guid)
        request = (
            CreateTaskRequest.builder()
            .user_id_type(self.settings.user_id_type)
            .request_body(new_task(summary, description, due_at, people, tasklist_guid, key))
            .build()
        )
        data = await self._data("task.task.create", request, "Creating the task")
        created = object_of(data, "task")
        lines = [f'Created task "{summary}" (guid {created.get("guid")}).']
        if created.get("url"):
            lines.append(f"Link: {created['url']}")
        if due_at is not None:
            lines.append(f"Due {format_time(due_at, self._tz)} ({self._tz}).")
        lines.append(
            f"Assigned to {', '.join(people)}."
            if people
            else "Nobody is assigned: people see the task only once assigned."
        )
        return "\n".join(lines)

    async def _tasklist_tasks(
        self, audience: Audience, tasklist_guid: str, completed: bool | None, limit: int
    ) -> tuple[list[_Task], dict[str, Any]]:
        if _TASKLIST_GUID.fullmatch(tasklist_guid) is None:
            raise ToolError(f"{tasklist_guid!r} is not a tasklist guid")
        shared = await self._tasklist_grant(tasklist_guid)
        # Open ids whatever the configured id type: they are compared with the askers'.
        request = (
            TasksTasklistRequest.builder()
            .tasklist_guid(tasklist_guid)
            .page_size(limit)
            .user_id_type("open_id")
        )
        if completed is not None:
            request.completed(completed)
        data = await self._data("task.tasklist.tasks", request.build(), "Listing tasks")
        tasks = [
            task_v2(t)
            for t in items_of(data)
            if await self._may_see(audience, _v2_members(t), shared)
        ]
        return tasks, data

    async def _app_tasks(
        self, audience: Audience, completed: bool | None, limit: int
    ) -> tuple[list[_Task], dict[str, Any]]:
        request = ListTaskV1Request.builder().page_size(limit).user_id_type("open_id")
        if completed is not None:
            request.task_completed(completed)
        data = await self._data("task.task.list", request.build(), "Listing tasks")
        tasks = [
            _task_v1(t)
            for t in items_of(data)
            if await self._may_see(audience, _v1_members(t), _NO_GRANT)
        ]
        return tasks, data

    async def _may_see(self, audience: Audience, members: frozenset[str], shared: _Grant) -> bool:
        """Whether a task with ``members``, in a tasklist ``shared`` with people and chats,
        is visible to everyone in the audience."""
        people, chats = shared
        return await self._access.covers(audience, members | people, chats)

    async def _tasklist_grant(self, tasklist_guid: str) -> _Grant:
        """The people and chats a tasklist is shared with (its owner among them)."""
        request = GetTasklistRequest.builder().tasklist_guid(tasklist_guid).user_id_type("open_id")
        data = await self._data("task.tasklist.get", request.build(), "Reading the tasklist")
        tasklist = object_of(data, "tasklist")
        entries = [*(tasklist.get("members") or []), object_of(tasklist, "owner")]
        people = {str(m["id"]) for m in entries if _is(m, "user")}
        chats = {str(m["id"]) for m in entries if _is(m, "chat")}
        return frozenset(people), frozenset(chats)


def new_task(
    summary: str,
    description: str | None,
    due_at: datetime | None,
    people: list[str],
    tasklist_guid: str | None,
    client_token: str,
) -> InputTask:
    task = InputTask.builder().summary(summary).client_token(client_token)
    if description:
        task.description(description)
    if due_at is not None:
        stamp = int(due_at.timestamp() * 1000)
        task.due(Due.builder().timestamp(stamp).is_all_day(False).build())
    if people:
        task.members([Member.builder().id(p).type("user").role("assignee").build() for p in people])
    if tasklist_guid:
        task.tasklists([TaskInTasklistInfo.builder().tasklist_guid(tasklist_guid).build()])
    return task.build()


def _is(member: Any, kind: str) -> bool:
    return isinstance(member, dict) and member.get("type") == kind and bool(member.get("id"))


def _v1_members(task: Mapping[str, Any]) -> frozenset[str]:
    """A v1 task's assignees ("collaborators") and followers, by open_id."""
    entries = [*(task.get("collaborators") or []), *(task.get("followers") or [])]
    return frozenset(str(e["id"]) for e in entries if isinstance(e, dict) and e.get("id"))


def _v2_members(task: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(str(m["id"]) for m in task.get("members") or [] if _is(m, "user"))


def _task_v1(task: Mapping[str, Any]) -> _Task:
    due = (task.get("due") or {}).get("time")
    done = str(task.get("complete_time") or "0") != "0"
    return done, str(task.get("summary") or ""), from_epoch(due, 1000), str(task.get("id") or "")


def task_v2(task: Mapping[str, Any]) -> _Task:
    due = (task.get("due") or {}).get("timestamp")
    done = str(task.get("completed_at") or "0") != "0"
    return done, str(task.get("summary") or ""), from_epoch(due), str(task.get("guid") or "")


__all__ = ["TaskTools", "new_task", "task_v2"]
