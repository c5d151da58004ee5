"""``ask_user``: the agent asks the person it answers, and waits for their answer.

A thin policy on the one way a run waits for a person (``person_wait.py``): the question
is a row (``bot/store/questions.py``) that only its asker can answer, once; the card
(``bot/feishu/question_card.py``) shows the question as plain text, a button per option
or a form for a free-text answer, its values sealed. Before the card goes out the run is
saved (``park``), so a restart resumes it and the resumed call meets its question again:
answered meanwhile, it has its answer; still open, it waits on the same card. Expiry
(``LARKGATE_QUESTION_TTL_SECONDS``) tells the model that nobody answered. The tool is not
a write: it asks, needs no approval, and shows as a step on the live card.

Who may answer is the asker of the run as the question is asked: the starter of a run
nobody else joined. In a group, anyone else's click gets a toast and changes nothing
(the store refuses it too, whatever a caller forgets to check).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from bot.engine import Tool, ToolError, current_tool_use
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.feishu.events import CardAction
from bot.feishu.question_card import (
    MAX_OPTIONS,
    OPTION_CHARS,
    QuestionCardView,
    question_card,
    question_click,
)
from bot.store.questions import (
    CANCELLED,
    PENDING,
    NewQuestion,
    QuestionRecord,
    QuestionStore,
)
from bot.turn_context import TurnContext, current_turn

from .actions import toast
from .person_wait import PersonWaits, call_key, hold, park
from .posting import post_card, reply_with_card
from .seal import ButtonSeal

logger = logging.getLogger(__name__)

TOOL_NAME = "ask_user"
QUESTION_CHARS = 2000
STOPPED_NOTE = "the reply was stopped"
DESCRIPTION = (
    "Ask the person you are answering a question and wait for their answer: use it when "
    "you cannot go on without a choice or a fact only they have. With `options` (short "
    "strings), they pick one; without, they type an answer. Returns their answer, or says "
    "that nobody answered in time."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The question, complete on its own."},
        "options": {
            "type": "array",
            "items": {"type": "string"},
            "description": f"Up to {MAX_OPTIONS} short answers to choose from (optional).",
        },
    },
    "required": ["question"],
}


class Questions:
    def __init__(
        self,
        *,
        store: QuestionStore,
        waits: PersonWaits[QuestionRecord],
        feishu: FeishuClient,
        seal: ButtonSeal,
        owner: str,
        ttl_seconds: float,
        name_of: Callable[[str], Awaitable[str]],
        timezone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.waits = waits
        self._feishu = feishu
        self._seal = seal
        self._owner = owner
        self._ttl = ttl_seconds
        self._name_of = name_of
        self._timezone = timezone
        self._clock = clock

    def tool(self) -> Tool:
        async def ask_user(question: str, options: list[str] | None = None) -> str:
            return await self.ask(question, options or [])

        # It waits as long as the question does, and a little for the card.
        return Tool(
            TOOL_NAME,
            DESCRIPTION,
            PARAMETERS,
            ask_user,
            side_effect="read",
            timeout=self._ttl + 30.0,
        )

    async def ask(self, question: str, options: list[str]) -> str:
        turn = current_turn()
        use = current_tool_use()
        if turn is None or use is None:
            raise ToolError("there is nobody to ask here (no chat is open)")
        askers = turn.askers()
        if askers.several:
            raise ToolError(
                "several people's messages are in this reply, so no one person can answer "
                "for all of them: ask in the answer instead"
            )
        key = call_key(use)
        earlier = await self._store.find(turn.run_id, key) if key is not None else None
        if earlier is not None and earlier.question == question.strip()[:QUESTION_CHARS]:
            record = earlier  # a resumed run meets its question again
            if record.state == PENDING:
                await park(use, turn)  # saved again, as it waits again
        else:
            await park(use, turn)  # before the card: an answer must find the run resumable
            record = await self._create(turn, key or use.call_id, question, options)
        if record.state == PENDING:
            record = await self._wait(record, use.call_id, turn)
        return await self._observation(record)

    async def _create(
        self, turn: TurnContext, call_id: str, question: str, options: list[str]
    ) -> QuestionRecord:
        text = question.strip()[:QUESTION_CHARS]
        if not text:
            raise ToolError("the question is empty")
        chosen: list[str] = []
        for option in options:
            cleaned = " ".join(str(option).split())[:OPTION_CHARS]
            if cleaned and cleaned not in chosen:
                chosen.append(cleaned)
        return await self._store.create(
            NewQuestion(
                run_id=turn.run_id,
                call_id=call_id,
                scope_key=turn.scope_key,
                generation=turn.generation,
                chat_id=turn.chat_id,
                message_id=turn.message_id,
                thread_id=turn.thread_id,
                asker=turn.askers().starter,
                question=text,
                options=tuple(chosen[:MAX_OPTIONS]),
                owner=self._owner,
                ttl_seconds=self._ttl,
            )
        )

    async def _wait(
        self, record: QuestionRecord, call_id: str, turn: TurnContext
    ) -> QuestionRecord:
        future = self.waits.register(record.id)
        try:
            if record.card_message_id is None:
                pending = record

                async def stopped(message_id: str | None) -> None:
                    await self._close(replace(pending, card_message_id=message_id), STOPPED_NOTE)

                try:
                    message_id = await post_card(self._post(record), if_cancelled=stopped)
                except FeishuError as exc:
                    logger.error("could not post question card %s: %s", record.id, exc)
                    outcome = await self._store.cancel(
                        record.id, f"the card could not be sent ({exc})"
                    )
                    return outcome.record or record
                record = replace(record, card_message_id=message_id)
            current = record
            return await hold(
                self.waits,
                future,
                remaining=record.expires_at - self._clock(),
                turn=turn,
                call_id=call_id,
                on_expiry=lambda: self._expire(current),
                on_stop=lambda: self._close(current, STOPPED_NOTE),
            )
        finally:
            self.waits.discard(record.id)

    async def _post(self, record: QuestionRecord) -> str:
        card_message_id = await reply_with_card(
            self._feishu,
            message_id=record.message_id,
            thread_id=record.thread_id,
            card=self.card(record),
            uuid=f"question-{record.id}",
        )
        await self._store.attach_card(record.id, card_message_id)
        return card_message_id

    def card(self, record: QuestionRecord) -> dict[str, Any]:
        view = QuestionCardView(
            question_id=record.id,
            question=record.question,
            asker=record.asker,
            expires_at=record.expires_at,
            options=record.options,
            state=record.state,
            answer=record.answer,
            answered_by=record.answered_by,
            decided_at=record.decided_at,
            note=record.note,
            timezone=self._timezone,
        )
        return question_card(view, seal=self._seal.sealed if record.state == PENDING else None)

    async def _refresh(self, record: QuestionRecord) -> None:
        if not record.card_message_id:
            return
        try:
            await self._feishu.patch_message(
                record.card_message_id, json.dumps(self.card(record), ensure_ascii=False)
            )
        except FeishuError as exc:
            logger.warning("could not update question card %s: %s", record.id, exc)

    async def _expire(self, record: QuestionRecord) -> QuestionRecord:
        outcome = await self._store.expire(record.id)
        current = outcome.record or record
        if outcome.changed:
            await self._refresh(replace(current, card_message_id=record.card_message_id))
        return current

    async def _close(self, record: QuestionRecord, note: str) -> None:
        try:
            outcome = await self._store.cancel(record.id, note)
            if outcome.changed and outcome.record is not None:
                current = outcome.record
                await self._refresh(replace(current, card_message_id=record.card_message_id))
        except Exception:
            logger.exception("could not close question %s", record.id)

    async def close_run(self, run_id: str, note: str) -> None:
        """End the open questions of a run that will not go on, their cards saying so."""
        for record in await self._store.pending_of_run(run_id):
            await self._close(record, note)

    async def _observation(self, record: QuestionRecord) -> str:
        if record.state == "answered":
            who = await self._name_of(record.answered_by or record.asker)
            return f"{who} answered: {record.answer}"
        if record.state == "expired":
            minutes = max(1, round(self._ttl / 60))
            return f"Nobody answered the question within {minutes} minutes."
        if record.state == CANCELLED:
            return f"The question was closed without an answer ({record.note or 'cancelled'})."
        return f"The question is {record.state}."

    async def on_click(self, action: CardAction) -> dict[str, Any]:
        """A click on a question card: only its asker's answer counts, once."""
        click = question_click(action)
        if click is None or not self._seal.valid(dict(click.value)):
            return toast("error", "This button is not one this bot made.")
        record = await self._store.get(click.question_id)
        if record is None:
            return toast("error", "This question is unknown.")
        # Only from the question's own card in its own chat (a value copied onto another
        # card, or a click before the card was linked, answers nothing), as for approvals.
        if (
            not record.card_message_id
            or action.open_message_id != record.card_message_id
            or action.open_chat_id != record.chat_id
        ):
            return toast("error", "This button is not on the question's card.")
        if click.option is not None:
            if click.option >= len(record.options):
                return toast("error", "That is not one of the options.")
            text = record.options[click.option]
        else:
            text = (click.text or "").strip()
        outcome = await self._store.answer(record.id, by=action.operator_open_id, text=text)
        current = outcome.record or record
        if not outcome.changed:
            message = _REFUSALS.get(outcome.refusal or "", "This question is closed.")
            kind = (
                "info"
                if outcome.refusal in ("already_answered", "expired", "cancelled")
                else "error"
            )
            return toast(kind, message, self.card(current) if kind == "info" else None)
        logger.info("question %s answered by %s", current.id, action.operator_open_id)
        self.waits.resolve(current)
        return toast("success", "Thanks: your answer was sent.", self.card(current))


_REFUSALS = {
    "not_yours": "Only the person who was asked can answer this question.",
    "already_answered": "This question was already answered.",
    "expired": "This question expired.",
    "cancelled": "This question was closed.",
    "not_an_option": "That is not one of the options.",
    "empty": "Write an answer first.",
    "too_long": "That answer is too long.",
}
