"""Feishu wire: the API client, its tokens and error tree, webhooks, cards, streaming.

``FeishuClient`` is the only way the bot calls the Feishu OpenAPI (through lark-oapi);
its failures are the ``FeishuError`` tree of :mod:`bot.feishu.errors`. The client
(and lark-oapi, ~2 s and 150 MB to import) loads on first use, so light modules such as
``bot.feishu.config`` stay light.
"""

from typing import TYPE_CHECKING, Any

from bot.approval_states import ApprovalState

from .admin_card import ADMIN_ACTION, AdminCardView, admin_button_value, admin_card
from .approval_card import (
    APPROVAL_ACTION,
    ApprovalCardView,
    approval_card,
    button_value,
)
from .errors import (
    FeishuCardInvalid,
    FeishuEditWindowClosed,
    FeishuError,
    FeishuMessageGone,
    FeishuProxyAuthRequired,
    FeishuRateLimited,
    FeishuResourceTooLarge,
    FeishuResourceUnavailable,
    FeishuScopeMissing,
    FeishuSequenceError,
    FeishuStreamingClosed,
    FeishuTokenInvalid,
    FeishuTooLarge,
    FeishuTransportError,
    error_for,
)
from .tokens import TenantTokenManager

if TYPE_CHECKING:
    from .client import BotInfo, FeishuClient, SentMessage
    from .fetched import FetchedMessage
    from .resources import Resource

__all__ = [
    "ADMIN_ACTION",
    "APPROVAL_ACTION",
    "AdminCardView",
    "ApprovalCardView",
    "ApprovalState",
    "BotInfo",
    "FeishuCardInvalid",
    "FeishuClient",
    "FeishuEditWindowClosed",
    "FeishuError",
    "FeishuMessageGone",
    "FeishuProxyAuthRequired",
    "FeishuRateLimited",
    "FeishuResourceTooLarge",
    "FeishuResourceUnavailable",
    "FeishuScopeMissing",
    "FeishuSequenceError",
    "FeishuStreamingClosed",
    "FeishuTokenInvalid",
    "FeishuTooLarge",
    "FeishuTransportError",
    "FetchedMessage",
    "Resource",
    "SentMessage",
    "TenantTokenManager",
    "admin_button_value",
    "admin_card",
    "approval_card",
    "button_value",
    "error_for",
]


def __getattr__(name: str) -> Any:
    if name in ("BotInfo", "FeishuClient", "SentMessage"):
        from . import client

        return getattr(client, name)
    if name == "Resource":
        from .resources import Resource

        return Resource
    if name == "FetchedMessage":
        from .fetched import FetchedMessage

        return FetchedMessage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
