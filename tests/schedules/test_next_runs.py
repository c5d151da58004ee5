"""Next fire times: crontab's meaning (weekday 1 is Monday), time zones, and the clock changes
of Europe/Berlin and America/New_York, both ways. Times are compared as instants (UTC): Python
compares two datetimes of one zone by wall time, which is wrong across a fall back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from bot.schedules import Schedule, parse_schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def fires(expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times after `after`, each from the one before (as the store
    computes them), as UTC instants."""
    schedule = parse_schedule(at=None, cron=expression, timezone=timezone, now=NOW)
    found = []
    for _ in range(count):
        following = schedule.next_after(after)
        assert following is not None
        assert following.tzinfo == ZoneInfo(timezone)  # in the task's zone
        found.append(following.astimezone(UTC))
        after = following
    return found


def wall(moments: list[datetime], zone: ZoneInfo) -> list[str]:
    return [moment.astimezone(zone).strftime("%a %d %H:%M %Z") for moment in moments]


def test_weekdays_are_numbered_as_crontab_numbers_them():
    # APScheduler's from_crontab would read 1-5 as Tuesday to Saturday.
    after = datetime(2026, 3, 1, tzinfo=SHANGHAI)  # a Sunday
    assert wall(fires("0 9 * * 1-5", "Asia/Shanghai", after, 6), SHANGHAI) == [
        "Mon 02 09:00 CST",
        "Tue 03 09:00 CST",
        "Wed 04 09:00 CST",
        "Thu 05 09:00 CST",
        "Fri 06 09:00 CST",
        "Mon 09 09:00 CST",
    ]
    for sunday in ("0", "7", "sun", "SUN"):
        assert wall(fires(f"0 9 * * {sunday}", "UTC", NOW, 1), ZoneInfo("UTC")) == [
            "Sun 01 09:00 UTC"
        ]
    assert wall(fires("0 9 * * */2", "UTC", NOW, 4), ZoneInfo("UTC")) == [
        "Sun 01 09:00 UTC",  # 0, 2, 4, 6: Sunday, Tuesday, Thursday, Saturday
        "Tue 03 09:00 UTC",
        "Thu 05 09:00 UTC",
        "Sat 07 09:00 UTC",
    ]


def test_strictly_after():
    schedule = parse_schedule(at=None, cron="0 9 * * *", timezone="UTC", now=NOW)
    nine = datetime(2026, 3, 1, 9, tzinfo=UTC)
    assert schedule.next_after(nine - timedelta(microseconds=1)) == nine
    assert schedule.next_after(nine) == nine + timedelta(days=1)


def test_the_same_wall_time_is_a_different_instant_in_each_zone():
    moments = {
        zone: fires("0 9 * * *", zone, NOW, 1)[0]
        for zone in ("Asia/Shanghai", "Europe/Berlin", "America/New_York")
    }
    assert moments == {
        "Asia/Shanghai": datetime(2026, 3, 1, 1, tzinfo=UTC),
        "Europe/Berlin": datetime(2026, 3, 1, 8, tzinfo=UTC),
        "America/New_York": datetime(2026, 3, 1, 14, tzinfo=UTC),
    }


def test_a_daily_time_keeps_its_wall_time_across_the_clock_changes():
    # New York: summer time from 8 March, winter time from 1 November 2026.
    spring = fires("0 9 * * *", "America/New_York", datetime(2026, 3, 6, tzinfo=UTC), 4)
    assert [moment.hour for moment in spring] == [14, 14, 13, 13]
    autumn = fires("0 9 * * *", "America/New_York", datetime(2026, 10, 30, tzinfo=UTC), 4)
    assert [moment.hour for moment in autumn] == [13, 13, 14, 14]


def test_spring_forward_a_skipped_daily_time_fires_once_an_hour_later():
    # Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    found = fires("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 27, tzinfo=UTC), 4)
    assert wall(found, BERLIN) == [
        "Fri 27 02:30 CET",
        "Sat 28 02:30 CET",
        "Sun 29 03:30 CEST",  # the instant 02:30 CET would have been
        "Mon 30 02:30 CEST",
    ]
    assert found[2] == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def test_spring_forward_in_new_york():
    found = fires("30 2 * * *", "America/New_York", datetime(2026, 3, 7, tzinfo=UTC), 3)
    assert wall(found, NEW_YORK) == ["Sat 07 02:30 EST", "Sun 08 03:30 EDT", "Mon 09 02:30 EDT"]


def test_spring_forward_the_times_of_a_skipped_hour_fire_once():
    found = fires("*/15 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 12, tzinfo=UTC), 3)
    assert wall(found, BERLIN) == ["Sun 29 03:00 CEST", "Mon 30 02:00 CEST", "Mon 30 02:15 CEST"]


def test_spring_forward_a_rhythm_goes_on_by_real_time():
    found = fires("*/20 * * * *", "Europe/Berlin", datetime(2026, 3, 29, 0, 30, tzinfo=UTC), 3)
    assert wall(found, BERLIN) == ["Sun 29 01:40 CET", "Sun 29 03:00 CEST", "Sun 29 03:20 CEST"]
    assert found[1] - found[0] == timedelta(minutes=20)


def test_fall_back_a_repeated_daily_time_fires_once():
    # Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    found = fires("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 23, tzinfo=UTC), 4)
    assert wall(found, BERLIN) == [
        "Fri 23 02:30 CEST",
        "Sat 24 02:30 CEST",
        "Sun 25 02:30 CEST",  # the first 02:30 only
        "Mon 26 02:30 CET",
    ]
    # New York, 1 November 2026: 01:30 happens twice.
    found = fires("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12, tzinfo=UTC), 2)
    assert wall(found, NEW_YORK) == ["Sun 01 01:30 EDT", "Mon 02 01:30 EST"]


def test_fall_back_from_inside_the_repeated_hour():
    schedule = Schedule("cron", "30 1 * * *", "America/New_York")
    second_one = datetime(2026, 11, 1, 1, 10, fold=1, tzinfo=NEW_YORK)  # 01:10 EST
    following = schedule.next_after(second_one)
    assert following is not None
    assert following.astimezone(UTC) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)


def test_fall_back_a_rhythm_fires_through_the_repeated_hour():
    found = fires("*/15 * * * *", "America/New_York", datetime(2026, 11, 1, 5, 30, tzinfo=UTC), 7)
    assert wall(found, NEW_YORK) == [
        "Sun 01 01:45 EDT",
        "Sun 01 01:00 EST",
        "Sun 01 01:15 EST",
        "Sun 01 01:30 EST",
        "Sun 01 01:45 EST",
        "Sun 01 02:00 EST",
        "Sun 01 02:15 EST",
    ]
    assert {b - a for a, b in pairwise(found)} == {timedelta(minutes=15)}
    hourly = fires("0 * * * *", "Europe/Berlin", datetime(2026, 10, 24, 23, 30, tzinfo=UTC), 3)
    assert wall(hourly, BERLIN) == ["Sun 25 02:00 CEST", "Sun 25 02:00 CET", "Sun 25 03:00 CET"]


def test_fixed_hours_fire_once_in_a_repeated_hour():
    found = fires("0,30 1,2 * * *", "America/New_York", datetime(2026, 11, 1, 4, tzinfo=UTC), 4)
    assert wall(found, NEW_YORK) == [
        "Sun 01 01:00 EDT",
        "Sun 01 01:30 EDT",
        "Sun 01 02:00 EST",
        "Sun 01 02:30 EST",
    ]


def test_day_of_month_and_leap_years():
    found = fires("0 0 31 * *", "UTC", NOW, 3)
    assert [moment.date().isoformat() for moment in found] == [
        "2026-03-31",
        "2026-05-31",
        "2026-07-31",
    ]
    leap = fires("0 12 29 2 *", "UTC", NOW, 2)
    assert [moment.year for moment in leap] == [2028, 2032]


def test_a_one_off_fires_once():
    schedule = parse_schedule(at="2026-12-04T09:00", cron=None, timezone="Asia/Shanghai", now=NOW)
    moment = schedule.next_after(NOW)
    assert moment == datetime(2026, 12, 4, 1, tzinfo=UTC)
    assert moment is not None and moment.tzinfo == SHANGHAI
    assert schedule.next_after(moment - timedelta(seconds=1)) == moment
    assert schedule.next_after(moment) is None
    assert schedule.next_after(moment + timedelta(days=1)) is None


def test_after_must_be_aware():
    schedule = Schedule("cron", "0 9 * * *", "UTC")
    with pytest.raises(ValueError, match="aware"):
        schedule.next_after(datetime(2026, 3, 1))
