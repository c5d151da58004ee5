"""The model's tools for scheduled tasks: ``schedule_task``, ``list_scheduled_tasks`` and
``cancel_scheduled_task`` (the names and arguments are pinned by DESIGN §4).

Who and where come from the run the tool serves (its ``TurnContext``, ``current_turn()``),
never from the model: a task belongs to the person who asked, in the chat (and
topic) where they asked. A reply that answers several people's messages (someone's message
joined it) schedules nothing: the task would belong to one of them on everyone's word. It
lists and cancels only what every asker may (``schedule_views``). A scheduled run cannot
schedule tasks, so a schedule cannot multiply itself; a cap per person and a minimum
interval stop the rest of the abuse.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from bot.engine import HookResult, Tool, ToolError, ToolUse, current_run, tool_from_function
from bot.runtime.schedules.scheduler import SchedulerConfig, schedule_of
from bot.runtime.schedules.views import Place, may_act_on, shows, visible_tasks
from bot.schedules import Schedule, ScheduleError, parse_schedule
from bot.store.schedules import ScheduledTask, ScheduleStore, TooManyTasks
from bot.timezones import UnknownTimeZone, check_time_zone
from bot.turn_context import TurnContext, current_turn, turn_of

NAME_CHARS = 60
PROMPT_CHARS = 2_000
# What a scheduled run may not do: a schedule that makes or ends schedules could multiply.
SCHEDULING_TOOLS = ("schedule_task", "cancel_scheduled_task")
SCHEDULED_RUN = "a scheduled run cannot schedule or cancel scheduled tasks"
# Said to the model, to relay: who should do what instead.
SEVERAL_ASKERS = (
    "not scheduled: this reply answers messages from several people, and a scheduled task "
    "belongs to one person. Each person who wants a scheduled task should ask for it in a "
    "message of their own, once I have answered this one."
)
NOT_EVERYONES = (
    "only the person who created that task, or an admin, may cancel it; this reply answers "
    "messages from several people, so that must hold for each of them"
)
NOT_YOURS = "only the person who created that task, or an admin, may cancel it"


# The scheduling tools' names (larkgate check matches profiles' tool lists against them).
TOOL_NAMES = ("schedule_task", "list_scheduled_tasks", "cancel_scheduled_task")


class SchedulingGuard:
    """A PreToolUse hook, before the approval gate, so no one is asked to approve what
    would be refused anyway: a scheduled run cannot schedule or cancel tasks, a reply that
    answers several people schedules none, and a cancel must be allowed for every asker.
    The tools check again when they run: more people may join while an approval waits."""

    def __init__(self, store: ScheduleStore, is_admin: Callable[[str], bool]) -> None:
        self._store = store
        self._is_admin = is_admin

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        context = turn_of(call.run)
        if call.name not in SCHEDULING_TOOLS or context is None:
            return HookResult()  # no chat: the tool itself says it needs one
        if context.scheduled_task:
            return HookResult(allow=False, reason=SCHEDULED_RUN)
        if call.name == "schedule_task" and context.askers().sole is None:
            return HookResult(allow=False, reason=SEVERAL_ASKERS)
        if call.name == "cancel_scheduled_task":
            task = await self._store.get(str(call.arguments.get("task_id") or "").strip())
            if task is not None and not may_act_on(task, context.askers(), self._is_admin):
                return HookResult(allow=False, reason=_not_allowed(context))
        return HookResult()


class ScheduleTools:
    def __init__(
        self,
        store: ScheduleStore,
        config: SchedulerConfig,
        *,
        default_timezone: str,
        is_admin: Callable[[str], bool],
        wake: Callable[[], None],
        time_zone_of: Callable[[str], Awaitable[str | None]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # The creator's time zone in Feishu: a task without one is read in it.
        self._time_zone_of = time_zone_of
        self._store = store
        self._config = config
        self._default_timezone = default_timezone
        self._is_admin = is_admin
        self._wake = wake
        self._clock = clock

    def guard(self) -> SchedulingGuard:
        """The hook that refuses what these tools would refuse, before anyone approves it."""
        return SchedulingGuard(self._store, self._is_admin)

    def tools(self) -> list[Tool]:
        schedule, listing, cancel = TOOL_NAMES
        return [
            tool_from_function(self.schedule_task, name=schedule, side_effect="write", timeout=30),
            tool_from_function(
                self.list_scheduled_tasks, name=listing, side_effect="read", timeout=30
            ),
            tool_from_function(
                self.cancel_scheduled_task, name=cancel, side_effect="write", timeout=30
            ),
        ]

    async def schedule_task(
        self,
        prompt: str,
        at: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        name: str | None = None,
    ) -> str:
        """Schedule a task: the agent runs `prompt` at a time (`at`) or on a rhythm (`cron`)
        and posts its answer in this conversation. Give exactly one of `at` or `cron`.

        Args:
            prompt: What to do when it fires, written to make sense on its own (name the
                chat, the table, the people: no "this" or "that").
            at: A one-off: an ISO 8601 date-time, e.g. 2026-12-04T09:00:00+08:00 (without
                an offset it is read in the time zone).
            cron: A repeating schedule: five cron fields (minute hour day month weekday),
                e.g. "0 9 * * 1-5" for weekdays at 9:00.
            timezone: An IANA time zone such as Asia/Shanghai; default: the bot's.
            name: A short name for the task, shown on its messages.
        """
        context = _context()
        if context.scheduled_task:
            raise ToolError("a scheduled run cannot schedule tasks; ask in the chat instead")
        creator = _sole_asker(context)
        prompt = prompt.strip()
        if not prompt or len(prompt) > PROMPT_CHARS:
            raise ToolError(f"the prompt must be 1 to {PROMPT_CHARS} characters")
        zone = timezone or await self._creator_zone(creator)
        schedule = self._parse(at, cron, zone)
        first = schedule.next_after(datetime.fromtimestamp(self._clock(), UTC))
        if first is None:
            raise ToolError("that time is in the past; give a time in the future")
        # Asked again right before the task is stored: someone may have joined meanwhile
        # (while its approval waited, or the time zone was looked up).
        creator = _sole_asker(context)
        try:
            task = await self._store.create(
                name=_name(name, prompt),
                prompt=prompt,
                creator=creator,
                chat_id=context.chat_id,
                chat_type=context.chat_type,
                thread_id=context.thread_id,
                reply_to=context.message_id if context.thread_id else "",
                kind=schedule.kind,
                expression=schedule.expression,
                timezone=schedule.timezone,
                next_run_at=first.timestamp(),
                # The turn's run (a plan's step runs under an engine run id of its own).
                created_in_run=context.run_id or _engine_run_id(),
                max_per_creator=self._config.max_per_creator,
            )
        except TooManyTasks as exc:
            raise ToolError(str(exc)) from exc
        self._wake()
        when = schedule.describe()
        return f"Scheduled task {task.id}: {task.name}, {when}; next run {_when(first)}."

    async def list_scheduled_tasks(self) -> str:
        """List the scheduled tasks of the person asking (an admin sees everyone's): id,
        what it does, its schedule in words, the next run, and the last run's outcome. In a
        group chat only that chat's tasks are listed; the others are only counted."""
        context = _context()
        view = await visible_tasks(self._store, context.askers(), _place(context), self._is_admin)
        lines = [_line(task) for task in view.shown]
        if view.elsewhere:
            lines.append(view.note())
        return "\n".join(lines) if lines else "No scheduled tasks."

    async def cancel_scheduled_task(self, task_id: str) -> str:
        """Cancel a scheduled task. Only the person who created it, or an admin, may.

        Args:
            task_id: The task's id, from list_scheduled_tasks.
        """
        context = _context()
        task = await self._store.get(task_id.strip())
        if task is None or task.state in ("cancelled", "done"):
            raise ToolError(f"there is no active scheduled task {task_id!r}")
        if not may_act_on(task, context.askers(), self._is_admin):
            raise ToolError(_not_allowed(context))
        cancelled = await self._store.cancel(task.id)
        if cancelled is None:
            raise ToolError(f"task {task_id!r} had already ended")
        if not shows(task, _place(context)):
            return f"Cancelled {task.id} (a task of another chat)."
        return f"Cancelled {task.id}: {task.name}."

    async def _creator_zone(self, creator: str) -> str | None:
        """The creator's Feishu time zone when Feishu says and it is a real zone, else None
        (the bot's LARKGATE_TIMEZONE, then UTC)."""
        if self._time_zone_of is None or not creator:
            return None
        try:
            zone = await self._time_zone_of(creator)
        except Exception:  # a directory hiccup must not stop the scheduling
            return None
        try:
            return check_time_zone(zone) if zone else None
        except UnknownTimeZone:
            return None

    def _parse(self, at: str | None, cron: str | None, timezone: str | None) -> Schedule:
        try:
            return parse_schedule(
                at=at,
                cron=cron,
                timezone=timezone or self._default_timezone,
                now=datetime.fromtimestamp(self._clock(), UTC),
                min_interval_seconds=self._config.min_interval_seconds,
            )
        except ScheduleError as exc:
            raise ToolError(str(exc)) from exc


def _context() -> TurnContext:
    context = current_turn()
    if context is None or not context.chat_id:
        raise ToolError("scheduled tasks can only be managed from a chat with the bot")
    return context


def _sole_asker(context: TurnContext) -> str:
    """The one person this reply answers, who will own the task; refused when it answers
    several (or someone unknown)."""
    creator = context.askers().sole
    if creator is None:
        raise ToolError(SEVERAL_ASKERS)
    return creator


def _not_allowed(context: TurnContext) -> str:
    return NOT_EVERYONES if context.askers().several else NOT_YOURS


def _engine_run_id() -> str:
    run = current_run()
    return run.run_id if run is not None else ""


def _place(context: TurnContext) -> Place:
    return Place(context.chat_id, context.chat_type)


def _name(name: str | None, prompt: str) -> str:
    chosen = " ".join((name or prompt).split())
    return chosen if len(chosen) <= NAME_CHARS else chosen[: NAME_CHARS - 1] + "…"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(task: ScheduledTask) -> str:
    schedule = schedule_of(task).describe()
    following = _when(datetime.fromtimestamp(task.next_run_at, UTC)) if task.next_run_at else "none"
    last = "never run"
    if task.last_run_at:
        last = (
            f"last run {_when(datetime.fromtimestamp(task.last_run_at, UTC))}: {task.last_outcome}"
        )
    return (
        f"- {task.id} [{task.state}] {task.name}: {schedule}; next run {following}; {last}. "
        f"Prompt: {task.prompt}"
    )
