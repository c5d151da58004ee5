"""A turn: the agent builder every run uses (its model, tools, hooks and mode), the turn runner
that records and resumes runs, and the live card an answer streams into."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.askers import Askers
from bot.config import RuntimeConfig, Settings
from bot.engine.interrupts import InterruptLimits
from bot.feishu.card_writer import LiveReply
from bot.feishu.client import FeishuClient
from bot.feishu.events import InboundMessage
from bot.runtime.api_budget import Delivery
from bot.runtime.intake.claims import InFlight
from bot.runtime.turn import TurnRunner
from bot.runtime.turn.agents import AgentBuilder
from bot.runtime.turn.media import MediaReader
from bot.runtime.turn.parking import Checkpoints, CheckpointSeal, checkpoint_key
from bot.runtime.turn.run_events import RunEventHub
from bot.store import (
    CheckpointStore,
    ConversationStore,
    MessageLedger,
    TurnJournal,
)

from .parts import Foundation, GovernedTools


def interrupt_limits_of(runtime: RuntimeConfig) -> InterruptLimits:
    return InterruptLimits(
        max_messages=runtime.interrupts_per_run,
        max_chars=runtime.interrupt_chars_per_run,
        max_message_chars=runtime.pinned_message_chars,
    )


def turn_runner(
    settings: Settings,
    base: Foundation,
    tools: GovernedTools,
    interrupt_limits: InterruptLimits,
    ledger: MessageLedger,
    conversations: ConversationStore,
    in_flight: InFlight,
    run_events: RunEventHub,
) -> TurnRunner:
    governance = tools.governance
    agent = settings.agent()
    budget = settings.llm().context_budget
    probed = base.models.probed
    # Every agent of every mode (and each step of a plan) gets the same tools and hooks.
    agent_factory = AgentBuilder(
        models=base.models.registry,
        profile_models=base.models.profile_models,
        tools_for_run=governance.tools_for_run,
        hooks=tools.hooks,
        mode=agent.mode,
        plan=agent.plan,
        options={
            "context_budget": budget,
            "interrupt_limits": interrupt_limits,
            "cycle_threshold": settings.react_cycle_detection_threshold,
            "completion_check_min_tools": settings.react_completion_check_min_tools,
            "synthesis": settings.larkgate_synthesis,
            # Many tools: the first call offers the menu (one call for a plain question).
            "tool_menu": True,
        },
        # Lowered to what the model's server says it holds, once its probe has said so.
        context_budget=None if probed is None else lambda: probed.context_budget(budget),
    )
    budgets = governance.budgets

    async def record_usage(message: InboundMessage, askers: Askers, tokens: int) -> str:
        return await budgets.record(
            askers=askers,
            chat_id=message.chat_id,
            chat_type=message.chat_type,
            tokens=tokens,
        )

    return TurnRunner(
        agent_factory=agent_factory,
        ledger=ledger,
        conversations=conversations,
        journal=TurnJournal(base.database, clock=base.clock, app=base.app),
        live_reply=lambda message: live_reply(
            base.feishu, message, base.api_usage.delivery(), settings
        ),
        in_flight=in_flight,
        owner=base.owner,
        history_messages=settings.runtime().history_messages,
        record_usage=record_usage if budgets.counts_tokens else None,
        clock=base.clock,
        on_run=base.metrics.run_finished,
        events=run_events,
        media=MediaReader(
            base.feishu,
            settings.media(),
            base.models.image_text,
            base.readers,  # files are parsed in these processes, never in this one
            transcribe=base.models.transcribe,
        ),
        model_deadline_seconds=settings.larkgate_turn_deadline_seconds,
        profiles=settings.profiles(),
        recall=tools.memory.recall if tools.memory is not None else None,
        checkpoints=Checkpoints(
            store=CheckpointStore(base.database, clock=base.clock),
            seal=CheckpointSeal(checkpoint_key(settings.governance().button_key)),
            close_waits=_closer(governance.sweeper.close_run, tools.questions.close_run),
        ),
    )


def _closer(
    close_approvals: Callable[[str, str], Awaitable[None]],
    close_questions: Callable[[str, str], Awaitable[None]],
) -> Callable[[str, str], Awaitable[None]]:
    """What a saved run that will not go on waited for, closed: approvals and questions."""

    async def close(run_id: str, note: str) -> None:
        await close_approvals(run_id, note)
        await close_questions(run_id, note)

    return close


def live_reply(
    feishu: FeishuClient, message: InboundMessage, delivery: Delivery, settings: Settings
) -> LiveReply:
    """The answer's card, as the month's Feishu API budget allows (``Delivery``). Another
    bot that asked gets a text that mentions it: a card's mention notifies nobody."""
    peer = message.sender_type != "user"
    return LiveReply(
        feishu,
        message_id=message.message_id,
        in_thread=bool(message.thread_id),
        uuid_seed=message.message_id,
        cadence=delivery.cadence or 1 / settings.larkgate_card_updates_per_second,
        streaming=delivery.streaming and not peer,
        text_only=delivery.text_only or peer,
        note=delivery.note,
        mention=message.sender_open_id if peer else "",
    )
