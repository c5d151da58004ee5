"""Schedules in words, for the list, the card and the console: "every weekday at 09:00
(Asia/Shanghai)". A shape without a short phrase falls back to "cron: <expr> (<zone>)", so the
words never say something the schedule does not do.

The names are spelled here rather than with strftime, whose day and month names follow the
process's locale.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.schedules.cron import CronFields

_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_WORKING_DAYS = (1, 2, 3, 4, 5)
_MOST_LISTED = 7  # longer lists of days or times are not phrased


def at_in_words(moment: datetime, timezone: str) -> str:
    """ "once, on Fri 4 Dec 2026 at 09:00 (Asia/Shanghai)" for a wall time in its zone."""
    day = _DAY_NAMES[moment.isoweekday() % 7][:3]
    month = _MONTH_NAMES[moment.month - 1][:3]
    clock = f"{moment:%H:%M}" if moment.second == 0 else f"{moment:%H:%M:%S}"
    return f"once, on {day} {moment.day} {month} {moment.year} at {clock} ({timezone})"


def cron_in_words(fields: CronFields, timezone: str) -> str:
    """A cron schedule in words, or "cron: <expr> (<zone>)" for shapes without a phrase."""
    if fields.hours == tuple(range(24)) and _all_days(fields):
        step = _even_step(fields.minutes, 60)
        if step is not None:
            # The only phrase without a zone: it fires at the same instants in any zone.
            return _every_minutes(step)
    days = _days(fields)
    times = _times(fields)
    if days is None or times is None:
        return f"cron: {fields.expression} ({timezone})"
    every, on = days
    at_times, repeating = times
    if at_times:
        return f"{every} at {repeating} ({timezone})"
    return f"{repeating}{on} ({timezone})"


def _all_days(fields: CronFields) -> bool:
    return len(fields.days) == 31 and len(fields.months) == 12 and len(fields.weekdays) == 7


def _times(fields: CronFields) -> tuple[bool, str] | None:
    """(True, "09:00 and 18:00") for a few times of day, (False, "every 2 hours at :30") for
    a rhythm within the day; None when neither reads well."""
    minutes, hours = fields.minutes, fields.hours
    if len(minutes) * len(hours) <= 4:
        clocks = [f"{hour:02d}:{minute:02d}" for hour in hours for minute in minutes]
        return True, _listed(clocks)
    if len(minutes) == 1:
        at = f":{minutes[0]:02d}"
        if hours == tuple(range(24)):
            return False, f"every hour at {at}"
        step = _even_step(hours, 24)
        if step is not None:
            return False, f"every {step} hours at {at}"
        if _consecutive(hours):
            first, last = f"{hours[0]:02d}{at}", f"{hours[-1]:02d}{at}"
            return False, f"every hour from {first} to {last}"
        return None
    step = _even_step(minutes, 60)
    if step is not None and fields.every_hour:
        return False, _every_minutes(step)
    if step is not None and _consecutive(hours):
        last = f"{hours[-1]:02d}:{minutes[-1]:02d}"
        return False, f"{_every_minutes(step)} from {hours[0]:02d}:00 to {last}"
    return None


def _days(fields: CronFields) -> tuple[str, str] | None:
    """("every weekday", " on weekdays"): the days as the subject of a time of day, and as a
    qualifier of a rhythm; None when they do not read well."""
    days, months, weekdays = fields.days, fields.months, fields.weekdays
    every_month = len(months) == 12
    if len(days) == 31 and every_month:
        if len(weekdays) == 7:
            return "every day", ""
        if weekdays == _WORKING_DAYS:
            return "every weekday", " on weekdays"
        if len(weekdays) <= _MOST_LISTED:
            # Monday first, as a week reads.
            names = [_DAY_NAMES[day] for day in sorted(weekdays, key=lambda day: (day - 1) % 7)]
            return f"every {_listed(names)}", f" on {_listed([f'{n}s' for n in names])}"
    if len(weekdays) != 7 or len(days) == 31 or len(days) > _MOST_LISTED:
        return None
    ordinals = _listed([_ordinal(day) for day in days])
    if every_month:
        return f"on the {ordinals} of every month", f" on the {ordinals} of every month"
    if len(months) == 1 and len(days) == 1:
        date = f"{days[0]} {_MONTH_NAMES[months[0] - 1]}"
        return f"every year on {date}", f" on {date} every year"
    if len(months) <= _MOST_LISTED:
        in_months = _listed([_MONTH_NAMES[month - 1] for month in months])
        return f"on the {ordinals} of {in_months}", f" on the {ordinals} of {in_months}"
    return None


def _even_step(values: tuple[int, ...], span: int) -> int | None:
    """n when `values` are 0, n, 2n, ... and n divides `span` (so the rhythm never breaks)."""
    if len(values) < 2:
        return None
    step = values[1] - values[0]
    if values[0] != 0 or span % step or values != tuple(range(0, span, step)):
        return None
    return step


def _every_minutes(step: int) -> str:
    return "every minute" if step == 1 else f"every {step} minutes"


def _consecutive(values: tuple[int, ...]) -> bool:
    return values == tuple(range(values[0], values[-1] + 1))


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    return f"{number}{suffix or 'th'}"


def _listed(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def duration(seconds: float) -> str:
    """ "5 minutes", "1 hour 30 minutes", "45 seconds"."""
    if seconds < 60:
        whole = int(seconds)
        return f"{whole} second{'' if whole == 1 else 's'}"
    hours, minutes = divmod(round(seconds / 60), 60)
    parts = []
    if hours:
        parts.append(f"{hours} hour{'' if hours == 1 else 's'}")
    if minutes or not hours:
        parts.append(f"{minutes} minute{'' if minutes == 1 else 's'}")
    return " ".join(parts)
