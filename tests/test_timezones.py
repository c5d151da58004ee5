"""The one time-zone rule: the settings, the cards and the tools accept exactly the same
names, and refuse the rest with the same words."""

from __future__ import annotations

from zoneinfo import available_timezones

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bot.config import SettingsError, load_settings
from bot.timezones import UnknownTimeZone, time_zone
from connectors.feishu import FeishuWorkspace

ZONES = sorted(available_timezones())


@pytest.mark.parametrize("name", ["Asia/Shanghai", "UTC", "Europe/Berlin"])
def test_iana_names_are_zones_everywhere(name):
    assert time_zone(name).key == name
    assert load_settings(larkgate_timezone=name).larkgate_timezone == name
    assert FeishuWorkspace.Settings(timezone=name).timezone == name


@pytest.mark.parametrize("name", ["Mars/Olympus", "", " ", "America", "../etc/passwd", "UTC+8"])
def test_everything_else_is_refused_in_the_same_words(name):
    with pytest.raises(UnknownTimeZone, match="unknown time zone"):
        time_zone(name)
    with pytest.raises(SettingsError, match="unknown time zone"):
        load_settings(larkgate_timezone=name)
    with pytest.raises(ValidationError, match="unknown time zone"):
        FeishuWorkspace.Settings(timezone=name)


@given(st.sampled_from(ZONES) | st.text(max_size=30))
def test_the_rule_is_zoneinfos_own_on_any_text(name):
    try:
        zone = time_zone(name)
    except UnknownTimeZone:
        assert name not in ZONES
    else:
        assert zone.key == name
