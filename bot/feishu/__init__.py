"""Feishu wire: the API client, its tokens and error tree, webhooks, cards, streaming.

``FeishuClient`` is the only way the bot calls the Feishu OpenAPI (through lark-oapi);
its failures are the ``FeishuError`` tree of :mod:`bot.feishu.errors`.
"""

from .client import BotInfo, FeishuClient, SentMessage
from .errors import (
    FeishuCardInvalid,
    FeishuEditWindowClosed,
    FeishuError,
    FeishuMessageGone,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuSequenceError,
    FeishuStreamingClosed,
    FeishuTokenInvalid,
    FeishuTooLarge,
    FeishuTransportError,
    error_for,
)
from .tokens import TenantTokenManager

__all__ = [
    "BotInfo",
    "FeishuCardInvalid",
    "FeishuClient",
    "FeishuEditWindowClosed",
    "FeishuError",
    "FeishuMessageGone",
    "FeishuRateLimited",
    "FeishuScopeMissing",
    "FeishuSequenceError",
    "FeishuStreamingClosed",
    "FeishuTokenInvalid",
    "FeishuTooLarge",
    "FeishuTransportError",
    "SentMessage",
    "TenantTokenManager",
    "error_for",
]
