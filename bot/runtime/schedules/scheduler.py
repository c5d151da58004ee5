"""Firing scheduled tasks: each due time once, across restarts and replicas.

The store claims a due time in the database like a message is claimed (a firing row with a
lease; see ``bot.store.schedules``), so two replicas never both run it and a firing whose
process died is taken over. This loop sleeps until the next due time (or a wake-up when a
task is created), claims what is due, and runs each firing as its creator's turn in the
conversation it was made in: a header message with the task's name, the live answer card
under it, approvals and read-only mode as for any turn. A firing that fails is on the card
and in the task's record; three in a row pause the task and tell its creator.

Before it runs, each firing passes the admission a message passes (``admission.py``): a
group off the allowlist, a group its creator left, or one the bot was removed from, closes
it: nothing is posted there, the task is paused at once and its creator told why, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.conversations import ConversationWorkers, Job
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.feishu.events import InboundMessage
from bot.runtime.intake.admission import Admission, Closed, Entry
from bot.runtime.turn import TurnRunner
from bot.schedules import Schedule
from bot.store.schedules import Firing, ScheduledTask, ScheduleStore

logger = logging.getLogger(__name__)

# Between looks at the database when nothing is due sooner: another replica may have added
# a task (this process is woken directly for its own).
POLL_SECONDS = 30.0
PAUSE_AFTER_FAILURES = 3


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    owner: str
    lease_seconds: float
    grace_seconds: float
    max_per_creator: int = 20
    min_interval_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a firing went: ``ok``, or why not (``detail``); ``closed``: it was not run
    because its chat is closed to its creator, which pauses the task at once."""

    ok: bool
    detail: str = ""
    closed: bool = False


def schedule_of(task: ScheduledTask) -> Schedule:
    return Schedule.stored(task.kind, task.expression, task.timezone)


def next_run(task: ScheduledTask, after: float) -> float | None:
    """The store's ``next_run``: the first due time of ``task`` strictly after ``after``."""
    return schedule_of(task).next_timestamp_after(after)


class ScheduledRuns:
    def __init__(
        self,
        store: ScheduleStore,
        config: SchedulerConfig,
        *,
        feishu: FeishuClient,
        workers: ConversationWorkers,
        turns: TurnRunner,
        admission: Admission,
        wake: asyncio.Event | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._config = config
        self._feishu = feishu
        self._workers = workers
        self._turns = turns
        # The checks a message passes, passed again at every firing.
        self._admission = admission
        self._clock = clock
        # Set to look again at once (a task was created here): shared with the tools.
        self._wake = wake or asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Look again now (a task was created or resumed here)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self.fire_due()
            except Exception:  # the database may be away for a moment: try again later
                logger.exception("claiming due scheduled tasks failed; retrying")
            await self._sleep()

    async def fire_due(self) -> int:
        """Claim what is due and start each firing; how many started."""
        firings, missed = await self._store.claim_due(
            owner=self._config.owner,
            lease_seconds=self._config.lease_seconds,
            grace_seconds=self._config.grace_seconds,
            next_run=next_run,
        )
        for task in missed:
            logger.warning("scheduled task %s (%s) missed its due time", task.id, task.name)
        for firing in firings:
            work = asyncio.get_running_loop().create_task(self._fire(firing))
            self._running.add(work)
            work.add_done_callback(self._running.discard)
        return len(firings)

    async def close(self) -> None:
        for work in list(self._running):
            work.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _sleep(self) -> None:
        # Cleared before the next due time is read, not after: a wake-up (a task created
        # here) that lands while it is read was dropped, and the loop slept on a due time
        # read without that task, up to POLL_SECONDS.
        self._wake.clear()
        due = await self._safe_next_due()
        delay = POLL_SECONDS if due is None else max(0.0, min(POLL_SECONDS, due - self._clock()))
        # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled while it cancels
        # its inner wait (a delay of 0, the loop's shutdown), could wait on it forever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()

    async def _safe_next_due(self) -> float | None:
        """The next due time, or the end of a running firing's lease (a process that died
        mid-run leaves it to be taken over then), whichever is sooner."""
        try:
            moments = [await self._store.next_due_at(), await self._store.next_lease_end()]
            known = [moment for moment in moments if moment is not None]
            return min(known) if known else None
        except Exception:
            logger.warning("could not read the next due time", exc_info=True)
            return None

    async def _fire(self, firing: Firing) -> None:
        task = firing.task
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(firing))
        try:
            outcome = await self._run(task, _header_uuid(firing))
        except Exception as exc:  # a failing firing is recorded, never lost
            logger.exception("scheduled task %s failed", task.id)
            outcome = Outcome(False, f"internal error ({type(exc).__name__})")
        finally:
            keeper.cancel()
        owner = self._config.owner
        if outcome.closed:
            refused = await self._store.finish_refused(firing, owner=owner, reason=outcome.detail)
            # Told once: by the refusal that paused the task (or ended a one-off). None: it
            # was taken over, and whoever took it tells.
            if refused is not None and (refused.paused or refused.task.state == "done"):
                await self._tell(refused.task.creator, _closed_text(refused.task, outcome.detail))
            return
        finished = await self._store.finish(
            firing,
            owner=owner,
            ok=outcome.ok,
            detail=outcome.detail,
            pause_after=PAUSE_AFTER_FAILURES,
        )
        if finished is not None and finished.state == "paused" and not outcome.ok:
            await self._tell(finished.creator, _paused_text(finished, outcome.detail))

    async def _run(self, task: ScheduledTask, uuid: str) -> Outcome:
        verdict = await self._admission.admit(Entry.of_task(task), spends=True)
        if isinstance(verdict, Closed):
            # Nothing is posted in a chat closed to the task: its creator is told instead.
            logger.info("scheduled task %s not run: %s", task.id, verdict.text)
            return Outcome(False, verdict.text, closed=True)
        if verdict is not None:  # for now (a budget): said where the task runs
            await self._post(task, f"⏰ {task.name}: not run. {verdict.text}", uuid)
            return Outcome(False, verdict.text)
        anchor = await self._post(task, f"⏰ Scheduled task: {task.name}", uuid)
        if anchor is None:
            return Outcome(False, "could not post in the chat (was the bot removed from it?)")
        message = InboundMessage(
            event_id="",
            message_id=anchor,
            chat_id=task.chat_id,
            chat_type=task.chat_type,
            message_type="text",
            text=task.prompt,
            sender_open_id=task.creator,
            thread_id=task.thread_id,
        )
        ended: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        # A conversation of its own per firing: a firing never joins another as an
        # interrupt, and its prompt is written to stand alone.
        key = f"schedule:{task.id}:{anchor}"
        run = self._turns.runner_for(
            message, key, scheduled_task=task.id, on_status=_resolver(ended)
        )
        job = Job(key, anchor, task.prompt, run=run, sender=task.creator)
        if self._workers.submit(job) == "refused":
            return Outcome(False, "too many runs were waiting")
        status = await ended
        if status == "completed":
            return Outcome(True)
        return Outcome(False, f"the run ended: {status or 'stopped'}")

    async def _post(self, task: ScheduledTask, text: str, uuid: str) -> str | None:
        """The header of a firing: a reply in the task's topic, or a message in its chat."""
        content = json.dumps({"text": text}, ensure_ascii=False)
        try:
            if task.reply_to:
                sent = await self._feishu.reply_message(
                    task.reply_to,
                    msg_type="text",
                    content=content,
                    uuid=uuid,
                    reply_in_thread=bool(task.thread_id),
                )
            else:
                sent = await self._feishu.send_message(
                    "chat_id", task.chat_id, msg_type="text", content=content, uuid=uuid
                )
        except FeishuError as exc:
            logger.warning("scheduled task %s: could not post: %s", task.id, exc)
            return None
        return sent.message_id

    async def _keep_lease(self, firing: Firing) -> None:
        every = max(1.0, self._config.lease_seconds / 3)
        while True:
            await asyncio.sleep(every)
            try:
                if not await self._store.renew(
                    firing, owner=self._config.owner, lease_seconds=self._config.lease_seconds
                ):
                    return  # taken over: the other process finishes it
            except Exception:
                logger.warning("renewing the lease of a firing failed", exc_info=True)

    async def _tell(self, creator: str, text: str) -> None:
        """A direct message to a task's creator."""
        content = json.dumps({"text": text}, ensure_ascii=False)
        try:
            await self._feishu.send_message("open_id", creator, msg_type="text", content=content)
        except FeishuError as exc:
            logger.warning("could not tell %s about their scheduled task: %s", creator, exc)


def _paused_text(task: ScheduledTask, detail: str) -> str:
    return (
        f"Your scheduled task “{task.name}” failed {PAUSE_AFTER_FAILURES} times in a row "
        f"and is paused. The last failure: {detail}. Ask me to list your scheduled tasks "
        "to see it, and schedule it again once the cause is fixed."
    )


def _closed_text(task: ScheduledTask, reason: str) -> str:
    """Why a task did not run in its chat: said once, to its creator alone (the task is
    paused, or a one-off is over)."""
    ended = "is paused" if task.state == "paused" else "will not run"
    return (
        f"Your scheduled task “{task.name}” did not run in its group chat ({task.chat_id}) "
        f"and {ended}: {reason}. Ask me to list your scheduled tasks to see it, and "
        "schedule it again where it may run."
    )


def _header_uuid(firing: Firing) -> str:
    """The same for every attempt at one due time: a take-over posts no second header
    (Feishu returns the first message for a repeated uuid)."""
    return f"sched-{firing.task.id[:20]}-{int(firing.due_at)}"


def _resolver(ended: asyncio.Future[str | None]) -> Callable[[str | None], None]:
    def resolve(status: str | None) -> None:
        if not ended.done():
            ended.set_result(status)

    return resolve
