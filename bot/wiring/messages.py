"""From a verified event to an answer: the ledger, the conversation workers and lock, the
message handler and the intake."""

from __future__ import annotations

from bot.config import RuntimeConfig, Settings
from bot.conversations import ConversationWorkers
from bot.runtime import texts
from bot.runtime.conversation_lock import SharedConversationLock
from bot.runtime.intake.bot_peers import BotPeers
from bot.runtime.intake.claims import EventIntake, InFlight
from bot.runtime.intake.logins import Logins
from bot.runtime.intake.routing import MessageHandler
from bot.runtime.replies import ReplySender
from bot.runtime.schedules.cards import ScheduleCards
from bot.runtime.tasks import TaskTracker
from bot.runtime.turn import TurnRunner
from bot.runtime.turn.run_events import RunEventHub
from bot.store import (
    ConversationStore,
    MessageLedger,
)
from bot.store.bot_hops import BotHopsStore
from bot.store.conversation_locks import ConversationLocks
from bot.store.conversations import ConversationPrefetch

from .parts import Foundation, GovernedTools, Services
from .schedules import admission, scheduling
from .turns import interrupt_limits_of, turn_runner


def message_path(
    settings: Settings, base: Foundation, tools: GovernedTools, tasks: TaskTracker
) -> Services:
    """From a verified event to an answer: intake, the handler, workers and turns."""
    runtime, clock = settings.runtime(), base.clock
    ledger = MessageLedger(base.database, clock=clock, app=base.app)
    # A turn's first read (its conversation) rides in the transaction that takes the
    # conversation's lock: one round trip fewer per message.
    prefetch = ConversationPrefetch(runtime.history_messages)
    conversations = ConversationStore(base.database, clock=clock, prefetch=prefetch)
    # One rule for what may join a run and what the run reads (DESIGN §3, interrupts).
    interrupt_limits = interrupt_limits_of(runtime)
    conversation_lock = _conversation_lock(runtime, base, prefetch)
    workers = ConversationWorkers(
        runtime.max_concurrent_runs,
        lock=conversation_lock,
        join_limits=interrupt_limits,
        max_waiting=runtime.queued_messages_per_conversation or None,
    )
    in_flight = InFlight()
    base.metrics.track_in_flight(in_flight.__len__)
    run_events = RunEventHub(clock=clock)
    turns = turn_runner(
        settings, base, tools, interrupt_limits, ledger, conversations, in_flight, run_events
    )
    scheduled_runs, schedule_cards = scheduling(settings, base, tools, workers, turns)
    handler = _message_handler(
        settings, base, tools, ledger, workers, conversations, turns, in_flight, schedule_cards,
    )  # fmt: skip
    intake = EventIntake(
        ledger,
        handler,
        tasks,
        in_flight,
        owner=base.owner,
        lease_seconds=runtime.claim_lease_seconds,
        max_age_seconds=runtime.max_event_age_seconds,
        clock=clock,
        on_duplicate=base.metrics.duplicate_event,
    )
    return Services(
        database=base.database,
        feishu=base.feishu,
        identity=base.identity,
        ledger=ledger,
        intake=intake,
        workers=workers,
        tasks=tasks,
        in_flight=in_flight,
        owner=base.owner,
        tools=tools.registry,
        governance=tools.governance,
        metrics=base.metrics,
        run_events=run_events,
        conversation_lock=conversation_lock,
        api_usage=base.api_usage,
        schedules=tools.schedules,
        scheduled_runs=scheduled_runs,
        readers=base.readers,
        questions=tools.questions,
        user_auth=tools.user_auth,
        memories=tools.memory.store if tools.memory is not None else None,
        app=base.app,
    )


def _conversation_lock(
    runtime: RuntimeConfig, base: Foundation, prefetch: ConversationPrefetch
) -> SharedConversationLock:
    """One run per conversation across processes, leased in the database."""
    locks = ConversationLocks(
        base.database, owner=base.owner, lease_seconds=runtime.claim_lease_seconds, clock=base.clock
    )
    return SharedConversationLock(
        locks, renew_every=runtime.claim_lease_seconds / 3, prefetch=prefetch
    )


def _message_handler(
    settings: Settings,
    base: Foundation,
    tools: GovernedTools,
    ledger: MessageLedger,
    workers: ConversationWorkers,
    conversations: ConversationStore,
    turns: TurnRunner,
    in_flight: InFlight,
    schedules: ScheduleCards,
) -> MessageHandler:
    governance = tools.governance
    governance_config = settings.governance()

    def admin_help(sender: str) -> str | None:
        if not governance_config.is_admin(sender):
            return None
        return texts.api_usage_for_admins(base.api_usage.summary())

    return MessageHandler(
        ledger=ledger,
        identity=base.identity,
        policy=settings.policy(),
        workers=workers,
        conversations=conversations,
        replies=ReplySender(base.feishu),
        turns=turns,
        in_flight=in_flight,
        owner=base.owner,
        admin=governance.admin,
        admission=admission(settings, base, tools),
        admin_help=admin_help,
        schedules=schedules,
        logins=Logins(tools.user_auth, tools.login_scopes) if tools.user_auth else None,
        memories=tools.memory.cards if tools.memory is not None else None,
        peers=BotPeers(
            frozenset(settings.larkgate_accept_bots),
            BotHopsStore(base.database, clock=base.clock),
            max_hops=settings.larkgate_bot_hops,
            app=base.app,
        ),
        checkpoints=turns.checkpoints.store if turns.checkpoints is not None else None,
    )
