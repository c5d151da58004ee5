"""Scheduled tasks' schedules: parsing what a person or the model wrote ("0 9 * * 1-5",
"2026-12-04T09:00"), the next fire time in an IANA zone across clock changes, and the schedule
in words. Pure computation: it knows nothing of Feishu, the engine, the store or the runtime
(an import-linter contract); the runtime stores a task's (kind, expression, timezone) and gives
the store `Schedule.next_timestamp_after` as its `next_run`.

Why APScheduler 3.11, and only its triggers. The issue asks for APScheduler; 4.x is still an
alpha (its API and its data stores' schema change between pre-releases, and it would bring a
second schema beside our Alembic migrations). 3.x's job stores cannot be shared by several
schedulers (its documentation says so: two replicas would both fire a job) and pickle the jobs.
So tasks and their firings live in our own tables (`bot.store.schedules`: conditional updates
and leases, exactly once across replicas and restarts, like the message ledger), and APScheduler
3.11 does what it is good at: the calendar arithmetic of `CronTrigger` (fields, month lengths,
time zones, DST), which we drive one fire time at a time. Its `from_crontab` numbers weekdays
from Monday, unlike crontab; `bot.schedules.cron` reads the fields itself (see there).

    schedule = parse_schedule(at=None, cron="0 9 * * 1-5", timezone="Asia/Shanghai", now=now)
    schedule.next_after(now)  # the first fire time strictly after now, aware, in the zone
    schedule.describe()       # "every weekday at 09:00 (Asia/Shanghai)"
    Schedule.stored(task.kind, task.expression, task.timezone).next_timestamp_after(t)
"""

from bot.schedules.cron import MACROS, CronFields, parse_cron
from bot.schedules.errors import ScheduleError
from bot.schedules.schedule import (
    AT_SLACK_SECONDS,
    KINDS,
    MAX_AHEAD,
    Kind,
    Schedule,
    parse_schedule,
)

__all__ = [
    "AT_SLACK_SECONDS",
    "KINDS",
    "MACROS",
    "MAX_AHEAD",
    "CronFields",
    "Kind",
    "Schedule",
    "ScheduleError",
    "parse_cron",
    "parse_schedule",
]
