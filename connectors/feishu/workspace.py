"""The Feishu workspace connector: its tool families mixed into one connector class."""

from __future__ import annotations

from lark_oapi.api.im.v1 import ListChatRequest

from bot.feishu.errors import FeishuError, FeishuScopeMissing
from connectors.base import ConnectorStatus

from .bitable import BitableTools
from .calendar import CalendarTools
from .charts import ChartTools
from .chats import ChatTools
from .docs import DocumentTools
from .errors import scope_text
from .files import FileTools
from .messages import MessageTools
from .settings import FeishuWorkspaceSettings
from .tasks import TaskTools
from .users import UserTools


# MessageTools builds on UserTools (sender names), so it must come before it.
class FeishuWorkspace(
    MessageTools,
    UserTools,
    ChatTools,
    CalendarTools,
    TaskTools,
    BitableTools,
    DocumentTools,
    FileTools,
    ChartTools,
):
    """People, chats, calendar, tasks, Base and docs of the bot's Feishu tenant; files and
    charts sent into the conversation being answered."""

    name = "feishu"
    Settings = FeishuWorkspaceSettings

    async def check(self) -> ConnectorStatus:
        """One cheap call (the first chat of the bot): credentials, reachability, scope."""
        tools = len(self.tools())
        client = self.context.feishu
        if client is None:
            return ConnectorStatus(self.name, False, "no Feishu client configured", tools)
        try:
            await client.call("im.chat.list", ListChatRequest.builder().page_size(1).build())
        except FeishuScopeMissing as exc:
            detail = (
                f"the Feishu app lacks a permission scope ({scope_text(exc)}); "
                "add it in the Feishu developer console"
            )
            return ConnectorStatus(self.name, False, detail, tools)
        except FeishuError as exc:
            return ConnectorStatus(self.name, False, f"Feishu check failed: {exc}", tools)
        return ConnectorStatus(self.name, True, "ready", tools)


__all__ = ["FeishuWorkspace"]
