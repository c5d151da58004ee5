"""The composition root: settings in, a running aiohttp application out.

Everything is built here and injected; nothing below reads the environment. Tests
pass their own LLM, tools, hooks or database through ``create_app``'s keywords.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.config import Settings
from bot.console import CONSOLE, Console, add_console
from bot.conversations import ConversationWorkers
from bot.engine import LLM, Hook, OpenAICompatibleLLM, ReActAgent, Tool, ToolRegistry
from bot.engine.interrupts import InterruptLimits
from bot.feishu.card_writer import LiveReply
from bot.feishu.client import FeishuClient
from bot.feishu.config import FeishuConfig
from bot.feishu.events import InboundMessage, Rejected, parse_card_action
from bot.feishu.long_connection import LongConnection
from bot.feishu.routes import card_handler, events_handler
from bot.feishu.webhook import VerifiedEvent, WebhookVerifier
from bot.governance.actions import toast
from bot.governance.budgets import Refusal
from bot.governance.service import Governance, build_governance
from bot.metrics import MeteredLLM, Metrics
from bot.runtime import texts
from bot.runtime.api_budget import ApiUsage, Delivery
from bot.runtime.conversation_lock import SharedConversationLock
from bot.runtime.identity import BotIdentity
from bot.runtime.intake import MESSAGE_EVENT, EventIntake, InFlight
from bot.runtime.messages import MessageHandler
from bot.runtime.replies import ReplySender
from bot.runtime.run_events import RunEventHub
from bot.runtime.tasks import TaskTracker
from bot.runtime.turns import TurnRunner
from bot.store import (
    CallLogStore,
    ConversationStore,
    Database,
    MessageLedger,
    RunStore,
    TurnJournal,
)
from bot.store.api_calls import ApiCallLedger
from bot.store.conversation_locks import ConversationLocks
from bot.store.conversations import ConversationPrefetch
from bot.store.migrate import upgrade
from bot.timezones import time_zone
from connectors.base import ConnectorContext
from connectors.call_log import CallLogHook
from connectors.config import ConnectorsConfig
from connectors.hub import ConnectorHub

logger = logging.getLogger(__name__)


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
    run_events: RunEventHub | None = None  # every run's events (the web console reads them)
    conversation_lock: SharedConversationLock | None = None
    api_usage: ApiUsage | None = None


SERVICES = web.AppKey("services", Services)
EVENT_MODE = web.AppKey("event_mode", str)
# Set in ws mode (FEISHU_EVENT_MODE=ws) once the long connection is started.
LONG_CONNECTION = web.AppKey("long_connection", LongConnection)
# What /healthz reports under "warnings": settings that work but weaken the bot.
STARTUP_WARNINGS = web.AppKey("startup_warnings", tuple)


@dataclass(frozen=True)
class Overrides:
    """What tests (and embedders) may supply instead of what the settings describe."""

    llm: LLM | None = None
    tools: Sequence[Tool] = ()  # added to the connectors' tools
    hooks: Sequence[Hook] = ()
    connectors: ConnectorsConfig | None = None  # None: from the settings
    owner: str | None = None
    clock: Callable[[], float] = time.time


def create_app(
    settings: Settings,
    *,
    llm: LLM | None = None,
    tools: Sequence[Tool] = (),
    hooks: Sequence[Hook] = (),
    connectors: ConnectorsConfig | None = None,
    owner: str | None = None,
    clock: Callable[[], float] = time.time,
) -> web.Application:
    # Webhook mode without an Encrypt Key: a SettingsError unless explicitly allowed.
    unsigned_warning = settings.unsigned_events_warning()
    if unsigned_warning is not None:
        logger.warning("%s", unsigned_warning)
    overrides = Overrides(llm, tools, hooks, connectors, owner, clock)
    feishu_config = settings.feishu()
    verifier = WebhookVerifier(
        verification_token=feishu_config.verification_token,
        encrypt_key=feishu_config.encrypt_key,
        max_age_seconds=feishu_config.max_event_age_seconds,
        clock=clock,
    )
    app = web.Application()
    metrics = Metrics()

    async def on_event(event: VerifiedEvent) -> None:
        metrics.event_received("message" if event.event_type == MESSAGE_EVENT else "other")
        await app[SERVICES].intake(event)

    async def on_card(event: VerifiedEvent) -> dict[str, Any]:
        metrics.event_received("card")
        action = parse_card_action(event.envelope)
        if isinstance(action, Rejected):
            logger.warning("card callback %s rejected: %s", event.event_id, action.reason)
            return toast("info", "This button is no longer active.")
        return await app[SERVICES].governance.card_actions(action)

    app.router.add_post("/feishu/events", events_handler(verifier, on_event))
    app.router.add_post("/feishu/card", card_handler(verifier, on_card))
    app.router.add_get("/healthz", _healthz)
    # Open like /healthz: no secrets or ids in it, and Prometheus scrapes are usually
    # restricted at the network (expose the port only to the scraper, or proxy the path).
    app.router.add_get("/metrics", _metrics_route(metrics))
    # The web console (/console, /api/...): no routes at all without LARKGATE_CONSOLE_TOKEN.
    add_console(app, settings.larkgate_console_token.get_secret_value())
    app.cleanup_ctx.append(_lifecycle(settings, overrides, metrics))
    app[EVENT_MODE] = settings.feishu_event_mode
    app[STARTUP_WARNINGS] = (unsigned_warning,) if unsigned_warning else ()
    if settings.feishu_event_mode == "ws":
        # After the lifecycle (services are ready), so it is closed before them.
        app.cleanup_ctx.append(_long_connection(feishu_config, on_event, on_card))
    return app


async def build_connectors(
    settings: Settings, overrides: Overrides, feishu: FeishuClient
) -> ConnectorHub:
    config = overrides.connectors or settings.connectors()
    return await ConnectorHub.build(
        config,
        ConnectorContext(feishu=feishu),
        feishu_credentials=bool(settings.feishu_app_id and settings.feishu_app_secret),
    )


def _lifecycle(
    settings: Settings, overrides: Overrides, metrics: Metrics
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        clock = overrides.clock
        runtime = settings.runtime()
        await asyncio.to_thread(upgrade, settings.database_url)
        database = await Database.connect(settings.database_url)
        governance_config = settings.governance()

        async def tell_admins(delivery: Delivery, used: int, budget: int) -> None:
            text = texts.api_budget_notice(delivery.name, used, budget)
            for admin in sorted(governance_config.admins):
                content = json.dumps({"text": text}, ensure_ascii=False)
                await feishu.send_message("open_id", admin, msg_type="text", content=content)

        api_usage = ApiUsage(
            ApiCallLedger(database, clock=clock),
            app_id=settings.feishu_app_id,
            budget=settings.feishu_monthly_api_budget,
            zone=time_zone(settings.larkgate_timezone),
            clock=clock,
            notify=tell_admins,
        )
        metrics.track_api_usage(lambda: api_usage.total, lambda: api_usage.delivery().level)

        def on_call(endpoint: str, code: str) -> None:
            metrics.feishu_call(endpoint, code)
            api_usage.record(endpoint, code)

        feishu = FeishuClient(settings.feishu(), on_call=on_call)
        await api_usage.refresh()  # the month's total so far, before the first answer
        model = overrides.llm or _default_llm(settings)
        metered = MeteredLLM(model, metrics)
        identity = BotIdentity(feishu)
        identity.start()
        me = overrides.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        ledger = MessageLedger(database, clock=clock)
        # A turn's first read (its conversation) rides in the transaction that takes the
        # conversation's lock: one round trip fewer per message.
        prefetch = ConversationPrefetch(runtime.history_messages)
        conversations = ConversationStore(database, clock=clock, prefetch=prefetch)
        interrupted = await RunStore(database, clock=clock).mark_interrupted_running()
        if interrupted:
            logger.info("%d runs left by a stopped process are marked interrupted", interrupted)
        hub = await build_connectors(settings, overrides, feishu)
        tools = ToolRegistry([*hub.registry, *overrides.tools])
        call_log = CallLogStore(database)

        tasks = TaskTracker()
        governance = build_governance(
            governance_config,
            database=database,
            feishu=feishu,
            tools=tools,
            connector_of=hub.connector_of,
            owner=me,
            spawn=tasks.spawn,
            sweep_interval=max(1.0, runtime.claim_lease_seconds / 2),
            # A signed request is accepted up to max_event_age either side of its timestamp.
            replay_window_seconds=2 * runtime.max_event_age_seconds + 60,
            clock=clock,
            on_approval_outcome=metrics.approval_outcome,
        )
        # Governance's hooks come last among those that may rewrite or hold a call: the
        # approver sees the arguments that will run, and read-only mode is checked again
        # right before the call runs (the call log only observes afterwards).
        hooks = [
            *overrides.hooks,
            *governance.hooks,
            CallLogHook(call_log.record, hub.connector_of, clock=clock),
        ]
        in_flight = InFlight()
        metrics.track_in_flight(in_flight.__len__)
        replies = ReplySender(feishu)
        conversation_lock = SharedConversationLock(
            ConversationLocks(
                database, owner=me, lease_seconds=runtime.claim_lease_seconds, clock=clock
            ),
            renew_every=runtime.claim_lease_seconds / 3,
            prefetch=prefetch,
        )
        # One rule for what may join a run and what the run reads (DESIGN §3, interrupts).
        interrupt_limits = InterruptLimits(
            max_messages=runtime.interrupts_per_run,
            max_chars=runtime.interrupt_chars_per_run,
            max_message_chars=runtime.pinned_message_chars,
        )
        workers = ConversationWorkers(
            runtime.max_concurrent_runs,
            lock=conversation_lock,
            join_limits=interrupt_limits,
            max_waiting=runtime.queued_messages_per_conversation or None,
        )
        budget = settings.llm().context_budget

        async def agent_factory() -> ReActAgent:
            offered = await governance.tools_for_run()
            return ReActAgent(
                metered,
                offered,
                hooks=hooks,
                context_budget=budget,
                interrupt_limits=interrupt_limits,
                cycle_threshold=settings.react_cycle_detection_threshold,
                completion_check_min_tools=settings.react_completion_check_min_tools,
            )

        budgets = governance.budgets

        async def record_usage(message: InboundMessage, tokens: int) -> str:
            return await budgets.record(
                sender=message.sender_open_id,
                chat_id=message.chat_id,
                chat_type=message.chat_type,
                tokens=tokens,
            )

        async def admit(message: InboundMessage) -> Refusal | None:
            return await budgets.admit(
                sender=message.sender_open_id, chat_id=message.chat_id, chat_type=message.chat_type
            )

        run_events = RunEventHub(clock=clock)
        turns = TurnRunner(
            agent_factory=agent_factory,
            ledger=ledger,
            conversations=conversations,
            journal=TurnJournal(database, clock=clock),
            live_reply=lambda message: _live_reply(feishu, message, api_usage.delivery(), settings),
            in_flight=in_flight,
            owner=me,
            history_messages=runtime.history_messages,
            record_usage=record_usage if budgets.counts_tokens else None,
            clock=clock,
            on_run=metrics.run_finished,
            events=run_events,
        )
        handler = MessageHandler(
            ledger=ledger,
            identity=identity,
            policy=settings.policy(),
            workers=workers,
            conversations=conversations,
            replies=replies,
            turns=turns,
            in_flight=in_flight,
            owner=me,
            admin=governance.admin,
            admit=admit if budgets.enabled else None,
            admin_help=lambda sender: (
                texts.api_usage_for_admins(api_usage.summary())
                if governance_config.is_admin(sender)
                else None
            ),
        )
        intake = EventIntake(
            ledger,
            handler,
            tasks,
            in_flight,
            owner=me,
            lease_seconds=runtime.claim_lease_seconds,
            max_age_seconds=runtime.max_event_age_seconds,
            clock=clock,
            on_duplicate=metrics.duplicate_event,
        )
        app[SERVICES] = Services(
            database=database,
            feishu=feishu,
            identity=identity,
            ledger=ledger,
            intake=intake,
            workers=workers,
            tasks=tasks,
            in_flight=in_flight,
            owner=me,
            tools=tools,
            governance=governance,
            metrics=metrics,
            run_events=run_events,
            conversation_lock=conversation_lock,
            api_usage=api_usage,
        )
        app[CONSOLE] = Console(
            run_events, RunStore(database, clock=clock), governance, api_usage=api_usage
        )
        loop = asyncio.get_running_loop()
        chores = [
            loop.create_task(intake.sweep_expired(), name="sweep-expired-claims"),
            loop.create_task(intake.keep_leases(), name="keep-leases"),
            loop.create_task(intake.purge(runtime.dedup_retention_hours), name="purge-claims"),
            loop.create_task(conversation_lock.keep(), name="keep-conversation-locks"),
            loop.create_task(governance.waits.watch(), name="approval-decisions"),
            loop.create_task(governance.sweeper.run(), name="approval-sweeper"),
            loop.create_task(governance.budgets.purge_forever(), name="purge-usage"),
            loop.create_task(_purge_replays(governance), name="purge-replays"),
            loop.create_task(api_usage.run(), name="count-feishu-api-calls"),
        ]
        # lark-oapi alone leaves ~300k objects for the collector: a full collection
        # takes ~280 ms and would stall every request in flight. Everything built so far
        # lives as long as the process, so keep it out of the collector's sight.
        gc.collect()
        gc.freeze()
        logger.info("larkgate ready (instance %s, database %s)", me, database.dialect)
        try:
            yield
        finally:
            await _shutdown(app[SERVICES], chores, runtime.shutdown_grace_seconds)
            await hub.aclose()
            if overrides.llm is None and isinstance(model, OpenAICompatibleLLM):
                await model.aclose()

    return lifecycle


def _live_reply(
    feishu: FeishuClient, message: InboundMessage, delivery: Delivery, settings: Settings
) -> LiveReply:
    """The answer's card, as the month's Feishu API budget allows (``Delivery``)."""
    return LiveReply(
        feishu,
        message_id=message.message_id,
        in_thread=bool(message.thread_id),
        uuid_seed=message.message_id,
        cadence=delivery.cadence or 1 / settings.larkgate_card_updates_per_second,
        streaming=delivery.streaming,
        text_only=delivery.text_only,
        note=delivery.note,
    )


async def _shutdown(services: Services, chores: list[asyncio.Task[None]], grace: float) -> None:
    """Finish what can finish within ``grace``; hand the rest back through the ledger."""
    unfinished = await services.workers.close(grace)
    if services.conversation_lock is not None:
        await services.conversation_lock.flush()  # other processes need not wait for leases
    await services.tasks.drain(grace_seconds=1.0)
    for chore in chores:
        chore.cancel()
    await asyncio.gather(*chores, return_exceptions=True)
    released = 0
    for message_id in {job.message_id for job in unfinished} | set(services.in_flight.snapshot()):
        try:
            await services.ledger.release(message_id, owner=services.owner)
            released += 1
        except Exception:
            logger.exception("could not release %s", message_id)
    if released:
        logger.info("handed back %d unfinished messages for another process or restart", released)
    await services.identity.close()
    await services.feishu.aclose()
    if services.api_usage is not None:
        try:
            await services.api_usage.flush()  # the last calls count too
        except Exception:
            logger.exception("could not add the last Feishu API calls to the ledger")
    await services.database.dispose()


async def _purge_replays(governance: Governance) -> None:
    while True:
        await asyncio.sleep(600)
        try:
            await governance.replays.purge()
        except Exception:
            logger.exception("purging the replay guard failed; retrying")


def _long_connection(
    config: FeishuConfig,
    on_event: Callable[[VerifiedEvent], Awaitable[None]],
    on_card: Callable[[VerifiedEvent], Awaitable[dict[str, Any]]],
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Events and card callbacks over Feishu's long connection, into the webhook's handlers."""

    async def long_connection(app: web.Application) -> AsyncIterator[None]:
        connection = LongConnection(config, on_event=on_event, on_card=on_card)
        connection.start()
        app[LONG_CONNECTION] = connection
        try:
            yield
        finally:
            await connection.aclose()

    return long_connection


async def _healthz(request: web.Request) -> web.Response:
    """200 while the bot can take events. In ws mode that includes the long connection:
    up, or down for at most 60 s (starting, or a brief reconnect); longer is 503."""
    services = request.app.get(SERVICES)
    database_ok = services is not None and await services.database.ping()
    warnings: tuple[str, ...] = request.app.get(STARTUP_WARNINGS) or ()
    body: dict[str, Any] = {
        "status": "ok" if database_ok else "unavailable",
        "database": "ok" if database_ok else "unreachable",
        "bot_open_id": services.identity.known if services else None,
        "in_flight": len(services.in_flight) if services else 0,
        "event_mode": request.app.get(EVENT_MODE, "webhook"),
        # Degraded but running (e.g. unsigned events accepted): worth an alert, not a 503.
        "warnings": list(warnings),
    }
    healthy = database_ok
    connection = request.app.get(LONG_CONNECTION)
    if connection is not None:
        health = connection.health
        body["long_connection"] = health.as_dict()
        if not health.serving(time.time()):
            healthy = False
            body["status"] = "unavailable"
    return web.json_response(body, status=200 if healthy else 503)


def _metrics_route(metrics: Metrics) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        services = request.app.get(SERVICES)
        if services is not None:
            # Read at each scrape: another process (or admin card) may have switched it.
            try:
                mode = await asyncio.wait_for(services.governance.org.read_only(), 2.0)
                metrics.set_read_only(mode.on)
            except Exception:  # keep the last value; the scrape must still answer
                logger.warning("metrics: could not read the read-only mode", exc_info=True)
        connection = request.app.get(LONG_CONNECTION)
        if connection is not None:
            metrics.set_long_connection_state(connection.health.state)
        body, content_type = metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    return handler


def _default_llm(settings: Settings) -> LLM:
    config = settings.llm()
    return OpenAICompatibleLLM(base_url=config.base_url, api_key=config.api_key, model=config.model)
