"""Properties over generated schedules (hypothesis): any cron that parses fires at strictly
increasing instants at least the minimum interval apart, from any moment, clock changes
included; parsing never fails but with a ScheduleError; the words never fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bot.schedules import MAX_AHEAD, Schedule, ScheduleError, parse_schedule
from bot.schedules.schedule import clock_changes

NOW = datetime(2026, 3, 1, tzinfo=UTC)
ZONES = (
    "UTC",
    "Asia/Shanghai",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # its clocks move by half an hour
    "Asia/Kolkata",
)
PROPERTIES = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    ranged = st.tuples(value, value).map(lambda pair: f"{min(pair)}-{max(pair)}")
    step = st.integers(1, high - low)
    return st.one_of(
        st.just("*"),
        value.map(str),
        step.map(lambda n: f"*/{n}"),
        ranged,
        st.tuples(ranged, step).map(lambda pair: f"{pair[0]}/{pair[1]}"),
        st.lists(value, min_size=2, max_size=4).map(lambda values: ",".join(map(str, values))),
    )


ANY_CRON = st.tuples(field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 7))
# Times at both ends of an hour, around a skipped hour of the night: e.g. "0,58 1,3 * * *" is
# 58 minutes apart by the clock and 2 minutes apart when New York's jump from 02:00 to 03:00.
NIGHT_CRON = st.tuples(
    st.sampled_from(["0", "1", "0,1", "0,30"]),
    st.sampled_from(["55", "58", "59", "30,58"]),
    st.integers(1, 3),
).map(lambda parts: (f"{parts[0]},{parts[1]}", f"{parts[2] - 1},{parts[2] + 1}", "*", "*", "*"))
CRONS = st.one_of(ANY_CRON, NIGHT_CRON).map(" ".join)
MIN_INTERVALS = st.sampled_from([60.0, 300.0, 900.0, 3600.0])


def starts(zone: str) -> st.SearchStrategy[datetime]:
    """Moments after NOW, most of them in the day before one of the zone's clock changes (a
    spring forward's above all: where fire times can come together)."""
    changes = [change for change in clock_changes(zone, NOW.year) if change > NOW]
    anywhere = st.integers(0, int(MAX_AHEAD.total_seconds()) - 86_400 * 40).map(
        lambda seconds: NOW + timedelta(seconds=seconds)
    )
    if not changes:
        return anywhere
    forward = [change for change in changes if _offset(zone, change, 1) > _offset(zone, change, -1)]
    # From a day before the change: the fire times either side of it are among the next 40.
    before = st.integers(0, 18 * 3600).map(lambda seconds: timedelta(seconds=seconds - 86_400))
    near_forward = st.tuples(st.sampled_from(forward), before).map(sum_of)
    near_any = st.tuples(st.sampled_from(changes), before).map(sum_of)
    return st.one_of(near_forward, near_any, anywhere)


def _offset(zone: str, moment: datetime, seconds: int) -> timedelta | None:
    return (moment + timedelta(seconds=seconds)).astimezone(ZoneInfo(zone)).utcoffset()


def sum_of(pair: tuple[datetime, timedelta]) -> datetime:
    return pair[0] + pair[1]


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, float, datetime]:
    zone = draw(st.sampled_from(ZONES))
    return draw(CRONS), zone, draw(MIN_INTERVALS), draw(starts(zone))


@PROPERTIES
@given(cases())
def test_fire_times_increase_and_keep_the_minimum_interval(case):
    expression, zone, least, start = case
    try:
        schedule = parse_schedule(
            at=None, cron=expression, timezone=zone, now=NOW, min_interval_seconds=least
        )
    except ScheduleError:
        assume(False)
        return
    assert schedule.describe()
    again = Schedule.stored(schedule.kind, schedule.expression, schedule.timezone)
    assert again.next_after(start) == schedule.next_after(start)
    previous = None
    moment: datetime | None = start
    for _ in range(40):
        assert moment is not None
        following = schedule.next_after(moment)
        assert following is not None, "a cron always fires again"
        assert following.timestamp() > moment.timestamp()
        if previous is not None:
            assert following.timestamp() - previous.timestamp() >= least, (previous, following)
        previous = moment = following


@PROPERTIES
@given(st.text(max_size=40), st.sampled_from(ZONES))
def test_any_text_is_a_schedule_or_a_schedule_error(text, zone):
    reasons: list[str] = []
    for at, cron in ((text, None), (None, text)):
        try:
            schedule = parse_schedule(at=at, cron=cron, timezone=zone, now=NOW)
        except ScheduleError as error:
            reasons.append(str(error))
            continue
        assert schedule.describe()
        assert schedule.next_after(NOW) is not None
    assert all(reasons)  # every refusal says why


@PROPERTIES
@given(st.integers(31, int(MAX_AHEAD.total_seconds()) - 1), st.sampled_from(ZONES))
def test_a_one_off_fires_at_its_instant_once(offset, zone):
    moment = NOW + timedelta(seconds=offset)
    schedule = parse_schedule(at=moment.isoformat(), cron=None, timezone=zone, now=NOW)
    due = schedule.next_after(NOW)
    assert due is not None
    assert due == moment.replace(microsecond=0)
    assert schedule.next_after(due) is None
    assert schedule.describe().startswith("once, on ")
