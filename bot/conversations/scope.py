"""Scope keys: the rule that maps a chat message to a conversation.

A DM is one conversation per user. In a group the scope is configurable: the whole
chat (default), each sender in the chat, each topic, or each sender in each topic.
A topic is identified by its root message, which every reply in it names as
``root_id``; a message that is not a reply starts its own topic. (``thread_id`` is not
used: a topic's first message may lack it while its replies carry it.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["chat", "chat_sender", "topic", "topic_sender"]


@dataclass(frozen=True, slots=True)
class ScopeInput:
    chat_type: str
    chat_id: str
    sender_open_id: str
    message_id: str
    root_id: str = ""


def scope_key(message: ScopeInput, group_scope: Scope, app: str = "") -> str:
    """A stable string naming the conversation ``message`` belongs to. ``app``: the
    [apps.NAME] the message came to ("" the default app); two bots in one group hold two
    conversations there, each its own history, lock and grants."""
    return in_app(app, _key(message, group_scope))


def in_app(app: str, key: str) -> str:
    """``key`` as the [apps.NAME] ``app`` keeps it ("" the default app: unchanged, so the
    default app's rows from before several apps are still its own)."""
    return f"app:{app}:{key}" if app else key


def _key(message: ScopeInput, group_scope: Scope) -> str:
    if message.chat_type == "p2p":
        return f"dm:{message.sender_open_id}"
    chat = f"chat:{message.chat_id}"
    if group_scope == "chat":
        return chat
    if group_scope == "chat_sender":
        return f"{chat}:user:{message.sender_open_id}"
    topic = f"{chat}:topic:{message.root_id or message.message_id}"
    if group_scope == "topic":
        return topic
    return f"{topic}:user:{message.sender_open_id}"
