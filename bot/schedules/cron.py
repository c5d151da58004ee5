"""Five-field cron expressions, read the way crontab(5) reads them.

We read the fields ourselves rather than through `CronTrigger.from_crontab`, for three reasons:

- APScheduler 3 numbers weekdays from Monday (0 = Monday, a historical mistake its docs warn of,
  fixed only in 4.x), while crontab, and every person and model who writes one, numbers them from
  Sunday (0 and 7 = Sunday, 1 = Monday): `from_crontab("0 9 * * 1-5")` fires Tuesday to
  Saturday. We expand each field into its values and give the trigger weekday *names*, which
  mean the same to both.
- An error names the field, the value and the fix, instead of a regular expression's complaint.
- The values feed the minimum-interval check and the words of `describe()`.

Accepted is crontab's syntax: `*`, numbers, names (jan-dec, sun-sat), ranges `a-b`, steps `*/n`,
`a-b/n` and `a/n` (from a to the end of the field, every n), comma lists; and the macros
@hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually), stored as their five
fields. A day of the month *and* a weekday (neither starting with `*`) is refused: crontab fires
when either matches, APScheduler when both do, and neither is what a person usually means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import tzinfo
from itertools import pairwise

from apscheduler.triggers.cron import CronTrigger

from bot.schedules.errors import ScheduleError

FIELD_NAMES = ("minute", "hour", "day", "month", "weekday")
_LIMITS = {"minute": (0, 59), "hour": (0, 23), "day": (1, 31), "month": (1, 12), "weekday": (0, 7)}
MONTH_ABBREVIATIONS = (
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
)  # fmt: skip
# crontab's order: 0 = Sunday. APScheduler knows the same names.
WEEKDAY_ABBREVIATIONS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = {
    "month": {name: number for number, name in enumerate(MONTH_ABBREVIATIONS, 1)},
    "weekday": {name: number for number, name in enumerate(WEEKDAY_ABBREVIATIONS)},
}
_NAME_HINTS = {"month": " or a name (jan-dec)", "weekday": " or a name (sun-sat)"}
MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# The longest each month gets (February: in a leap year).
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_NUMBER = re.compile(r"[0-9]{1,4}")
MINUTES_A_DAY = 24 * 60


@dataclass(frozen=True, slots=True)
class CronFields:
    """A checked cron expression and the values of each field, sorted."""

    expression: str  # the five fields, whitespace-normalised
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 = Sunday ... 6 = Saturday

    @property
    def every_hour(self) -> bool:
        return len(self.hours) == 24

    def trigger(self, zone: tzinfo) -> CronTrigger:
        """APScheduler's trigger for these values in `zone`."""
        weekdays = "*" if len(self.weekdays) == 7 else _names(self.weekdays)
        return CronTrigger(
            minute=_listed(self.minutes, "minute"),
            hour=_listed(self.hours, "hour"),
            day=_listed(self.days, "day"),
            month=_listed(self.months, "month"),
            day_of_week=weekdays,
            timezone=zone,
        )

    def wall_gap_minutes(self) -> int:
        """The least number of minutes between two fire times by the wall clock.

        Exact for the times of a day; for two days in a row it is the gap from the day's last
        time to the next day's first, counted when two days in a row can both match. Real gaps
        differ from it only where the clocks change (checked separately).
        """
        times = sorted(hour * 60 + minute for hour in self.hours for minute in self.minutes)
        overnight = MINUTES_A_DAY - times[-1] + times[0]
        if not self._two_days_in_a_row():
            overnight += MINUTES_A_DAY  # at least a day without firing in between
        return min([b - a for a, b in pairwise(times)] + [overnight])

    def _two_days_in_a_row(self) -> bool:
        """Whether two consecutive days can both match (may say yes when they never do, never
        no when they can: a safe bound for the minimum interval)."""
        weekdays, days, months = set(self.weekdays), set(self.days), set(self.months)
        if not any((day + 1) % 7 in weekdays for day in weekdays):
            return False
        within_a_month = any(
            day + 1 in days and any(DAYS_IN_MONTH[month - 1] > day for month in months)
            for day in days
        )
        # The last day of a month, then the 1st of the next (February ends on the 28th or 29th).
        across_months = 1 in days and any(
            month % 12 + 1 in months
            and (DAYS_IN_MONTH[month - 1] in days or (month == 2 and 28 in days))
            for month in months
        )
        return within_a_month or across_months


def parse_cron(text: str) -> CronFields:
    """Check a cron expression; `ScheduleError` says what is wrong and how to fix it."""
    expression = " ".join(text.split())
    if not expression:
        raise ScheduleError(
            "cron is empty: give five fields (minute hour day month weekday), "
            "e.g. '0 9 * * 1-5' for 09:00 on weekdays"
        )
    if expression.startswith("@"):
        expression = _macro(expression)
    parts = expression.split(" ")
    if len(parts) != 5:
        extra = " (a seconds or a year field is not supported)" if len(parts) > 5 else ""
        raise ScheduleError(
            f"cron needs 5 fields (minute hour day month weekday), got {len(parts)}{extra}: "
            "e.g. '0 9 * * 1-5' for 09:00 on weekdays"
        )
    minutes, hours, days, months, weekdays = (
        _field(name, part) for name, part in zip(FIELD_NAMES, parts, strict=True)
    )
    day, weekday = parts[2], parts[4]
    if not day.startswith("*") and not weekday.startswith("*"):
        raise ScheduleError(
            f"cron {expression!r} restricts both the day of the month ({day}) and the weekday "
            f"({weekday}); cron would fire on either, which is rarely meant: keep one and put * "
            "in the other"
        )
    longest = max(DAYS_IN_MONTH[month - 1] for month in months)
    if days[0] > longest:
        raise ScheduleError(
            f"cron {expression!r} never fires: its months have at most {longest} days, and it "
            f"asks for day {days[0]}"
        )
    return CronFields(expression, minutes, hours, days, months, weekdays)


def _macro(expression: str) -> str:
    expanded = MACROS.get(expression.lower())
    if expanded is None:
        known = ", ".join(sorted(set(MACROS) - {"@midnight", "@annually"}))
        raise ScheduleError(f"cron {expression!r} is not a macro this bot knows: use {known}")
    return expanded


def _field(name: str, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_item(name, text, item))
    if name == "weekday":
        values = {value % 7 for value in values}  # 7 is Sunday too
    return tuple(sorted(values))


def _item(name: str, text: str, item: str) -> range:
    low, high = _LIMITS[name]
    base, slash, step_text = item.partition("/")
    if base == "*":
        start, end = low, high
    elif "-" in base:
        first, _, last = base.partition("-")
        start, end = _value(name, text, first), _value(name, text, last)
        if start > end:
            raise ScheduleError(
                f"cron {name} range {base!r} runs backwards: a range cannot wrap around, so "
                f"write it as a list of two ranges, e.g. '{start}-{high},{low}-{end}'"
            )
    else:
        start = _value(name, text, base)
        end = high if slash else start
    step = _step(name, text, step_text) if slash else 1
    return range(start, end + 1, step)


def _value(name: str, text: str, word: str) -> int:
    low, high = _LIMITS[name]
    lowered = word.lower()
    if lowered in _NAMES.get(name, {}):
        return _NAMES[name][lowered]
    if not _NUMBER.fullmatch(word):
        raise ScheduleError(
            f"cron {name} field {text!r} is not understood at {word!r}: use a number"
            f"{_NAME_HINTS.get(name, '')}, * (every), a range (1-5), a step (*/15) "
            "or a list (1,15)"
        )
    number = int(word)
    if not low <= number <= high:
        sunday = " (0 and 7 are Sunday)" if name == "weekday" else ""
        raise ScheduleError(f"cron {name} {number} is out of range {low}-{high}{sunday}")
    return number


def _step(name: str, text: str, word: str) -> int:
    low, high = _LIMITS[name]
    if not _NUMBER.fullmatch(word):
        raise ScheduleError(f"cron {name} field {text!r}: the step {word!r} is not a number")
    step = int(word)
    if step < 1:
        raise ScheduleError(
            f"cron {name} field {text!r}: a step of 0 never advances: use 1 or more"
        )
    if step > high - low:
        raise ScheduleError(
            f"cron {name} field {text!r}: the step {step} is larger than the field's range "
            f"({low}-{high}), so it would only ever match the first value"
        )
    return step


def _listed(values: tuple[int, ...], name: str) -> str:
    low, high = _LIMITS[name]
    return "*" if len(values) == high - low + 1 else ",".join(map(str, values))


def _names(weekdays: tuple[int, ...]) -> str:
    return ",".join(WEEKDAY_ABBREVIATIONS[day] for day in weekdays)
