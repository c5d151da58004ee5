"""Building the running bot from its settings, in the order things depend on each other.

``bot.app`` runs :func:`build_services` in the application's lifecycle; each phase below
takes what the earlier ones built, so a new service goes where its inputs exist.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from bot.agent_config import MODEL_HINTS
from bot.askers import Askers
from bot.config import LLMConfig, RuntimeConfig, Settings
from bot.conversations import ConversationWorkers
from bot.engine import (
    LLM,
    Hook,
    ModelRegistry,
    OpenAICompatibleLLM,
    Tool,
    ToolRegistry,
    ToolUse,
)
from bot.engine.interrupts import InterruptLimits
from bot.engine.probe import PROBE_TIMEOUT, EndpointReport, probe_endpoint
from bot.engine.probed_llm import STARTUP_WAIT, ProbedLLM
from bot.feishu.card_writer import LiveReply
from bot.feishu.client import FeishuClient
from bot.feishu.events import InboundMessage
from bot.feishu.question_card import QUESTION_ACTION
from bot.feishu.schedules_card import SCHEDULE_ACTION
from bot.governance.names import UserNames
from bot.governance.person_wait import PersonWaits
from bot.governance.questions import Questions
from bot.governance.seal import ButtonSeal
from bot.governance.service import Governance, build_governance
from bot.governance.user_auth.service import UserAuth, build_user_auth
from bot.media.limits import ReaderLimits
from bot.media.reader_pool import ReaderPool
from bot.metrics import MeteredLLM, Metrics
from bot.network import Network, model_http_client
from bot.runtime import texts
from bot.runtime.admission import Admission
from bot.runtime.agents import AgentBuilder
from bot.runtime.api_budget import ApiUsage, Delivery
from bot.runtime.bot_peers import BotPeers
from bot.runtime.conversation_lock import SharedConversationLock
from bot.runtime.identity import BotIdentity
from bot.runtime.intake import EventIntake, InFlight
from bot.runtime.logins import Logins
from bot.runtime.media import MediaReader, Transcribe
from bot.runtime.messages import MessageHandler
from bot.runtime.parking import Checkpoints, CheckpointSeal, checkpoint_key
from bot.runtime.replies import ReplySender
from bot.runtime.run_events import RunEventHub
from bot.runtime.schedule_cards import ScheduleCards
from bot.runtime.schedule_tools import ScheduleTools
from bot.runtime.scheduler import ScheduledRuns, SchedulerConfig
from bot.runtime.tasks import TaskTracker
from bot.runtime.turn import TurnRunner
from bot.runtime.vision import ImageDescriber, ImageFallbackLLM, ImageText
from bot.store import (
    CallLogStore,
    CheckpointStore,
    ConversationStore,
    Database,
    MessageLedger,
    RunStore,
    TurnJournal,
)
from bot.store.api_calls import ApiCallLedger
from bot.store.bot_hops import BotHopsStore
from bot.store.conversation_locks import ConversationLocks
from bot.store.conversations import ConversationPrefetch
from bot.store.migrate import upgrade
from bot.store.questions import QuestionStore
from bot.store.replays import ReplayGuard
from bot.store.schedules import ScheduleStore
from bot.timezones import time_zone
from bot.turn_context import turn_of
from connectors.base import Connector, ConnectorContext, UserTokenSource
from connectors.call_log import CallLogHook
from connectors.config import ConnectorsConfig
from connectors.hub import ConnectorHub, load_connector_class

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overrides:
    """What tests (and embedders) may supply instead of what the settings describe."""

    llm: LLM | None = None
    tools: Sequence[Tool] = ()  # added to the connectors' tools
    hooks: Sequence[Hook] = ()
    connectors: ConnectorsConfig | None = None  # None: from the settings
    owner: str | None = None
    clock: Callable[[], float] = time.time
    # Connector classes by name, instead of the built-in and installed ones (tests, embedders).
    connector_classes: Mapping[str, type[Connector]] = field(default_factory=dict)
    # What one file may cost to read (memory, seconds) and how many are read at once.
    reader_limits: ReaderLimits = field(default_factory=ReaderLimits)
    # Opens the app's database from DATABASE_URL (``Database.connect``): the seam where a
    # benchmark or a test gives it other options or counts its transactions.
    open_database: Callable[[str], Awaitable[Database]] | None = None


@dataclass(kw_only=True)
class Services:
    """What the running app holds; available to tests as ``app[SERVICES]``."""

    database: Database
    feishu: FeishuClient
    identity: BotIdentity
    ledger: MessageLedger
    intake: EventIntake
    workers: ConversationWorkers
    tasks: TaskTracker
    in_flight: InFlight
    owner: str
    tools: ToolRegistry
    governance: Governance
    metrics: Metrics
    run_events: RunEventHub  # every run's events (the web console reads them)
    conversation_lock: SharedConversationLock
    api_usage: ApiUsage
    schedules: ScheduleStore
    scheduled_runs: ScheduledRuns
    readers: ReaderPool  # the processes that read files people send
    questions: Questions  # ask_user's questions and the calls waiting for their answers
    # Per-user authorisation (None: LARKGATE_TOKEN_KEY is not set).
    user_auth: UserAuth | None = None
    app: str = ""  # the [apps.NAME] these serve ("": the default app)


@dataclass(frozen=True, kw_only=True)
class Built:
    """The services, and what only shutdown needs: the connectors and the model to close."""

    services: Services  # the default app's
    hub: ConnectorHub
    model: LLM
    owns_model: bool
    extra_models: tuple[OpenAICompatibleLLM | ProbedLLM, ...] = ()
    # Each [apps.NAME]'s services and connectors (they share the database and the models).
    apps: Mapping[str, tuple[Services, ConnectorHub]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Foundation:
    """What every later phase stands on: the store, Feishu and its budget, the model."""

    database: Database
    feishu: FeishuClient
    api_usage: ApiUsage
    identity: BotIdentity
    model: LLM
    metered: MeteredLLM
    # The main model (metered) and those configured for hints ("fast", "reasoning").
    models: ModelRegistry
    # The models profiles name that are no hint, by name (metered; on the main endpoint).
    profile_models: Mapping[str, LLM]
    # Images as text, for a main model without vision (or that refuses images).
    image_text: ImageText
    # Clients of our own beside the main model (the vision and transcription models), and
    # the probed models' probes (closed first).
    extra_models: tuple[OpenAICompatibleLLM | ProbedLLM, ...]
    # The main model as its endpoint's probe found it (None: a model given by a test).
    probed: ProbedLLM | None
    transcribe: Transcribe | None
    owner: str
    clock: Callable[[], float]
    metrics: Metrics
    # The processes that read files people send (one pool for every app).
    readers: ReaderPool
    app: str = ""  # the [apps.NAME] the Feishu side is ("": the default app)


@dataclass(frozen=True, kw_only=True)
class _Tools:
    hub: ConnectorHub
    registry: ToolRegistry
    governance: Governance
    hooks: list[Hook]
    schedules: ScheduleStore
    schedule_config: SchedulerConfig
    # Set when a task is created, so the scheduler looks again at once.
    schedule_wake: asyncio.Event
    questions: Questions
    # Per-user authorisation (None: off), and what /login asks for (every user tool's scopes).
    user_auth: UserAuth | None = None
    login_scopes: tuple[str, ...] = ()


async def build_services(settings: Settings, overrides: Overrides, metrics: Metrics) -> Built:
    base = await _foundation(settings, overrides, metrics)
    services, hub = await _app_services(settings, overrides, base)
    apps: dict[str, tuple[Services, ConnectorHub]] = {}
    for spec in settings.apps():
        # Another bot identity: its own Feishu client, budget and stacks from intake to
        # governance, as if a replica of its own (its owner id says which app it is).
        app_settings = settings.for_app(spec)
        app_base = await _feishu_side(app_settings, base, app=spec.name)
        apps[spec.name] = await _app_services(app_settings, overrides, app_base)
    return Built(
        services=services,
        hub=hub,
        model=base.model,
        owns_model=overrides.llm is None and isinstance(base.model, OpenAICompatibleLLM),
        extra_models=base.extra_models,
        apps=apps,
    )


async def _app_services(
    settings: Settings, overrides: Overrides, base: _Foundation
) -> tuple[Services, ConnectorHub]:
    tasks = TaskTracker()
    tools = await _governed_tools(settings, overrides, base, tasks)
    return _message_path(settings, base, tools, tasks), tools.hub


async def build_connectors(
    settings: Settings,
    overrides: Overrides,
    feishu: FeishuClient,
    user_tokens: UserTokenSource | None = None,
) -> ConnectorHub:
    config = overrides.connectors or settings.connectors()
    return await ConnectorHub.build(
        config,
        ConnectorContext(feishu=feishu, user_tokens=user_tokens, network=settings.network()),
        feishu_credentials=bool(settings.feishu_app_id and settings.feishu_app_secret),
        classes=_Classes(overrides.connector_classes) if overrides.connector_classes else None,
    )


class _Classes(dict[str, type[Connector]]):
    """Connector classes given by name; any other name is loaded as usual."""

    def __missing__(self, name: str) -> type[Connector]:
        return load_connector_class(name)


async def _feishu_parts(
    settings: Settings, database: Database, clock: Callable[[], float], metrics: Metrics
) -> tuple[FeishuClient, ApiUsage, BotIdentity]:
    """One app's Feishu side: its client (its own token manager), its API budget and the
    bot identity it learns at start."""
    admins = sorted(settings.governance().admins)

    async def tell_admins(delivery: Delivery, used: int, budget: int) -> None:
        content = json.dumps(
            {"text": texts.api_budget_notice(delivery.name, used, budget)}, ensure_ascii=False
        )
        for admin in admins:
            await feishu.send_message("open_id", admin, msg_type="text", content=content)

    api_usage = ApiUsage(
        ApiCallLedger(database, clock=clock),
        app_id=settings.feishu_app_id,
        budget=settings.feishu_monthly_api_budget,
        zone=time_zone(settings.larkgate_timezone),
        clock=clock,
        notify=tell_admins,
    )
    if not settings.app_name:  # the gauges are the default app's
        metrics.track_api_usage(lambda: api_usage.total, lambda: api_usage.delivery().level)

    def on_call(endpoint: str, code: str) -> None:
        metrics.feishu_call(endpoint, code)
        api_usage.record(endpoint, code)

    feishu = FeishuClient(settings.feishu(), on_call=on_call, network=settings.network())
    await api_usage.refresh()  # the month's total so far, before the first answer
    identity = BotIdentity(feishu)
    identity.start()
    return feishu, api_usage, identity


async def _feishu_side(settings: Settings, base: _Foundation, *, app: str) -> _Foundation:
    """``base`` as the [apps.NAME] ``app`` stands on it: its own Feishu side, the rest
    shared."""
    feishu, api_usage, identity = await _feishu_parts(
        settings, base.database, base.clock, base.metrics
    )
    return replace(
        base,
        feishu=feishu,
        api_usage=api_usage,
        identity=identity,
        owner=f"{base.owner}/{app}",
        app=app,
    )


async def _foundation(settings: Settings, overrides: Overrides, metrics: Metrics) -> _Foundation:
    clock = overrides.clock
    await asyncio.to_thread(upgrade, settings.database_url)
    database = await (overrides.open_database or Database.connect)(settings.database_url)
    feishu, api_usage, identity = await _feishu_parts(settings, database, clock, metrics)
    network = settings.network()
    # The endpoint's abilities come from a probe (a model given by a test is taken as is).
    model: LLM
    if overrides.llm is None:
        model = client = _client(settings.llm(), network)
        probed: ProbedLLM | None = _probed(client, settings.llm(), network)
    else:
        model, probed = overrides.llm, None
    vision_config = settings.vision_llm()
    vision_model = None if vision_config is None else _client(vision_config, network)
    image_text = ImageText(None if vision_model is None else ImageDescriber(vision_model))
    metered = MeteredLLM(ImageFallbackLLM(probed or model, image_text), metrics)
    hint_configs = settings.hint_models()
    hinted = {hint: _client(config, network) for hint, config in hint_configs.items()}
    hinted_probed = {h: _probed(m, hint_configs[h], network) for h, m in hinted.items()}
    models = ModelRegistry(
        metered,
        **{
            h: MeteredLLM(ImageFallbackLLM(m, image_text), metrics)
            for h, m in hinted_probed.items()
        },
    )
    # A profile's model that is no hint: a client of its own on the main endpoint.
    named = {p.model for p in settings.profiles().profiles.values()} - {"", *MODEL_HINTS}
    profile_probed: dict[str, ProbedLLM] = {}
    for name in sorted(named) if overrides.llm is None else ():
        config = replace(settings.llm(), model=name)
        profile_probed[name] = _probed(_client(config, network), config, network)
    profile_models: dict[str, LLM] = {
        name: MeteredLLM(ImageFallbackLLM(m, image_text), metrics)
        for name, m in profile_probed.items()
    }
    probes = [
        p for p in (probed, *hinted_probed.values(), *profile_probed.values()) if p is not None
    ]
    listener, transcribe = _transcriber(settings, network)
    interrupted = await RunStore(database, clock=clock).mark_interrupted_running()
    if interrupted:
        logger.info("%d runs left by a stopped process are marked interrupted", interrupted)
    # Each waits a few seconds at most; a probe still running applies when it ends.
    await asyncio.gather(*(p.start(wait=STARTUP_WAIT) for p in probes))
    return _Foundation(
        database=database,
        feishu=feishu,
        api_usage=api_usage,
        identity=identity,
        model=model,
        metered=metered,
        models=models,
        profile_models=profile_models,
        image_text=image_text,
        extra_models=(
            *probes,
            *(m for m in (vision_model, listener) if m is not None),
            *hinted.values(),
        ),
        probed=probed,
        transcribe=transcribe,
        owner=overrides.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
        clock=clock,
        metrics=metrics,
        readers=ReaderPool(overrides.reader_limits),
    )


async def _governed_tools(
    settings: Settings,
    overrides: Overrides,
    base: _Foundation,
    tasks: TaskTracker,
) -> _Tools:
    runtime = settings.runtime()
    # One people directory: approval cards name people, schedules default to their zone.
    names = UserNames(base.feishu)
    user_auth = _user_auth(settings, base, names)
    hub = await build_connectors(
        settings, overrides, base.feishu, user_auth.source if user_auth else None
    )
    user_scopes = _user_scopes(hub)
    schedules = ScheduleStore(base.database, clock=base.clock, app=base.app)
    schedule_config = _schedule_config(settings, base.owner)
    wake = asyncio.Event()
    schedule_tools = ScheduleTools(
        schedules,
        schedule_config,
        default_timezone=settings.larkgate_timezone,
        is_admin=settings.governance().is_admin,
        wake=wake.set,
        time_zone_of=names.time_zone,
        clock=base.clock,
    )
    # The tools that act as the asker stay offered without per-user authorisation: each
    # then says what an admin must set, where otherwise the model would answer "my
    # calendar" from the bot's own calendar as if it were the asker's.
    question_store = QuestionStore(base.database, clock=base.clock, app=base.app)
    questions = Questions(
        store=question_store,
        waits=PersonWaits(question_store, kind="question"),
        feishu=base.feishu,
        seal=ButtonSeal(settings.governance().button_key),
        owner=base.owner,
        ttl_seconds=float(settings.larkgate_question_ttl_seconds),
        name_of=names.name,
        timezone=settings.larkgate_timezone,
        clock=base.clock,
    )
    registry = ToolRegistry(
        [*hub.registry, *schedule_tools.tools(), questions.tool(), *overrides.tools]
    )
    governance = build_governance(
        settings.governance(),
        database=base.database,
        feishu=base.feishu,
        tools=registry,
        connector_of=hub.connector_of,
        owner=base.owner,
        spawn=tasks.spawn,
        sweep_interval=max(1.0, runtime.claim_lease_seconds / 2),
        # A signed request is accepted up to max_event_age either side of its timestamp.
        replay_window_seconds=2 * runtime.max_event_age_seconds + 60,
        clock=base.clock,
        on_approval_outcome=base.metrics.approval_outcome,
        names=names,
        acts_as_user=hub.acts_as_user,
        user_auth_gate=user_auth.gate(user_scopes.get) if user_auth else None,
        app=base.app,
    )
    # Governance's hooks come last among those that may rewrite or hold a call: the
    # approver sees the arguments that will run, and read-only mode is checked again
    # right before the call runs (the call log only observes afterwards).
    call_log = CallLogStore(base.database)
    hooks: list[Hook] = [
        *overrides.hooks,
        schedule_tools.guard(),
        *governance.hooks,
        CallLogHook(call_log.record, hub.connector_of, clock=base.clock, run_of=turn_run_id),
    ]
    return _Tools(
        hub=hub,
        registry=registry,
        governance=governance,
        hooks=hooks,
        schedules=schedules,
        schedule_config=schedule_config,
        schedule_wake=wake,
        questions=questions,
        user_auth=user_auth,
        login_scopes=tuple(sorted({s for scopes in user_scopes.values() for s in scopes})),
    )


def _user_auth(settings: Settings, base: _Foundation, names: UserNames) -> UserAuth | None:
    """Per-user authorisation, when LARKGATE_TOKEN_KEY turns it on."""
    config = settings.user_auth()
    if config is None:
        return None
    return build_user_auth(
        config,
        database=base.database,
        feishu=base.feishu,
        feishu_config=settings.feishu(),
        replays=ReplayGuard(base.database, clock=base.clock),
        timezone=settings.larkgate_timezone,
        owner=base.owner,
        name_of=names.name,
        clock=base.clock,
    )


def _user_scopes(hub: ConnectorHub) -> dict[str, tuple[str, ...]]:
    """The user-token scopes of every tool that acts as the asker, by tool name."""
    scopes: dict[str, tuple[str, ...]] = {}
    for connector in hub.connectors:
        for name, spec in connector.actions().items():
            if spec.acts_as == "user" and hub.connector_of(name) == connector.name:
                scopes[name] = spec.scopes
    return scopes


def _message_path(
    settings: Settings, base: _Foundation, tools: _Tools, tasks: TaskTracker
) -> Services:
    """From a verified event to an answer: intake, the handler, workers and turns."""
    runtime, clock = settings.runtime(), base.clock
    ledger = MessageLedger(base.database, clock=clock, app=base.app)
    # A turn's first read (its conversation) rides in the transaction that takes the
    # conversation's lock: one round trip fewer per message.
    prefetch = ConversationPrefetch(runtime.history_messages)
    conversations = ConversationStore(base.database, clock=clock, prefetch=prefetch)
    # One rule for what may join a run and what the run reads (DESIGN §3, interrupts).
    interrupt_limits = _interrupt_limits(runtime)
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
    turns = _turn_runner(
        settings, base, tools, interrupt_limits, ledger, conversations, in_flight, run_events
    )
    scheduled_runs, schedule_cards = _schedules(settings, base, tools, workers, turns)
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
        app=base.app,
    )


def _schedule_config(settings: Settings, owner: str) -> SchedulerConfig:
    return SchedulerConfig(
        owner=owner,
        lease_seconds=settings.runtime().claim_lease_seconds,
        grace_seconds=settings.larkgate_schedule_misfire_grace_seconds,
        max_per_creator=settings.larkgate_schedule_max_per_user,
        min_interval_seconds=settings.larkgate_schedule_min_interval_seconds,
    )


def _schedules(
    settings: Settings,
    base: _Foundation,
    tools: _Tools,
    workers: ConversationWorkers,
    turns: TurnRunner,
) -> tuple[ScheduledRuns, ScheduleCards]:
    """The scheduler that fires tasks as turns, and the /schedules card with its buttons."""
    runs = ScheduledRuns(
        tools.schedules,
        tools.schedule_config,
        feishu=base.feishu,
        workers=workers,
        turns=turns,
        admission=_admission(settings, base, tools),
        wake=tools.schedule_wake,
        clock=base.clock,
    )
    cards = ScheduleCards(
        tools.schedules,
        is_admin=settings.governance().is_admin,
        timezone=settings.larkgate_timezone,
        seal=ButtonSeal(settings.governance().button_key),
    )
    tools.governance.card_actions.register(SCHEDULE_ACTION, cards.click)
    tools.governance.card_actions.register(QUESTION_ACTION, tools.questions.on_click)
    return runs, cards


def _admission(settings: Settings, base: _Foundation, tools: _Tools) -> Admission:
    """What a message and a scheduled task's firing both pass to start a run."""
    return Admission(settings.policy(), tools.governance.budgets, base.feishu)


def _interrupt_limits(runtime: RuntimeConfig) -> InterruptLimits:
    return InterruptLimits(
        max_messages=runtime.interrupts_per_run,
        max_chars=runtime.interrupt_chars_per_run,
        max_message_chars=runtime.pinned_message_chars,
    )


def _conversation_lock(
    runtime: RuntimeConfig, base: _Foundation, prefetch: ConversationPrefetch
) -> SharedConversationLock:
    """One run per conversation across processes, leased in the database."""
    locks = ConversationLocks(
        base.database, owner=base.owner, lease_seconds=runtime.claim_lease_seconds, clock=base.clock
    )
    return SharedConversationLock(
        locks, renew_every=runtime.claim_lease_seconds / 3, prefetch=prefetch
    )


def _turn_runner(
    settings: Settings,
    base: _Foundation,
    tools: _Tools,
    interrupt_limits: InterruptLimits,
    ledger: MessageLedger,
    conversations: ConversationStore,
    in_flight: InFlight,
    run_events: RunEventHub,
) -> TurnRunner:
    governance = tools.governance
    agent = settings.agent()
    budget = settings.llm().context_budget
    probed = base.probed
    # Every agent of every mode (and each step of a plan) gets the same tools and hooks.
    agent_factory = AgentBuilder(
        models=base.models,
        profile_models=base.profile_models,
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
            base.image_text,
            base.readers,  # files are parsed in these processes, never in this one
            transcribe=base.transcribe,
        ),
        model_deadline_seconds=settings.larkgate_turn_deadline_seconds,
        profiles=settings.profiles(),
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


def _message_handler(
    settings: Settings,
    base: _Foundation,
    tools: _Tools,
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
        admission=_admission(settings, base, tools),
        admin_help=admin_help,
        schedules=schedules,
        logins=Logins(tools.user_auth, tools.login_scopes) if tools.user_auth else None,
        peers=BotPeers(
            frozenset(settings.larkgate_accept_bots),
            BotHopsStore(base.database, clock=base.clock),
            max_hops=settings.larkgate_bot_hops,
            app=base.app,
        ),
        checkpoints=turns.checkpoints.store if turns.checkpoints is not None else None,
    )


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


def _client(config: LLMConfig, network: Network) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        base_url=config.base_url,
        api_key=config.api_key,
        model=config.model,
        timeout=config.timeout,
        http_client=model_http_client(network),
    )


def _probed(client: OpenAICompatibleLLM, config: LLMConfig, network: Network) -> ProbedLLM:
    """``client`` with the abilities its endpoint shows (``bot.engine.probe``), or as
    ``LLM_TOOL_CALLS`` sets them."""

    async def probe() -> EndpointReport:
        return await probe_endpoint(
            config.base_url,
            config.api_key,
            config.model,
            request_timeout=min(config.timeout, PROBE_TIMEOUT),
            http_client=model_http_client(network),
        )

    return ProbedLLM(client, probe, tool_calls=config.tool_calls)


def _transcriber(
    settings: Settings, network: Network
) -> tuple[OpenAICompatibleLLM | None, Transcribe | None]:
    """A client for ``/audio/transcriptions`` on the main endpoint, if a model is set."""
    model = settings.media().transcription_model
    if not model:
        return None, None
    client = _client(settings.llm(), network)

    async def transcribe(audio: bytes, file_name: str) -> str:
        return await client.transcribe(audio, file_name=file_name, model=model)

    return client, transcribe


def turn_run_id(call: ToolUse) -> str:
    """The run a tool call belongs to, as the bot records runs: the turn's (each step of a
    plan runs under an engine run id of its own)."""
    turn = turn_of(call.run)
    return turn.run_id if turn is not None else call.run.run_id


def default_llm(settings: Settings) -> LLM:
    return _client(settings.llm(), settings.network())
