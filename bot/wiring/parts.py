"""What the composition is made of: the overrides tests give, the services a running app holds,
and what each phase of the build hands the next."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bot.conversations import ConversationWorkers
from bot.engine import (
    LLM,
    Hook,
    Tool,
    ToolRegistry,
)
from bot.feishu.client import FeishuClient
from bot.governance.questions import Questions
from bot.governance.service import Governance
from bot.governance.user_auth.service import UserAuth
from bot.media.limits import ReaderLimits
from bot.media.reader_pool import ReaderPool
from bot.metrics import Metrics
from bot.runtime.api_budget import ApiUsage
from bot.runtime.conversation_lock import SharedConversationLock
from bot.runtime.intake.claims import EventIntake, InFlight
from bot.runtime.intake.identity import BotIdentity
from bot.runtime.schedules.scheduler import ScheduledRuns, SchedulerConfig
from bot.runtime.tasks import TaskTracker
from bot.runtime.turn.run_events import RunEventHub
from bot.store import (
    Database,
    MessageLedger,
)
from bot.store.memories import MemoryStore
from bot.store.schedules import ScheduleStore
from connectors.base import Connector
from connectors.config import ConnectorsConfig
from connectors.hub import ConnectorHub

from .memory import Memory
from .models import Models


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
    # What people asked the bot to remember (None: LARKGATE_MEMORY is off).
    memories: MemoryStore | None = None
    app: str = ""  # the [apps.NAME] these serve ("": the default app)


@dataclass(frozen=True, kw_only=True)
class Built:
    """The services, and what only shutdown needs: the connectors and the model to close."""

    services: Services  # the default app's
    hub: ConnectorHub
    models: Models
    # Each [apps.NAME]'s services and connectors (they share the database and the models).
    apps: Mapping[str, tuple[Services, ConnectorHub]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Foundation:
    """What every later phase stands on: the store, the models, an app's Feishu side."""

    database: Database
    feishu: FeishuClient
    api_usage: ApiUsage
    identity: BotIdentity
    models: Models  # shared by every app
    owner: str
    clock: Callable[[], float]
    metrics: Metrics
    # The processes that read files people send (one pool for every app).
    readers: ReaderPool
    app: str = ""  # the [apps.NAME] the Feishu side is ("": the default app)


@dataclass(frozen=True, kw_only=True)
class GovernedTools:
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
    memory: Memory | None = None  # None: LARKGATE_MEMORY is off
