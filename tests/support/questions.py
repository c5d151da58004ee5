"""Question cards over the wire, without a run that asks: a desk that
posts a question card as a running bot (its own Feishu client, so the card lands in the
emulator as the bot's), takes the card's clicks from the bot's own card route (registered
as the ``"question"`` card action) and answers them with the card as answered.

It records every click as the bot parsed it (``clicks``: ``CardAction``), so a test sees
what a person's press or form submission delivered, typed.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from bot.feishu.events import CardAction
from bot.feishu.question_card import (
    QUESTION_ACTION,
    QuestionCardView,
    QuestionClick,
    question_card,
    question_click,
)
from bot.governance.seal import ButtonSeal
from bot.wiring import Services


@dataclass
class QuestionDesk:
    services: Services
    seal: ButtonSeal = field(default_factory=lambda: ButtonSeal(b"question desk test key 0123456"))
    clicks: list[CardAction] = field(default_factory=list)
    answered: list[QuestionClick] = field(default_factory=list)
    views: dict[str, QuestionCardView] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # In place of ask_user's own handler: this desk's cards are its own, not questions
        # of a run, and the tests read the clicks as the bot parsed them.
        self.services.governance.card_actions.swap(QUESTION_ACTION, self._click)

    async def ask(
        self, chat_id: str, question: str, *, asker: str, options: tuple[str, ...] = ()
    ) -> str:
        """Post the question's card in ``chat_id`` as the bot; returns its message id."""
        view = QuestionCardView(
            question_id=uuid.uuid4().hex,
            question=question,
            asker=asker,
            expires_at=time.time() + 600,
            options=options,
        )
        self.views[view.question_id] = view
        sent = await self.services.feishu.send_message(
            "chat_id",
            chat_id,
            msg_type="interactive",
            content=json.dumps(question_card(view, seal=self.seal.sealed), ensure_ascii=False),
        )
        return sent.message_id

    async def _click(self, action: CardAction) -> dict[str, Any]:
        self.clicks.append(action)
        click = question_click(action)
        if click is None or not self.seal.valid(dict(click.value)):
            return _toast("error", "This button is no longer active.")
        view = self.views.get(click.question_id)
        if view is None or view.state != "pending":
            return _toast("info", "This question was already answered.")
        if action.operator_open_id != view.asker:
            return _toast("error", "Only the person asked can answer.")
        if click.option is not None and click.option >= len(view.options):
            return _toast("error", "This button is no longer active.")
        answer = view.options[click.option] if click.option is not None else click.text
        ended = replace(
            view,
            state="answered",
            answer=answer,
            answered_by=action.operator_open_id,
            decided_at=time.time(),
        )
        self.views[view.question_id] = ended
        self.answered.append(click)
        return _toast("success", "Thanks, carrying on.", question_card(ended, seal=None))


def _toast(kind: str, content: str, card: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"toast": {"type": kind, "content": content}}
    if card is not None:
        answer["card"] = {"type": "raw", "data": card}
    return answer
