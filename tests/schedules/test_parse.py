"""Parsing schedules as a tool gets them: what is accepted, normalised, and refused with which
words (each error says what is wrong and how to fix it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.schedules import Schedule, ScheduleError, parse_schedule

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)  # Sunday 1 March 2026, 16:00 in Shanghai


def cron(expression: str, timezone: str = "UTC", **options) -> Schedule:
    return parse_schedule(at=None, cron=expression, timezone=timezone, now=NOW, **options)


def at(text: str, timezone: str = "Asia/Shanghai", now: datetime = NOW) -> Schedule:
    return parse_schedule(at=text, cron=None, timezone=timezone, now=now)


def refused(expression: str, timezone: str = "UTC", **options) -> str:
    with pytest.raises(ScheduleError) as raised:
        cron(expression, timezone, **options)
    return str(raised.value)


# One of at and cron.


def test_exactly_one_of_at_and_cron():
    with pytest.raises(ScheduleError, match="not both"):
        parse_schedule(at="2026-12-04T09:00", cron="0 9 * * *", timezone="UTC", now=NOW)
    for nothing in (None, "", "   "):
        with pytest.raises(ScheduleError, match=r"give at .* or cron"):
            parse_schedule(at=nothing, cron=nothing, timezone="UTC", now=NOW)
    # An empty string is "not given" (models send them for optional arguments).
    assert parse_schedule(at="", cron="0 9 * * *", timezone="UTC", now=NOW).kind == "cron"


def test_the_time_zone_follows_the_project_rule():
    for zone in ("Mars/Olympus", "", "America", "../etc/passwd"):
        with pytest.raises(ScheduleError, match="unknown time zone"):
            cron("0 9 * * *", zone)
    assert cron("0 9 * * *", "America/New_York").timezone == "America/New_York"


def test_now_must_be_aware():
    with pytest.raises(ValueError, match="aware"):
        parse_schedule(at=None, cron="0 9 * * *", timezone="UTC", now=datetime(2026, 3, 1))


# at: one-offs.


def test_at_with_an_offset_is_normalised_into_the_zone():
    schedule = at("2026-12-04T01:00:00Z")
    assert schedule == Schedule("at", "2026-12-04T09:00:00+08:00", "Asia/Shanghai")
    assert at("2026-12-04T09:00:00+08:00").expression == "2026-12-04T09:00:00+08:00"
    assert at("2026-12-04 09:00:00.750+08:00").expression == "2026-12-04T09:00:00+08:00"


def test_at_without_an_offset_is_a_wall_time_in_the_zone():
    assert at("2026-12-04T09:00").expression == "2026-12-04T09:00:00+08:00"
    assert at("2026-12-04T09:00", "Europe/Berlin").expression == "2026-12-04T09:00:00+01:00"
    assert at("2026-07-04T09:00", "Europe/Berlin").expression == "2026-07-04T09:00:00+02:00"


def test_at_in_a_skipped_hour_is_refused_and_a_repeated_one_is_its_first():
    with pytest.raises(ScheduleError, match="does not exist in Europe/Berlin"):
        at("2026-03-29T02:30", "Europe/Berlin")
    # 02:30 comes twice on 25 October 2026: summer time's first.
    assert at("2026-10-25T02:30", "Europe/Berlin").expression == "2026-10-25T02:30:00+02:00"
    assert (
        at("2026-10-25T02:30:00+01:00", "Europe/Berlin").expression == "2026-10-25T02:30:00+01:00"
    )


def test_at_in_the_past_is_refused_beyond_a_few_seconds():
    with pytest.raises(ScheduleError, match=r"is in the past \(it is now 2026-03-01T16:00:00"):
        at("2026-03-01T15:59:00")
    with pytest.raises(ScheduleError, match="in the past"):
        at("2025-12-04T09:00")
    # A few seconds late (the model took its time): now, so that it is still due when stored.
    late = at("2026-03-01T15:59:50")
    assert late.expression == "2026-03-01T16:00:01+08:00"
    assert late.next_after(NOW) == NOW + timedelta(seconds=1)


def test_at_too_far_ahead_is_refused():
    assert at("2031-02-27T09:00").kind == "at"
    with pytest.raises(ScheduleError, match="more than 5 years ahead"):
        at("2031-03-02T09:00")


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "0001-01-01T00:00"]
)
def test_at_at_the_ends_of_the_calendar(text):
    with pytest.raises(ScheduleError, match=r"not a time this bot can schedule|in the past"):
        at(text, "Pacific/Kiritimati")


@pytest.mark.parametrize("text", ["2026-12-04", "20261204", "2026-W49-5"])
def test_at_needs_a_time_of_day(text):
    with pytest.raises(ScheduleError, match=r"has no time of day: e\.g\. 2026-12-04T09:00"):
        at(text)


@pytest.mark.parametrize("text", ["tomorrow at 9", "2026-13-01T09:00", "09:00", "2026-12-04T25:00"])
def test_at_that_is_not_iso_8601(text):
    with pytest.raises(ScheduleError, match=r"is not an ISO 8601 date-time: e\.g\."):
        at(text)


# cron: repeating schedules.


def test_cron_is_whitespace_normalised_and_kept_as_given():
    schedule = cron("  0   9 *\t* MON-fri ", "Asia/Shanghai")
    assert schedule == Schedule("cron", "0 9 * * MON-fri", "Asia/Shanghai")


@pytest.mark.parametrize(
    ("macro", "fields"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_macros_are_stored_as_their_five_fields(macro, fields):
    assert cron(macro).expression == fields


def test_unknown_macros_are_refused():
    assert "use @daily, @hourly, @monthly, @weekly, @yearly" in refused("@reboot")


@pytest.mark.parametrize(
    ("expression", "count"),
    [("0 9 * *", 4), ("0 0 9 * * 1", 6), ("0", 1), ("0 9 * * 1-5 2026", 6)],
)
def test_the_wrong_number_of_fields(expression, count):
    message = refused(expression)
    assert message.startswith(f"cron needs 5 fields (minute hour day month weekday), got {count}")
    assert ("a seconds or a year field is not supported" in message) == (count > 5)


def test_an_empty_cron_says_what_to_write():
    with pytest.raises(ScheduleError, match="give at"):
        cron(" ")


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("60 * * * *", "cron minute 60 is out of range 0-59"),
        ("0 24 * * *", "cron hour 24 is out of range 0-23"),
        ("0 9 0 * *", "cron day 0 is out of range 1-31"),
        ("0 9 32 * *", "cron day 32 is out of range 1-31"),
        ("0 9 * 13 *", "cron month 13 is out of range 1-12"),
        ("0 9 * * 8", "cron weekday 8 is out of range 0-7 (0 and 7 are Sunday)"),
        ("0 9-25 * * *", "cron hour 25 is out of range 0-23"),
    ],
)
def test_out_of_range_values(expression, words):
    assert refused(expression) == words


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("x * * * *", "cron minute field 'x' is not understood at 'x'"),
        ("0 9 * * monday", "cron weekday field 'monday' is not understood at 'monday'"),
        ("0 9 * * L", "is not understood at 'L'"),
        ("0 9 ? * 1", "cron day field '?' is not understood at '?'"),
        ("0 9 1,,2 * *", "cron day field '1,,2' is not understood at ''"),
        ("*/x * * * *", "cron minute field '*/x': the step 'x' is not a number"),
        ("*/0 * * * *", "a step of 0 never advances: use 1 or more"),
        ("*/60 * * * *", "the step 60 is larger than the field's range (0-59)"),
        (
            "0 22-2 * * *",
            "runs backwards: a range cannot wrap around, so write it as a list of "
            "two ranges, e.g. '22-23,0-2'",
        ),
        ("0 9 * * fri-mon", "e.g. '5-7,0-1'"),
        ("0 9 * jan *x", "cron weekday field '*x' is not understood"),
        ("0 ９ * * *", "cron hour field '９' is not understood"),  # a full-width digit
    ],
)
def test_garbage_fields(expression, words):
    message = refused(expression)
    assert words in message
    if "not understood" in message:
        assert "use a number" in message and "a range (1-5), a step (*/15) or a list" in message


def test_names_of_months_and_weekdays():
    assert cron("0 9 * jan-mar mon,wed,FRI").expression == "0 9 * jan-mar mon,wed,FRI"
    assert "or a name (jan-dec)" in refused("0 9 * janvier *")
    assert "or a name (sun-sat)" in refused("0 9 * * lundi")


def test_a_day_of_the_month_and_a_weekday_together_are_refused():
    message = refused("0 9 1 * 1")
    assert "restricts both the day of the month (1) and the weekday (1)" in message
    assert "keep one and put * in the other" in message
    # A field starting with * leaves the other in charge, as crontab does: both must match.
    assert cron("0 9 */2 * 1").kind == "cron"


def test_a_cron_that_never_fires_is_refused():
    assert refused("0 0 30 2 *") == (
        "cron '0 0 30 2 *' never fires: its months have at most 29 days, and it asks for day 30"
    )
    assert "at most 30 days" in refused("0 0 31 4,6,9,11 *")
    assert cron("0 0 29 2 *").next_after(NOW) == datetime(2028, 2, 29, tzinfo=UTC)


# The minimum interval.


def test_every_minute_is_refused_with_the_limit_and_a_fix():
    assert refused("* * * * *") == (
        "cron '* * * * *' fires 1 minute apart at its closest; a scheduled task may fire at "
        "most every 5 minutes (e.g. '*/5 * * * *')"
    )


@pytest.mark.parametrize(
    ("expression", "gap"),
    [
        ("*/2 * * * *", "2 minutes"),
        ("0,3 9 * * *", "3 minutes"),
        ("*/7 * * * *", "4 minutes"),  # 56 and the next hour's 0
        ("59,1 23,0 * * *", "2 minutes"),  # 23:59 and 00:01: over midnight
        ("0,58 0,23 1,2 * *", "2 minutes"),  # 23:58 on the 1st, 00:00 on the 2nd
        ("0,58 0,23 31,1 * *", "2 minutes"),  # the 31st, then the 1st of the next month
    ],
)
def test_the_minimum_interval_counts_the_closest_fire_times(expression, gap):
    assert f"fires {gap} apart at its closest" in refused(expression)


@pytest.mark.parametrize(
    ("expression", "gap"),
    [
        ("58 9,10 * * *", "1 hour"),  # by the clock, not by the minute field
        ("0 0,23 * * 1,2", "1 hour"),  # Monday 23:00, then Tuesday 00:00
        ("0 0,23 * * 1,3", "23 hours"),  # no two days in a row
        ("0 23 * * *", "24 hours"),
        ("0 23 * * 1,3,5", "48 hours"),
    ],
)
def test_the_closest_gap_over_days(expression, gap):
    assert cron(expression).kind == "cron"
    assert f"fires {gap} apart" in refused(expression, min_interval_seconds=10 * 86_400)


def test_the_minimum_interval_is_configurable():
    assert cron("*/5 * * * *").expression == "*/5 * * * *"
    message = refused("*/5 * * * *", min_interval_seconds=900)
    assert "may fire at most every 15 minutes (e.g. '*/15 * * * *')" in message
    assert cron("* * * * *", min_interval_seconds=60).kind == "cron"
    assert "at most every 2 hours" in refused("0 * * * *", min_interval_seconds=7200)


def test_a_clock_change_that_brings_fire_times_together_is_refused():
    # By the wall clock 01:58 and 03:00 are 62 minutes apart; on 8 March 2026 New York's clocks
    # jump from 02:00 to 03:00, and the two are 2 minutes apart.
    message = refused("0,58 1,3 * * *", "America/New_York")
    assert message == (
        "cron '0,58 1,3 * * *' fires only 2 minutes apart when the clocks change in "
        "America/New_York on 2026-03-08; a scheduled task may fire at most every 5 minutes: "
        "move its times away from the change"
    )
    assert cron("0,58 1,3 * * *", "Asia/Shanghai").kind == "cron"  # no clock changes there
    assert cron("0,58 1,3 * * *", "UTC").kind == "cron"


def test_a_stored_schedule_rebuilds_from_its_three_values():
    schedule = cron("0 9 * * 1-5", "Asia/Shanghai")
    again = Schedule.stored(schedule.kind, schedule.expression, schedule.timezone)
    assert again == schedule
    with pytest.raises(ScheduleError, match="unknown schedule kind 'interval'"):
        Schedule.stored("interval", "300", "UTC")
    broken = Schedule("at", "not a date", "UTC")
    with pytest.raises(ScheduleError, match="stored instant"):
        broken.next_after(NOW)
    with pytest.raises(ScheduleError, match="unknown time zone"):
        Schedule("cron", "0 9 * * *", "Nowhere/Atlantis").next_after(NOW)


def test_next_timestamp_after_speaks_epoch_seconds():
    schedule = cron("0 9 * * *", "Asia/Shanghai")
    after = NOW.timestamp()
    assert (
        schedule.next_timestamp_after(after)
        == datetime(2026, 3, 2, 9, tzinfo=ZoneInfo("Asia/Shanghai")).timestamp()
    )
    one_off = at("2026-03-01T17:00")
    assert one_off.next_timestamp_after(after) == after + 3600
    assert one_off.next_timestamp_after(after + 3600) is None
