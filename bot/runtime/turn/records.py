"""What a turn records and says: its footer and error lines, the turn's context for the
engine's hooks, the finished turn as the journal writes it, and the cards of a turn that
ended without an answer. Pure functions of what the runner (``runner.py``) hands them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.agent_config import RunMode
from bot.conversations.workers import Turn
from bot.engine import AgentResult, ChatAgent, RunEvent, Usage
from bot.feishu.card_writer import ReplyOutcome
from bot.feishu.content import Attachment
from bot.feishu.events import InboundMessage
from bot.profiles import Profile
from bot.runtime import texts
from bot.runtime.turn.live import LiveAnswer
from bot.runtime.turn.parking import (
    JoinedMessage,
    TurnFacts,
    TurnParking,
)
from bot.runtime.turn.questions import Question
from bot.runtime.turn.run_events import RunPublisher
from bot.store import (
    FinishedTurn,
    HistoryEntry,
    LoadedConversation,
)
from bot.turn_context import TurnContext

logger = logging.getLogger(__name__)

CARD_END_SECONDS = 5.0  # to close the card of an interrupted turn


async def end_cards(cards: list[LiveAnswer]) -> None:
    """A turn that raised or was cancelled leaves no card stuck on "Thinking…": it says it
    was interrupted and stops streaming (bounded: shutdown must not wait on Feishu)."""
    for live in cards:
        if live.parked:  # the run's next process goes on with this card
            live.reply.leave()
            continue
        try:
            await asyncio.wait_for(live.end_unanswered(texts.INTERRUPTED_CARD), CARD_END_SECONDS)
        except Exception:
            logger.warning("ending the card of an interrupted turn failed", exc_info=True)


def fan_out(*consumers: Callable[[RunEvent], None]) -> Callable[[RunEvent], None]:
    """One ``on_event`` for the engine that hands each event to every consumer, in order."""

    def on_event(event: RunEvent) -> None:
        for consume in consumers:
            consume(event)

    return on_event


def answer_footer(result: AgentResult, elapsed: float, model: str) -> str:
    usage = result.total_usage  # every call: tool selection, the loop, synthesis
    tokens = f"{usage.prompt_tokens} prompt, {usage.completion_tokens} completion"
    parts = [
        f"{result.iterations} step{'s' if result.iterations != 1 else ''}",
        f"{usage.total_tokens} tokens ({tokens})",
        f"{elapsed:.1f} s",
    ]
    if model:
        parts.append(model)
    return " · ".join(parts)


def error_text(result: AgentResult, deadline: float | None) -> str:
    error = result.error or ""
    if "LLMDeadlineExceeded" in error:  # the turn's model deadline passed
        lead = texts.model_deadline_passed(deadline)
    elif "LLMContextOverflow" in error:  # not "unreachable": it answered, and said so
        lead = texts.MODEL_CONTEXT_FULL
    elif "LLMAuthError" in error:
        lead = texts.MODEL_REFUSED_KEY
    elif "model failed" in error:
        lead = texts.MODEL_UNAVAILABLE
    else:
        lead = texts.MODEL_FAILED
    if not result.steps:
        return lead
    found = "\n".join(f"- `{s.tool}`: {preview(s.observation)}" for s in result.steps[-5:])
    return f"{lead}\n\n{found}"


def preview(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Extras:
    """What a turn may carry beyond its message."""

    earlier: tuple[tuple[str, Attachment], ...] = ()
    scheduled_task: str = ""
    mode: RunMode | None = None  # forced by /plan; None: the configured mode


@dataclass(frozen=True, slots=True)
class Started:
    """What a run began from: its id, scope, time, conversation and model."""

    run_id: str
    key: str
    started_at: float
    loaded: LoadedConversation
    model: str
    profile: str | None = None  # the chat's agent profile (None: the default agent)


def profile_name(profile: Profile | None) -> str | None:
    return profile.name if profile is not None else None


def context_of_turn(
    message: InboundMessage,
    start: Started,
    live: LiveAnswer,
    turn: Turn,
    scheduled_task: str,
    parking: TurnParking | None,
    profile: Profile | None,
) -> TurnContext:
    earlier = parking.joined_before if parking is not None else ()
    joined: Callable[[], tuple[str, ...]] = turn.joined_senders
    if earlier:
        before = tuple(j.sender for j in earlier)

        def joined() -> tuple[str, ...]:
            return before + turn.joined_senders()

    return TurnContext(
        run_id=start.run_id,
        conversation_id=start.loaded.conversation_id,
        scope_key=start.key,
        message_id=message.message_id,
        chat_id=message.chat_id,
        chat_type=message.chat_type,
        sender_open_id=message.sender_open_id,
        thread_id=message.thread_id,
        generation=start.loaded.generation,
        live=live,
        slot=turn.slot,
        scheduled_task=scheduled_task,
        joined_senders=joined,
        parking=parking,
        profile=profile,
    )


def finished_turn(
    turn: Turn,
    message: InboundMessage,
    question: Question,
    start: Started,
    result: AgentResult,
    answer: str | None,
    outcome: ReplyOutcome | None,
    owner: str,
    *,
    joined_before: Sequence[JoinedMessage] = (),
) -> FinishedTurn:
    """The turn as the journal records it: its messages, its answer and its run.
    ``joined_before``: messages that joined a resumed run in the process that saved it."""
    entries = [HistoryEntry("user", question.remembered, message.message_id)]
    entries += [HistoryEntry("user", j.text, j.message_id) for j in joined_before]
    entries += [HistoryEntry("user", job.text, job.message_id) for job in turn.joined]
    if answer:
        entries.append(HistoryEntry("assistant", answer))
    reply_ids = outcome.message_ids if outcome else []
    usage = result.total_usage
    return FinishedTurn(
        scope_key=start.key,
        conversation_id=start.loaded.conversation_id,
        generation=start.loaded.generation,
        entries=tuple(entries),
        run_id=start.run_id,
        message_id=message.message_id,
        status=result.status,
        model=start.model,
        iterations=result.iterations,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        tool_calls=len(result.steps),
        feishu_calls=outcome.calls if outcome else 0,
        error=result.error,
        started_at=start.started_at,
        completed_message_ids=tuple(job.message_id for job in (turn.job, *turn.joined)),
        owner=owner,
        reply_message_id=reply_ids[0] if reply_ids else None,
        profile=start.profile,
    )


def facts_of(
    message: InboundMessage,
    start: Started,
    remembered: str,
    *,
    joined_before: tuple[JoinedMessage, ...] = (),
) -> TurnFacts:
    return TurnFacts(
        run_id=start.run_id,
        message_id=message.message_id,
        scope_key=start.key,
        generation=start.loaded.generation,
        conversation_id=start.loaded.conversation_id,
        chat_id=message.chat_id,
        chat_type=message.chat_type,
        sender_open_id=message.sender_open_id,
        thread_id=message.thread_id,
        remembered=remembered,
        started_at=start.started_at,
        model=start.model,
        joined_before=joined_before,
    )


@dataclass(frozen=True, slots=True)
class Ran:
    """A run that ended, and what its turn concludes it with."""

    agent: ChatAgent
    question: Question
    start: Started
    result: AgentResult
    live: LiveAnswer
    events: RunPublisher
    parking: TurnParking | None


def nothing_to_run(run_id: str, model: str) -> AgentResult:
    """The record of a turn that had nothing to ask the model (only unreadable files)."""
    return AgentResult(
        answer="",
        messages=[],
        iterations=0,
        steps=[],
        usage=Usage(),
        elapsed=0.0,
        run_id=run_id,
        model=model,
    )


def log_finished(finished: FinishedTurn, result: AgentResult) -> None:
    logger.info(
        "run %s for %s: %s, %d iterations, %d tokens, %d Feishu calls for the answer",
        finished.run_id,
        finished.message_id,
        result.status,
        result.iterations,
        finished.total_tokens,
        finished.feishu_calls,
    )
