"""The Feishu workspace connector's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bot.timezones import check_time_zone
from connectors.base import ConnectorSettings

UserIdType = Literal["open_id", "union_id", "user_id"]


class FeishuWorkspaceSettings(ConnectorSettings):
    """``FEISHU_CONNECTOR_<NAME>`` in the environment, or ``[connectors.feishu]``."""

    calendar_id: str = "primary"  # "primary": the bot's own primary calendar
    user_id_type: UserIdType = "open_id"
    timezone: str = "Asia/Shanghai"  # for times without an offset, and in results
    page_size: int = Field(default=20, ge=1, le=50)  # default number of items a list shows
    user_search_department_id: str = "0"  # name search scans this department's members
    user_search_max_pages: int = Field(default=4, ge=1, le=20)  # of 50 members each
    document_max_chars: int = Field(default=8000, ge=200, le=100_000)
    resolve_sender_names: bool = True  # one contact call per history read
    # feishu_send_file / feishu_send_chart. Feishu takes files up to 30 MB; a smaller cap
    # keeps one model-made file from holding a worker (and the chat) for long.
    send_file_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=30 * 1024 * 1024)
    send_table_max_rows: int = Field(default=100_000, ge=1, le=1_000_000)
    chart_max_points: int = Field(default=5_000, ge=10, le=100_000)  # over all series

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_time_zone(value)


__all__ = ["FeishuWorkspaceSettings", "UserIdType"]
