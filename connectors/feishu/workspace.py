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
from .my_calendar import MyCalendarTools
from .my_search import MySearchTools
from .my_tasks import MyTaskTools
from .settings import FeishuWorkspaceSettings
from .tasks import TaskTools
from .users import UserTools


# A family that builds on another comes before it: the ``My*`` families (which act as
# the asker) before MessageTools, UserTools, CalendarTools and TaskTools, and
# MessageTools (sender names) before UserTools.
class FeishuWorkspace(
    MySearchTools,
    MyCalendarTools,
    MyTaskTools,
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
    charts sent into the conversation being answered; and, as the person asking (their
    user token), their own calendar, tasks, documents and messages (``feishu_my_*``)."""

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
        if self.context.user_tokens is None:
            detail = "ready; the feishu_my_* tools need LARKGATE_TOKEN_KEY to act as users"
            return ConnectorStatus(self.name, True, detail, tools)
        return ConnectorStatus(self.name, True, "ready", tools)


__all__ = ["FeishuWorkspace"]
