"""The Feishu API budget's steps: when each starts, and that it only ever rises with use."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from bot.runtime.api_budget import DELIVERIES, budget_level, month_of


def test_the_steps_by_share_of_the_budget():
    late = 0.99  # the month's pace says nothing more this late
    assert budget_level(0, 10_000, late) == 0
    assert budget_level(5_999, 10_000, late) == 0
    assert budget_level(6_000, 10_000, late) == 1
    assert budget_level(8_500, 10_000, late) == 2
    assert budget_level(9_500, 10_000, late) == 3
    assert budget_level(50_000, 10_000, late) == 3  # past it: still answering, as text
    assert budget_level(50_000, 0, late) == 0  # no budget set


def test_a_pace_that_would_spend_the_budget_early_takes_the_first_step_at_once():
    # 2,000 calls in the first 10% of the month: 20,000 at this pace.
    assert budget_level(2_000, 10_000, 0.10) == 1
    assert budget_level(800, 10_000, 0.10) == 0
    # The first hours judge nothing: the pace counts from a day on.
    assert budget_level(300, 10_000, 0.001) == 0


@given(
    budget=st.integers(1, 10**6),
    elapsed=st.floats(0, 1),
    used=st.integers(0, 2 * 10**6),
    more=st.integers(0, 10**6),
)
def test_more_use_never_lowers_the_step(budget, elapsed, used, more):
    level = budget_level(used, budget, elapsed)
    assert 0 <= level < len(DELIVERIES)
    assert budget_level(used + more, budget, elapsed) >= level


def test_months_in_the_time_zone_and_how_far_into_them():
    shanghai = ZoneInfo("Asia/Shanghai")
    # 2026-12-31 20:00 UTC is already January in Shanghai.
    moment = datetime(2026, 12, 31, 20, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    assert month_of(moment, ZoneInfo("UTC"))[0] == "2026-12"
    month, elapsed = month_of(moment, shanghai)
    assert month == "2027-01" and 0 < elapsed < 0.01
    assert month_of(datetime(2026, 2, 15, tzinfo=shanghai).timestamp(), shanghai)[1] == 0.5
