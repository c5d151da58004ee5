"""The composition root: settings in, a running aiohttp application out.

Everything is built here and injected; nothing below reads the environment. Tests
pass their own LLM, tools, hooks or database through ``create_app``'s keywords.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from aiohttp import web

from bot.config import Settings
from bot.console import CONSOLE, Console, add_console
from bot.engine import LLM, Hook, OpenAICompatibleLLM, Tool
from bot.feishu.config import FeishuConfig
from bot.feishu.events import Rejected, parse_card_action
from bot.feishu.long_connection import LongConnection
from bot.feishu.oauth_callback import CallbackPage, CallbackQuery, Complete, oauth_callback_handler
from bot.feishu.routes import EVENTS_PATH, PushAnswerer, card_handler, events_handler
from bot.feishu.webhook import VerifiedEvent, WebhookVerifier
from bot.governance.actions import toast
from bot.governance.service import Governance
from bot.governance.user_auth.config import CALLBACK_PATH
from bot.media.limits import ReaderLimits
from bot.memory.console import MemoryConsole
from bot.metrics import Metrics
from bot.network import Network
from bot.runtime.intake.claims import MESSAGE_EVENT
from bot.runtime.schedules.console import ScheduleConsole
from bot.store import Database, RunStore
from bot.wiring import Overrides, Services, build_services
from connectors.base import Connector
from connectors.config import ConnectorsConfig

logger = logging.getLogger(__name__)


SERVICES = web.AppKey("services", Services)  # the default app's
# Every app's services by name ("" the default app's), once started.
APP_SERVICES = web.AppKey("app_services", dict)
EVENT_MODE = web.AppKey("event_mode", str)
# Each [apps.NAME]'s event mode (webhook or ws), for /healthz.
APP_EVENT_MODES = web.AppKey("app_event_modes", dict)
# Set in ws mode (FEISHU_EVENT_MODE=ws) once the long connection is started.
LONG_CONNECTION = web.AppKey("long_connection", LongConnection)
# What /healthz reports under "warnings": settings that work but weaken the bot.
STARTUP_WARNINGS = web.AppKey("startup_warnings", tuple)


def create_app(
    settings: Settings,
    *,
    llm: LLM | None = None,
    tools: Sequence[Tool] = (),
    hooks: Sequence[Hook] = (),
    connectors: ConnectorsConfig | None = None,
    owner: str | None = None,
    clock: Callable[[], float] = time.time,
    connector_classes: Mapping[str, type[Connector]] | None = None,
    reader_limits: ReaderLimits | None = None,
    open_database: Callable[[str], Awaitable[Database]] | None = None,
) -> web.Application:
    # Webhook mode without an Encrypt Key: a SettingsError unless explicitly allowed.
    unsigned_warning = settings.unsigned_events_warning()
    if unsigned_warning is not None:
        logger.warning("%s", unsigned_warning)
    overrides = Overrides(
        llm,
        tools,
        hooks,
        connectors,
        owner,
        clock,
        connector_classes or {},
        reader_limits=reader_limits or ReaderLimits(),
        open_database=open_database,
    )
    # A LARKGATE_TOKEN_KEY that is not a Fernet key stops the start here, saying why.
    user_auth = settings.user_auth()
    app = web.Application()
    metrics = Metrics()
    # The default app on /feishu/events and /feishu/card; each [apps.NAME] on its own.
    apps = [("", settings, EVENTS_PATH, "/feishu/card")]
    for spec in settings.apps():
        app_settings = settings.for_app(spec)
        # An [apps.NAME] in webhook mode without its Encrypt Key: refused like the default.
        app_warning = app_settings.unsigned_events_warning()
        if app_warning is not None:
            logger.warning("[apps.%s]: %s", spec.name, app_warning)
        apps.append((spec.name, app_settings, spec.events_path, spec.card_path))
    for name, app_settings, events_path, card_path in apps:
        on_event, on_card = _handlers(app, name, metrics)
        feishu_config = app_settings.feishu()
        verifier = WebhookVerifier(
            verification_token=feishu_config.verification_token,
            encrypt_key=feishu_config.encrypt_key,
            max_age_seconds=feishu_config.max_event_age_seconds,
            clock=clock,
            app_id=feishu_config.app_id,
        )
        app.router.add_post(events_path, events_handler(PushAnswerer(verifier, on_event)))
        app.router.add_post(card_path, card_handler(verifier, on_card))
    if user_auth is not None and user_auth.flow == "code":
        app.router.add_get(CALLBACK_PATH, oauth_callback_handler(_oauth_callback(app)))
    app.router.add_get("/healthz", _healthz)
    # Open like /healthz: no secrets or ids in it, and Prometheus scrapes are usually
    # restricted at the network (expose the port only to the scraper, or proxy the path).
    app.router.add_get("/metrics", _metrics_route(metrics))
    # The web console (/console, /api/...): no routes at all without LARKGATE_CONSOLE_TOKEN.
    add_console(app, settings.larkgate_console_token.get_secret_value())
    app.cleanup_ctx.append(_lifecycle(settings, overrides, metrics))
    app[EVENT_MODE] = settings.feishu_event_mode
    app[APP_EVENT_MODES] = {name: s.feishu_event_mode for name, s, _, _ in apps if name}
    app[STARTUP_WARNINGS] = (unsigned_warning,) if unsigned_warning else ()
    for name, app_settings, _, _ in apps:
        if app_settings.feishu_event_mode == "ws":
            # After the lifecycle (services are ready), so it is closed before them.
            on_event, on_card = _handlers(app, name, metrics)
            app.cleanup_ctx.append(
                _long_connection(app_settings.feishu(), settings.network(), on_event, on_card, name)
            )
    return app


def _handlers(
    app: web.Application, name: str, metrics: Metrics
) -> tuple[
    Callable[[VerifiedEvent], Awaitable[None]],
    Callable[[VerifiedEvent], Awaitable[dict[str, Any]]],
]:
    """What the app ``name``'s verified events and card callbacks are handed to: its own
    intake and card actions, never another app's."""

    async def on_event(event: VerifiedEvent) -> None:
        metrics.event_received("message" if event.event_type == MESSAGE_EVENT else "other")
        await app[APP_SERVICES][name].intake(event)

    async def on_card(event: VerifiedEvent) -> dict[str, Any]:
        metrics.event_received("card")
        action = parse_card_action(event.envelope)
        if isinstance(action, Rejected):
            logger.warning("card callback %s rejected: %s", event.event_id, action.reason)
            return toast("info", "This button is no longer active.")
        services: Services = app[APP_SERVICES][name]
        return await services.governance.card_actions(action)

    return on_event, on_card


def _oauth_callback(app: web.Application) -> Complete:
    async def complete(query: CallbackQuery) -> CallbackPage:
        user_auth = app[SERVICES].user_auth if SERVICES in app else None
        if user_auth is None:  # still starting
            return CallbackPage(503, "Starting", "Try again in a few seconds.")
        return await user_auth.callback(query)

    return complete


def _lifecycle(
    settings: Settings, overrides: Overrides, metrics: Metrics
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        built = await build_services(settings, overrides, metrics)
        services = app[SERVICES] = built.services
        others = {name: pair[0] for name, pair in built.apps.items()}
        app[APP_SERVICES] = {"": services, **others}
        app[CONSOLE] = Console(
            services.run_events,
            RunStore(services.database, clock=overrides.clock),
            services.governance,
            api_usage=services.api_usage,
            schedules=ScheduleConsole(
                services.schedules, admin=lambda: services.governance.console.admin
            ),
            user_auth=services.user_auth,
            memories=None
            if services.memories is None
            else MemoryConsole(services.memories, admin=lambda: services.governance.console.admin),
        )
        runtime = settings.runtime()
        chores = {
            name: _start_chores(served, runtime.dedup_retention_hours)
            for name, served in app[APP_SERVICES].items()
        }
        # lark-oapi alone leaves ~300k objects for the collector: a full collection
        # takes ~280 ms and would stall every request in flight. Everything built so far
        # lives as long as the process, so keep it out of the collector's sight.
        gc.collect()
        gc.freeze()
        logger.info(
            "larkgate ready (instance %s, database %s)", services.owner, services.database.dialect
        )
        try:
            yield
        finally:
            # The other apps first: they share the database the default app closes.
            for name, (served, hub) in built.apps.items():
                await _shutdown(served, chores[name], runtime.shutdown_grace_seconds)
                await hub.aclose()
            await _shutdown(services, chores[""], runtime.shutdown_grace_seconds)
            await services.readers.aclose()  # a file still being read is abandoned
            await services.database.dispose()
            await built.hub.aclose()
            if built.models.owns_model and isinstance(built.models.model, OpenAICompatibleLLM):
                await built.models.model.aclose()
            for client in built.models.clients:
                await client.aclose()

    return lifecycle


def _start_chores(services: Services, dedup_retention_hours: int) -> list[asyncio.Task[None]]:
    """The periodic work of a running bot, each its own task so one failing stops no other."""
    loop = asyncio.get_running_loop()
    intake, governance = services.intake, services.governance
    chores: dict[str, Coroutine[Any, Any, None]] = {
        "sweep-expired-claims": intake.sweep_expired(),
        "keep-leases": intake.keep_leases(),
        "purge-claims": intake.purge(dedup_retention_hours),
        "approval-decisions": governance.waits.watch(),
        "question-answers": services.questions.waits.watch(),
        "approval-sweeper": governance.sweeper.run(),
        "purge-usage": governance.budgets.purge_forever(),
        "purge-replays": _purge_replays(governance),
        "keep-conversation-locks": services.conversation_lock.keep(),
        "count-feishu-api-calls": services.api_usage.run(),
        "run-scheduled-tasks": services.scheduled_runs.run(),
    }
    if services.user_auth is not None:
        chores["authorisation-consents"] = services.user_auth.waits.watch()
        chores["authorisation-sweeper"] = services.user_auth.sweep()
    return [loop.create_task(work, name=name) for name, work in chores.items()]


async def _shutdown(services: Services, chores: list[asyncio.Task[None]], grace: float) -> None:
    """Finish what can finish within ``grace``; hand the rest back through the ledger."""
    # Firings still running are left to their leases: a restart or a replica takes them
    # over (their header message is posted once: it carries the due time's uuid).
    await services.scheduled_runs.close()
    # Runs waiting for a person stay waiting: their approvals stay pending, their cards as
    # they are, and the process that takes their messages over resumes them.
    services.governance.waits.closing = True
    services.questions.waits.closing = True
    if services.user_auth is not None:
        # Requests still open stay open: a consent on any replica completes them later.
        services.user_auth.asker.closing = True
    unfinished = await services.workers.close(grace)
    if services.user_auth is not None:
        await services.user_auth.asker.aclose()
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
    try:
        await services.api_usage.flush()  # the last calls count too
    except Exception:
        logger.exception("could not add the last Feishu API calls to the ledger")


async def _purge_replays(governance: Governance) -> None:
    while True:
        await asyncio.sleep(600)
        try:
            await governance.replays.purge()
        except Exception:
            logger.exception("purging the replay guard failed; retrying")


def _long_connection(
    config: FeishuConfig,
    network: Network,
    on_event: Callable[[VerifiedEvent], Awaitable[None]],
    on_card: Callable[[VerifiedEvent], Awaitable[dict[str, Any]]],
    name: str,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Events and card callbacks over Feishu's long connection, into the webhook's handlers."""

    async def long_connection(app: web.Application) -> AsyncIterator[None]:
        connection = LongConnection(config, on_event=on_event, on_card=on_card, network=network)
        connection.start()
        if not name:  # /healthz and /metrics report the default app's
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
    apps: dict[str, Services] = request.app.get(APP_SERVICES) or {}
    modes: dict[str, str] = request.app.get(APP_EVENT_MODES) or {}
    if len(apps) > 1:
        body["apps"] = {
            name: {"bot_open_id": served.identity.known, "event_mode": modes.get(name, "")}
            for name, served in apps.items()
            if name
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
