"""One turn of a conversation: run the agent, reply in the chat, remember it.

The turn owns the claims of its message and of the messages that joined it while it
ran; it completes them only once the reply is out (or deliberately not sent: a
``/stop``), so a crash at any point before leaves them to be taken over.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.conversations.workers import Turn
from bot.engine import AgentResult, Message, ReActAgent
from bot.feishu.events import InboundMessage
from bot.store import ConversationStore, MessageLedger, RunStore

from . import texts
from .intake import InFlight
from .replies import ReplyFailed, ReplySender, ReplyTarget

logger = logging.getLogger(__name__)

AgentFactory = Callable[[], ReActAgent]


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Passed to every hook of the run (``call.run.deps``): who asked, where."""

    run_id: str
    conversation_id: str
    scope_key: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str
    thread_id: str


class TurnRunner:
    def __init__(
        self,
        *,
        agent_factory: AgentFactory,
        ledger: MessageLedger,
        conversations: ConversationStore,
        runs: RunStore,
        replies: ReplySender,
        in_flight: InFlight,
        owner: str,
        history_messages: int,
    ) -> None:
        self._agent_factory = agent_factory
        self._ledger = ledger
        self._conversations = conversations
        self._runs = runs
        self._replies = replies
        self._in_flight = in_flight
        self._owner = owner
        self._history_messages = history_messages

    def runner_for(self, message: InboundMessage, key: str) -> Callable[[Turn], Awaitable[None]]:
        async def run(turn: Turn) -> None:
            try:
                await self._run(turn, message, key)
            except Exception:
                logger.exception("turn for message %s failed", message.message_id)
                await self._release(turn)
                raise

        return run

    async def _run(self, turn: Turn, message: InboundMessage, key: str) -> None:
        if turn.stopped_before_start:
            await self._complete(turn)
            return
        conversation = await self._conversations.active(key)
        history = await self._conversations.history(conversation.id, limit=self._history_messages)
        # Messages that arrived while this turn waited for a slot are part of its question.
        early = turn.interrupts.drain()
        query = "\n".join([message.text, *early])
        agent = self._agent_factory()
        run_id = uuid.uuid4().hex
        await self._runs.start(
            run_id,
            conversation_id=conversation.id,
            message_id=message.message_id,
            model=getattr(agent.llm, "model", None) or "",
            owner=self._owner,
        )
        context = TurnContext(
            run_id,
            conversation.id,
            key,
            message.message_id,
            message.chat_id,
            message.chat_type,
            message.sender_open_id,
            message.thread_id,
        )
        result = await agent.run(
            query,
            history=[Message(h.role, h.content, kind="history") for h in history],  # type: ignore[arg-type]
            interrupt_queue=turn.interrupts,
            deps=context,
            run_id=run_id,
        )
        answer = await self._answer(agent, query, result)
        reply_ids: list[str] = []
        if answer is not None:
            target = ReplyTarget(message.message_id, in_thread=bool(message.thread_id))
            try:
                footer = _footer(result) if result.status != "error" else None
                sent = await self._replies.answer(target, answer, footer=footer)
                reply_ids = [s.message_id for s in sent]
                await self._ledger.mark_replied(
                    message.message_id, owner=self._owner, reply_message_id=reply_ids[0]
                )
            except ReplyFailed:
                pass  # logged with its reason by the sender
        await self._remember(conversation.id, turn, message, answer)
        await self._runs.finish(
            run_id,
            status=result.status,
            iterations=result.iterations,
            prompt_tokens=result.total_usage.prompt_tokens,
            completion_tokens=result.total_usage.completion_tokens,
            total_tokens=result.total_usage.total_tokens,
            tool_calls=len(result.steps),
            feishu_calls=len(reply_ids),
            error=result.error,
        )
        await self._complete(turn)

    async def _answer(self, agent: ReActAgent, query: str, result: AgentResult) -> str | None:
        if result.status == "cancelled":
            return None  # the /stop reply already says so
        if result.status == "error":
            logger.error("run %s ended with an error: %s", result.run_id, result.error)
            lead = (
                texts.MODEL_UNAVAILABLE
                if "model failed" in (result.error or "")
                else texts.MODEL_FAILED
            )
            if not result.steps:
                return lead
            found = "\n".join(f"- `{s.tool}`: {_preview(s.observation)}" for s in result.steps[-5:])
            return f"{lead}\n\n{found}"
        parts = [delta async for delta in agent.stream_answer(query, result)]
        return "".join(parts).strip() or result.answer

    async def _remember(
        self, conversation_id: str, turn: Turn, message: InboundMessage, answer: str | None
    ) -> None:
        await self._conversations.append(
            conversation_id, "user", message.text, message_id=message.message_id
        )
        for job in turn.joined:
            await self._conversations.append(
                conversation_id, "user", job.text, message_id=job.message_id
            )
        if answer:
            await self._conversations.append(conversation_id, "assistant", answer)

    async def _complete(self, turn: Turn) -> None:
        for job in (turn.job, *turn.joined):
            await self._ledger.complete(job.message_id, owner=self._owner)
            self._in_flight.done(job.message_id)

    async def _release(self, turn: Turn) -> None:
        for job in (turn.job, *turn.joined):
            try:
                await self._ledger.release(job.message_id, owner=self._owner)
            except Exception:
                logger.exception("releasing %s failed", job.message_id)
            self._in_flight.done(job.message_id)


def _footer(result: AgentResult) -> str:
    usage = result.total_usage
    return (
        f"{result.iterations} step{'s' if result.iterations != 1 else ''} · "
        f"{usage.total_tokens} tokens · {result.elapsed:.1f} s"
    )


def _preview(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
