"""Time-zone names: the one rule every setting, card and tool checks them by.

An IANA name (``Asia/Shanghai``, ``UTC``) is a zone. Anything else is refused with the same
words everywhere: an unknown name, an empty one, a path, or a folder of the zone database
such as ``America`` (which ``ZoneInfo`` reports as an OSError).
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class UnknownTimeZone(ValueError):
    """``name`` is not an IANA time zone."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown time zone {name!r} (use an IANA name such as Asia/Shanghai)")
        self.name = name


@lru_cache(maxsize=64)
def time_zone(name: str) -> ZoneInfo:
    """The zone called ``name``; ``UnknownTimeZone`` when there is none."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownTimeZone(name)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UnknownTimeZone(name) from None


def check_time_zone(name: str) -> str:
    """``name`` when it is a zone (a pydantic validator's shape); ``UnknownTimeZone`` if not."""
    time_zone(name)
    return name
