"""Which scheduled tasks a chat is shown, and who may cancel one: the rules every view of
tasks in a chat reads (the model's ``list_scheduled_tasks`` and ``cancel_scheduled_task``,
the ``/schedules`` card and its redraw after a click).

Two rules, each closing a leak:

- **Every asker is an asker** (``bot.askers``). A reply that someone else's message joined
  answers them too, so it shows only the tasks *every* asker may see, and cancels only what
  *every* asker may cancel: a joiner never borrows the starter's (or an admin's) rights.
- **What is shown in a chat is seen by everyone in it.** A task's prompt may be private (a
  reminder set in a direct message). In a group, only that group's tasks are shown (an
  admin: all of them; anyone else: their own); tasks elsewhere are only counted, with a
  hint to ask in a direct message. In a direct message: the asker's own tasks, wherever
  they are, and an admin's view is everyone's, as it always was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.askers import Askers
from bot.store.schedules import ScheduledTask, ScheduleStore

# What a view in a group says of the tasks it counts but does not show.
ELSEWHERE = (
    "{count} more scheduled task{s} in other chats or direct messages {are} not shown here, "
    "where everyone in this chat would see {them}: ask me in a direct message to see {them}."
)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a view is shown: a chat, and whether it is a direct message with the bot."""

    chat_id: str
    chat_type: str

    @property
    def private(self) -> bool:
        return self.chat_type == "p2p"


@dataclass(frozen=True, slots=True)
class TaskView:
    """The tasks shown in full, and how many more the viewers may see elsewhere (counted only)."""

    shown: tuple[ScheduledTask, ...]
    elsewhere: int = 0

    def note(self) -> str:
        """The line saying what is counted and not shown ("" when nothing is)."""
        if not self.elsewhere:
            return ""
        one = self.elsewhere == 1
        return ELSEWHERE.format(
            count=self.elsewhere,
            s="" if one else "s",
            are="is" if one else "are",
            them="it" if one else "them",
        )


def may_act_on(task: ScheduledTask, askers: Askers, is_admin: Callable[[str], bool]) -> bool:
    """Whether every asker may see (and cancel) ``task``: its creator or an admin, each of
    them. An unknown asker (``""``) may do nothing."""
    return askers.all(lambda person: bool(person) and (person == task.creator or is_admin(person)))


def shows(task: ScheduledTask, place: Place) -> bool:
    """Whether ``task`` may be shown (its prompt, its name) in ``place``."""
    return place.private or task.chat_id == place.chat_id


def view_of(
    tasks: list[ScheduledTask],
    askers: Askers,
    place: Place,
    is_admin: Callable[[str], bool],
) -> TaskView:
    """What ``place`` is shown of ``tasks`` when ``askers`` ask there."""
    visible = [task for task in tasks if may_act_on(task, askers, is_admin)]
    shown = tuple(task for task in visible if shows(task, place))
    return TaskView(shown, len(visible) - len(shown))


async def visible_tasks(
    store: ScheduleStore,
    askers: Askers,
    place: Place,
    is_admin: Callable[[str], bool],
) -> TaskView:
    """Read from the store what ``place`` is shown when ``askers`` ask there."""
    # Everyone's only when every asker is an admin; otherwise what every asker may see is
    # within the starter's own tasks.
    everyone = askers.all(lambda person: bool(person) and is_admin(person))
    tasks = await store.list(creator=None if everyone else askers.starter)
    return view_of(tasks, askers, place, is_admin)
