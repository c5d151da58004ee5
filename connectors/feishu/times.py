"""Times in and out of the workspace tools: what the model passes, what Feishu returns."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Any

from connectors.base import ToolError

_UNIX = re.compile(r"\d{9,13}")


def parse_time(value: str, name: str, zone: tzinfo) -> datetime:
    """ISO 8601 (in ``zone`` when no offset is given) or unix seconds/ms."""
    text = value.strip()
    if _UNIX.fullmatch(text):
        number = int(text)
        return datetime.fromtimestamp(number / 1000 if number > 10**11 else number, zone)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"{name}: {value!r} is neither ISO 8601 (2025-05-01T14:00, "
            "2025-05-01T14:00+08:00) nor unix seconds"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def from_epoch(value: Any, scale: int = 1) -> datetime | None:
    """A Feishu time string (ms by default; ``scale=1000`` for seconds) as a UTC datetime."""
    try:
        number = int(str(value))
    except ValueError:
        return None
    return datetime.fromtimestamp(number * scale / 1000, UTC) if number else None


def format_time(moment: datetime | None, zone: tzinfo) -> str:
    return "?" if moment is None else moment.astimezone(zone).strftime("%Y-%m-%d %H:%M")


__all__ = ["format_time", "from_epoch", "parse_time"]
