"""Schedules in words: the phrases of the list, the card and the console, and the fallback that
never says something the schedule does not do."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.schedules import Schedule, parse_schedule

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "timezone", "words"),
    [
        ("0 9 * * 1-5", "Asia/Shanghai", "every weekday at 09:00 (Asia/Shanghai)"),
        ("0 9 * * mon-fri", "Asia/Shanghai", "every weekday at 09:00 (Asia/Shanghai)"),
        ("30 10 * * 1", "Europe/Berlin", "every Monday at 10:30 (Europe/Berlin)"),
        ("*/15 * * * *", "UTC", "every 15 minutes"),
        ("*/5 * * * *", "America/New_York", "every 5 minutes"),
        ("0 9 * * *", "UTC", "every day at 09:00 (UTC)"),
        ("@daily", "UTC", "every day at 00:00 (UTC)"),
        ("0 9,18 * * *", "UTC", "every day at 09:00 and 18:00 (UTC)"),
        ("0,30 9 * * 1,3,5", "UTC", "every Monday, Wednesday and Friday at 09:00 and 09:30 (UTC)"),
        ("0 10 * * 0,6", "UTC", "every Saturday and Sunday at 10:00 (UTC)"),
        ("0 10 * * 7", "UTC", "every Sunday at 10:00 (UTC)"),
        ("30 * * * *", "UTC", "every hour at :30 (UTC)"),
        ("@hourly", "Asia/Kolkata", "every hour at :00 (Asia/Kolkata)"),
        ("0 */2 * * *", "UTC", "every 2 hours at :00 (UTC)"),
        ("0 9-17 * * *", "UTC", "every hour from 09:00 to 17:00 (UTC)"),
        ("0 9-17 * * 1-5", "UTC", "every hour from 09:00 to 17:00 on weekdays (UTC)"),
        ("*/10 9-17 * * 1-5", "UTC", "every 10 minutes from 09:00 to 17:50 on weekdays (UTC)"),
        ("*/30 * * * 6", "UTC", "every 30 minutes on Saturdays (UTC)"),
        ("15,45 * * * *", "UTC", "cron: 15,45 * * * * (UTC)"),
        ("0 9 1 * *", "UTC", "on the 1st of every month at 09:00 (UTC)"),
        ("0 9 1,15 * *", "UTC", "on the 1st and 15th of every month at 09:00 (UTC)"),
        ("0 9 2,3,11,12,13,21,22,23 * *", "UTC", "cron: 0 9 2,3,11,12,13,21,22,23 * * (UTC)"),
        (
            "0 9 2,3,11,22,23 * *",
            "UTC",
            "on the 2nd, 3rd, 11th, 22nd and 23rd of every month at 09:00 (UTC)",
        ),
        ("@yearly", "UTC", "every year on 1 January at 00:00 (UTC)"),
        (
            "0 8 1 1,4,7,10 *",
            "UTC",
            "on the 1st of January, April, July and October at 08:00 (UTC)",
        ),
        ("0 */6 1 * *", "UTC", "on the 1st of every month at 00:00, 06:00, 12:00 and 18:00 (UTC)"),
        ("0 9 * 1-6 *", "UTC", "cron: 0 9 * 1-6 * (UTC)"),
        ("7,19,31,43 8 * * *", "UTC", "every day at 08:07, 08:19, 08:31 and 08:43 (UTC)"),
        ("7,19,31,43,55 8 * * *", "UTC", "cron: 7,19,31,43,55 8 * * * (UTC)"),
    ],
)
def test_cron_in_words(expression, timezone, words):
    schedule = parse_schedule(at=None, cron=expression, timezone=timezone, now=NOW)
    assert schedule.describe() == words


@pytest.mark.parametrize(
    ("text", "timezone", "words"),
    [
        ("2026-12-04T09:00", "Asia/Shanghai", "once, on Fri 4 Dec 2026 at 09:00 (Asia/Shanghai)"),
        ("2026-12-04T01:00Z", "Asia/Shanghai", "once, on Fri 4 Dec 2026 at 09:00 (Asia/Shanghai)"),
        (
            "2026-07-05T18:45:30",
            "Europe/Berlin",
            "once, on Sun 5 Jul 2026 at 18:45:30 (Europe/Berlin)",
        ),
    ],
)
def test_at_in_words(text, timezone, words):
    schedule = parse_schedule(at=text, cron=None, timezone=timezone, now=NOW)
    assert schedule.describe() == words


def test_words_of_a_stored_schedule():
    assert Schedule("cron", "0 9 * * 1-5", "UTC").describe() == "every weekday at 09:00 (UTC)"
