"""A task's schedule: a one-off instant (`at`) or a cron expression, in an IANA time zone.

`parse_schedule` checks what a person or the model wrote and returns the normalised form the
store keeps (kind, expression, timezone); a `Schedule` rebuilt from those three values computes
the next fire time and says the schedule in words.

Clock changes, by APScheduler's arithmetic plus one rule of ours:
- spring forward: a wall time the clocks skip fires once, at the instant it would be by the old
  offset, which the clocks show an hour later: "every day at 02:30" in Europe/Berlin fires at
  03:30 CEST on the last Sunday of March. Several times inside the skipped hour
  ("*/15 2 * * *") fire once in all, at the first one's instant (03:00 CEST): the clocks are
  past the others when they come. A rhythm ("*/20 * * * *") goes on by real time: 01:40 CET,
  then 03:00 CEST.
- fall back: APScheduler yields a repeated wall time twice (02:30 CEST, then 02:30 CET). We keep
  the first only, so "every day at 02:30" fires once that day, unless the schedule fires in
  every hour of the day (all 24 in its hour field): then the repeated hour's times are
  distinct instants and fire too, so that "every 15 minutes" gets no 75-minute hole.
A cron whose fire times a clock change brings closer than the minimum interval (01:58 and 03:00
in New York, two minutes apart the night it skips 02:00) is refused: the changes of the next
five years are sampled with the trigger itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Literal, get_args

from apscheduler.triggers.cron import CronTrigger

from bot.schedules.cron import CronFields, parse_cron
from bot.schedules.errors import ScheduleError
from bot.schedules.words import at_in_words, cron_in_words, duration
from bot.timezones import UnknownTimeZone, time_zone

Kind = Literal["at", "cron"]
KINDS: tuple[Kind, ...] = get_args(Kind)

# An `at` up to this much in the past counts as now: the model took a while to call the tool.
AT_SLACK_SECONDS = 30.0
# How far ahead an `at` may be, and how far ahead a cron's clock changes are checked.
MAX_AHEAD = timedelta(days=5 * 365 + 1)
# Around a clock change, the fire times this long either side are compared (the largest change
# in the zone database is 2 hours).
_AROUND_A_CHANGE = timedelta(hours=3)
_TICK = timedelta(microseconds=1)
_HAS_TIME = re.compile(r"[Tt ]")  # ISO 8601's separator of the date and the time
_AT_EXAMPLE = "e.g. 2026-12-04T09:00 (in the task's time zone) or 2026-12-04T09:00:00+08:00"
_MAX_SKIPS = 1000  # repeated or duplicate wall times skipped in one search: a few in practice


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a task fires. `expression`: for "at", an ISO 8601 instant with its offset in the
    task's zone (e.g. "2026-12-04T09:00:00+08:00"); for "cron", the five fields, in crontab's
    meaning (weekday 0 and 7 = Sunday). `timezone`: an IANA name."""

    kind: Kind
    expression: str
    timezone: str

    @classmethod
    def stored(cls, kind: str, expression: str, timezone: str) -> Schedule:
        """The schedule of a stored task (its kind read back as a plain string)."""
        for known in KINDS:
            if kind == known:
                return cls(known, expression, timezone)
        raise ScheduleError(f"unknown schedule kind {kind!r}: use one of {', '.join(KINDS)}")

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after `after` (aware), in the task's zone; None when a
        one-off's time is not after it. (Compare or subtract the results in UTC or as
        timestamps: Python compares two datetimes of one zone by wall time.)"""
        _require_aware(after, "after")
        if self.kind == "at":
            moment = _stored_instant(self.expression).astimezone(_zone(self.timezone))
            return moment if _utc(moment) > _utc(after) else None
        return _cron(self.expression, self.timezone).next_after(after)

    def next_timestamp_after(self, after: float) -> float | None:
        """`next_after` in epoch seconds, the store's time (e.g. its `next_run` function)."""
        moment = self.next_after(datetime.fromtimestamp(after, UTC))
        return None if moment is None else moment.timestamp()

    def describe(self) -> str:
        """The schedule in words: "every weekday at 09:00 (Asia/Shanghai)"."""
        if self.kind == "at":
            moment = _stored_instant(self.expression).astimezone(_zone(self.timezone))
            return at_in_words(moment, self.timezone)
        return cron_in_words(parse_cron(self.expression), self.timezone)


def parse_schedule(
    *,
    at: str | None,
    cron: str | None,
    timezone: str,
    now: datetime,
    min_interval_seconds: float = 300,
) -> Schedule:
    """Check a schedule as given to a tool; `ScheduleError` says what is wrong and how to fix it.

    Exactly one of `at` (an ISO 8601 date-time: with an offset, or without one in `timezone`)
    and `cron` (five fields, or a macro such as @daily) is given; an empty string counts as not
    given. A cron's fire times must be at least `min_interval_seconds` apart, including where the
    clocks change in the next five years.
    """
    _require_aware(now, "now")
    zone = _zone(timezone)
    at_text, cron_text = (at or "").strip(), (cron or "").strip()
    if at_text and cron_text:
        raise ScheduleError("give either at (one time) or cron (a repeating schedule), not both")
    if at_text:
        return Schedule("at", _parse_at(at_text, zone, timezone, now), timezone)
    if cron_text:
        fields = parse_cron(cron_text)
        _check_interval(fields, timezone, now, min_interval_seconds)
        return Schedule("cron", fields.expression, timezone)
    raise ScheduleError(
        f"give at (an ISO 8601 date-time for one time, {_AT_EXAMPLE}) or cron (five fields "
        "minute hour day month weekday for a repeating schedule, e.g. '0 9 * * 1-5')"
    )


def _parse_at(text: str, zone: tzinfo, timezone: str, now: datetime) -> str:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(f"at {text!r} is not an ISO 8601 date-time: {_AT_EXAMPLE}") from None
    if not _HAS_TIME.search(text):  # a date alone (2026-12-04, 2026-W49-5) reads as midnight
        raise ScheduleError(f"at {text!r} has no time of day: {_AT_EXAMPLE}")
    if moment.tzinfo is None:
        moment = _localize(moment, zone, timezone)
    try:
        moment = _utc(moment).replace(microsecond=0)
    except OverflowError:  # e.g. 9999-12-31T23:59-14:00, past what a datetime holds in UTC
        raise ScheduleError(f"at {text!r} is not a time this bot can schedule") from None
    now = _utc(now)
    if moment <= now:
        if now - moment > timedelta(seconds=AT_SLACK_SECONDS):
            shown = now.astimezone(zone).isoformat(timespec="seconds")
            raise ScheduleError(
                f"at {text!r} is in the past (it is now {shown} in {timezone}): give a future time"
            )
        # Meant as "now": the next whole second, so that the task is still due when it is stored.
        moment = (now + timedelta(seconds=1)).replace(microsecond=0)
    if moment - now > MAX_AHEAD:
        raise ScheduleError(f"at {text!r} is more than 5 years ahead: give a nearer time")
    return moment.astimezone(zone).isoformat(timespec="seconds")


def _localize(naive: datetime, zone: tzinfo, timezone: str) -> datetime:
    """A wall time in `zone`. One the clocks skip is refused; one they show twice (at a fall
    back) is taken at its first occurrence."""
    local = naive.replace(tzinfo=zone)
    try:
        shown = local.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    except OverflowError:
        raise ScheduleError(
            f"at {naive.isoformat()!r} is not a time this bot can schedule"
        ) from None
    if shown != naive:
        raise ScheduleError(
            f"{naive.isoformat(timespec='minutes')} does not exist in {timezone}: the clocks "
            "skip it when they go forward; give a time an hour later or earlier"
        )
    return local


def _check_interval(fields: CronFields, timezone: str, now: datetime, least: float) -> None:
    gap = fields.wall_gap_minutes() * 60.0
    if gap < least:
        hint = f" (e.g. '*/{-(-int(least) // 60)} * * * *')" if least <= 1800 else ""
        raise ScheduleError(
            f"cron {fields.expression!r} fires {duration(gap)} apart at its closest; a "
            f"scheduled task may fire at most every {duration(least)}{hint}"
        )
    cron = _cron(fields.expression, timezone)
    now = _utc(now)
    for change in clock_changes(timezone, now.year):
        if not now <= change <= now + MAX_AHEAD:
            continue
        # A pair of fire times the change comes between, or that a skipped wall time moved, has
        # its first time in this window, or is farther apart than the window is wide.
        around = _AROUND_A_CHANGE + timedelta(seconds=least)
        closest = cron.closest_gap(change - around, change + around)
        if closest is not None and closest < least:
            day = change.astimezone(_zone(timezone)).date().isoformat()
            raise ScheduleError(
                f"cron {fields.expression!r} fires only {duration(closest)} apart when the "
                f"clocks change in {timezone} on {day}; a scheduled task may fire at most every "
                f"{duration(least)}: move its times away from the change"
            )


class _Cron:
    """A cron expression compiled for one zone: APScheduler's trigger and our DST rule."""

    def __init__(self, fields: CronFields, zone: tzinfo) -> None:
        self.fields = fields
        self.zone = zone
        self.trigger: CronTrigger = fields.trigger(zone)

    def next_after(self, after: datetime) -> datetime | None:
        cursor = _utc(after)  # adding to a wall time of the zone would lose the fold
        for _ in range(_MAX_SKIPS):
            # APScheduler's search is inclusive: start just after, as an instant in the zone.
            found = self.trigger.get_next_fire_time(None, (cursor + _TICK).astimezone(self.zone))
            if found is None:
                return None
            # The instant, as the zone's clocks show it (a skipped wall time: the later one).
            moment = datetime.fromtimestamp(found.timestamp(), self.zone)
            # The search starts after `after`: an earlier answer would be a bug of APScheduler.
            if _utc(moment) <= _utc(after):
                raise RuntimeError(f"{self.fields.expression!r}: {moment} is not after {after}")
            if self._repeated(moment) and not self.fields.every_hour:
                cursor = _utc(moment)
                continue
            return moment
        raise RuntimeError(f"no next fire time of {self.fields.expression!r} after {after}")

    def _repeated(self, moment: datetime) -> bool:
        """Whether `moment` is the second occurrence of a wall time the clocks show twice."""
        return moment.fold == 1 and moment.replace(fold=0).utcoffset() != moment.utcoffset()

    def closest_gap(self, start: datetime, end: datetime) -> float | None:
        """The least seconds between consecutive fire times, the first of them in [start, end]."""
        closest = None
        previous = self.next_after(_utc(start) - _TICK)
        while previous is not None and _utc(previous) <= _utc(end):
            following = self.next_after(previous)
            if following is None:
                break
            gap = following.timestamp() - previous.timestamp()
            closest = gap if closest is None else min(closest, gap)
            previous = following
        return closest


@lru_cache(maxsize=256)
def _cron(expression: str, timezone: str) -> _Cron:
    return _Cron(parse_cron(expression), _zone(timezone))


@lru_cache(maxsize=64)
def clock_changes(timezone: str, first_year: int) -> tuple[datetime, ...]:
    """The instants (UTC) at which the zone's offset changes, from `first_year` on, for a little
    over five years: found day by day, then to the second."""
    zone = _zone(timezone)
    start = datetime(first_year, 1, 1, tzinfo=UTC)
    changes = []
    day = timedelta(days=1)
    for index in range(int((MAX_AHEAD + timedelta(days=366)) / day)):
        low, high = start + index * day, start + (index + 1) * day
        if low.astimezone(zone).utcoffset() != high.astimezone(zone).utcoffset():
            changes.append(_bisect_change(zone, low, high))
    return tuple(changes)


def _bisect_change(zone: tzinfo, low: datetime, high: datetime) -> datetime:
    before = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return high


@lru_cache(maxsize=256)
def _stored_instant(expression: str) -> datetime:
    try:
        moment = datetime.fromisoformat(expression)
    except ValueError:
        raise ScheduleError(f"the stored instant {expression!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        raise ScheduleError(f"the stored instant {expression!r} has no offset")
    return moment


def _zone(name: str) -> tzinfo:
    try:
        return time_zone(name)
    except UnknownTimeZone as error:
        raise ScheduleError(str(error)) from None


def _utc(moment: datetime) -> datetime:
    """`moment` in UTC, to compare or subtract: Python compares two datetimes of the same zone
    by their wall times, ignoring the offset, which is wrong across a fall back."""
    return moment.astimezone(UTC)


def _require_aware(moment: datetime, name: str) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, not {moment!r}")
