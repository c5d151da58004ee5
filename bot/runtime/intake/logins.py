"""``/login`` and ``/logout``: a person grants or withdraws the bot's right to act as them.

``/login`` posts the authorisation card for the scopes of every tool that acts as the user,
so a person can consent ahead of time instead of in the middle of a request; ``/logout``
forgets their grant (and cancels any card still waiting for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.feishu.events import InboundMessage
from bot.governance.user_auth.ask import Asking
from bot.governance.user_auth.service import UserAuth
from bot.runtime import texts


@dataclass(frozen=True, slots=True)
class LoginReply:
    """Either the card was posted (``card_message_id``) or ``text`` says why not."""

    text: str = ""
    card_message_id: str = ""


class Logins:
    def __init__(self, user_auth: UserAuth, scopes: tuple[str, ...]) -> None:
        self._user_auth = user_auth
        self._scopes = scopes

    async def login(self, message: InboundMessage) -> LoginReply:
        asking = Asking(
            message.sender_open_id, message.chat_id, message.message_id, message.thread_id
        )
        outcome = await self._user_auth.login(asking, self._scopes)
        if outcome.kind == "card":
            return LoginReply(card_message_id=outcome.detail)
        if outcome.kind == "no_tools":
            return LoginReply(texts.LOGIN_NO_TOOLS)
        if outcome.kind == "already":
            return LoginReply(texts.LOGIN_ALREADY)
        return LoginReply(texts.login_failed(outcome.detail))

    async def logout(self, message: InboundMessage) -> str:
        had = await self._user_auth.logout(message.sender_open_id, chat_id=message.chat_id)
        return texts.LOGGED_OUT if had else texts.NOT_LOGGED_IN
