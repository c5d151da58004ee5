"""The asking person's own tasks (Feishu task v2), used as them: the tasks assigned to
them, a task they create for themselves or others, and completing one.

Feishu lists "my tasks" only for a user token (``GET /task/v2/tasks``, type
``my_tasks``: the tasks the caller is assigned); a task created with their token is
theirs (they are its creator), and completing one is a patch of its ``completed_at``.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from lark_oapi.api.task.v2 import (
    CreateTaskRequest,
    InputTask,
    ListTaskRequest,
    PatchTaskRequest,
    PatchTaskRequestBody,
)
from pydantic import Field

from connectors.base import ToolError, action

from .common import UserCall, clip, items_of, more_hint, object_of, stable_id
from .tasks import TaskTools, new_task, task_v2
from .times import format_time
from .users import ME, UserTools

# task:task:read lists them; task:task:write creates and updates (Feishu's names).
READ_SCOPES = ("task:task:read",)
WRITE_SCOPES = ("task:task:write",)
_MAX_ASSIGNEES = 20


class MyTaskTools(UserTools, TaskTools):
    @action(side_effect="read", acts_as="user", scopes=READ_SCOPES)
    async def feishu_my_tasks(
        self,
        status: Literal["open", "completed", "all"] = "open",
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
    ) -> str:
        """List the tasks assigned to the asking user (their "My tasks" in Feishu), read
        as them. Use it for "my tasks", "what do I have to do".

        Args:
            status: "open" (the default), "completed" or "all".
            limit: The most tasks to return (default: the configured page size).
        """
        limit = limit or self.settings.page_size
        request = ListTaskRequest.builder().type("my_tasks").page_size(limit)
        if status != "all":
            request.completed(status == "completed")
        built = request.user_id_type("open_id").build()

        async def work(user: UserCall) -> dict[str, Any]:
            return await user.data("task.task.list_mine", built)

        data = await self._as_user(READ_SCOPES, "list your tasks", "Listing your tasks", work)
        tasks = [task_v2(t) for t in items_of(data)]
        kind = {"open": "open ", "completed": "completed ", "all": ""}[status]
        if not tasks:
            return f"You have no {kind}tasks assigned to you."
        lines = [f"Your {kind}tasks ({len(tasks)} shown):"]
        for done, summary, due, guid in tasks:
            due_text = f" · due {format_time(due, self._tz)}" if due else ""
            lines.append(f"- [{'x' if done else ' '}] {clip(summary, 200)}{due_text} · guid {guid}")
        lines += more_hint(data)
        return "\n".join(lines)

    @action(side_effect="write", acts_as="user", scopes=WRITE_SCOPES)
    async def feishu_my_create_task(
        self,
        summary: Annotated[str, Field(min_length=1, max_length=3000)],
        description: Annotated[str | None, Field(max_length=30_000)] = None,
        due: str | None = None,
        assignees: Annotated[list[str] | None, Field(max_length=_MAX_ASSIGNEES)] = None,
    ) -> str:
        """Create a Feishu task as the asking user (they are its creator), assigned to them
        or to others; it shows in the assignees' "My tasks". The same task twice is made once.

        Args:
            summary: The task title.
            description: Details.
            due: Due time: ISO 8601 (2025-05-01T18:00) or unix seconds.
            assignees: Who does it: "me" (the asker; default), open_ids (ou_...), emails, names.
        """
        due_at = self._when(due, "due") if due else None
        people = await self._people(assignees or [ME])

        async def work(user: UserCall) -> tuple[str, list[str], dict[str, Any]]:
            me = await user.open_id()
            ids = list(dict.fromkeys(me if p == ME else p for p in people))
            # The asker is in the key: two people's identical tasks are two tasks.
            key = stable_id("my-task", me, summary, description, due, sorted(ids))
            request = (
                CreateTaskRequest.builder()
                .user_id_type("open_id")
                .request_body(new_task(summary, description, due_at, ids, None, key))
                .build()
            )
            return me, ids, await user.data("task.task.create", request)

        me, ids, data = await self._as_user(
            WRITE_SCOPES, "create tasks as you", "Creating your task", work
        )
        created = object_of(data, "task")
        names = await self._people_names(ids, me)
        lines = [f'Created task "{summary}" (guid {created.get("guid")}) as you.']
        if created.get("url"):
            lines.append(f"Link: {created['url']}")
        if due_at is not None:
            lines.append(f"Due {format_time(due_at, self._tz)} ({self._tz}).")
        lines.append(f"Assigned to {', '.join(names)}.")
        return "\n".join(lines)

    @action(side_effect="write", acts_as="user", scopes=WRITE_SCOPES)
    async def feishu_my_complete_task(
        self, task_guid: Annotated[str, Field(min_length=1, max_length=100)]
    ) -> str:
        """Mark a task complete, as the asking user (one assigned to them, or that they
        made or follow). The guid comes from feishu_my_tasks.

        Args:
            task_guid: The task's guid.
        """
        guid = task_guid.strip()
        # completed_at is a string of epoch milliseconds on the wire (the SDK's builder
        # declares an int; the dict form sends the documented type).
        task = InputTask({"completed_at": str(int(time.time() * 1000))})
        body = PatchTaskRequestBody.builder().task(task).update_fields(["completed_at"]).build()
        request = (
            PatchTaskRequest.builder()
            .task_guid(guid)
            .user_id_type("open_id")
            .request_body(body)
            .build()
        )

        async def work(user: UserCall) -> dict[str, Any]:
            return await user.data("task.task.patch", request)

        data = await self._as_user(
            WRITE_SCOPES, "complete tasks as you", "Completing the task", work
        )
        done = object_of(data, "task")
        return f'Completed task "{done.get("summary") or guid}" (guid {guid}).'

    async def _people_names(self, ids: list[str], me: str) -> list[str]:
        """How to name ``ids`` in a reply: "you" for the asker, else name (open_id)."""
        others = [i for i in ids if i != me]
        try:
            users = await self._users(others) if others else []
        except ToolError:  # names are a nicety: the ids still say who
            users = []
        names = {str(u.get("open_id")): str(u.get("name") or "") for u in users}
        return ["you" if i == me else (f"{names[i]} ({i})" if names.get(i) else i) for i in ids]


__all__ = ["READ_SCOPES", "WRITE_SCOPES", "MyTaskTools"]
