"""The ``larkgate`` command: ``serve`` runs the bot; ``dev`` runs it in a local sandbox;
``setup`` creates its Feishu app; ``migrate``, ``check`` and ``audit`` help operate it."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

from bot.config import Settings, SettingsError, load_settings
from bot.network import export_from_env_file
from bot.timezones import time_zone


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="larkgate", description="A Feishu/Lark agent bot.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the bot")
    serve.add_argument("--host", help="listen address (default LARKGATE_HOST or 0.0.0.0)")
    serve.add_argument("--port", type=int, help="listen port (default LARKGATE_PORT or 8000)")
    serve.add_argument(
        "--mode",
        choices=("webhook", "ws"),
        help="how events arrive: webhook (Feishu POSTs to us) or ws (Feishu's long "
        "connection, no public URL needed); default FEISHU_EVENT_MODE or webhook",
    )
    dev = commands.add_parser(
        "dev",
        help="try larkgate locally without a Feishu app: the bot, an embedded Feishu "
        "emulator and a chat page in the browser (only the model is real)",
    )
    dev.add_argument("--host", default="127.0.0.1", help="chat page address (default 127.0.0.1)")
    dev.add_argument("--port", type=int, default=8765, help="chat page port (default 8765)")
    setup = commands.add_parser(
        "setup",
        help="create the bot's Feishu app with one scan (a QR code) and write its "
        "credentials into the env file",
    )
    setup.add_argument("--env-file", default=".env", help="the env file to write (default .env)")
    setup.add_argument(
        "--webhook",
        metavar="URL",
        type=_webhook_url,
        help="the bot's public URL, for webhook mode (default: the long connection)",
    )
    setup.add_argument("--lark", action="store_true", help="a Lark (larksuite.com) tenant")
    commands.add_parser("migrate", help="apply database migrations (DATABASE_URL) and exit")
    commands.add_parser(
        "check",
        help="check the settings, Feishu, the model and the connectors; exit 1 on a problem",
    )
    audit = commands.add_parser(
        "audit", help="print recent audit entries (approvals, mode changes, admin commands)"
    )
    audit.add_argument(
        "--limit", type=_positive_int, default=50, help="how many entries (default 50)"
    )
    audit.add_argument(
        "--action", help="only actions starting with this, e.g. approval. or readonly."
    )
    args = parser.parse_args(argv)
    # Proxies and CA files are read by the HTTP libraries from the environment only: an
    # env file's are put there first (the environment's own win).
    env_file = Path(args.env_file if args.command == "setup" else ".env")
    export_from_env_file(env_file)
    if args.command == "setup":  # writes the settings, so it needs none of them
        from bot.onboarding import Options, run

        return run(Options(env_file, webhook=args.webhook, lark=args.lark))

    try:
        serving_mode = args.command == "serve" and args.mode
        settings = load_settings(**({"feishu_event_mode": args.mode} if serving_mode else {}))
        if args.command == "serve":
            return _serve(settings, args.host, args.port)
        if args.command == "dev":
            return _dev(settings, args.host, args.port)
        if args.command == "check":
            return _check(settings)
        if args.command == "audit":
            return _audit(settings, args.limit, args.action)
        return _migrate(settings)
    except SettingsError as exc:
        print(f"larkgate: {exc}", file=sys.stderr)
        return 2


def _webhook_url(text: str) -> str:
    from bot.onboarding import webhook_base

    return webhook_base(text)


def _positive_int(text: str) -> int:
    # A negative LIMIT means "no limit" to SQLite and is an error to PostgreSQL.
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _configure_logging(settings: Settings) -> None:
    from pydantic import SecretStr

    from bot.logs import configure_logging

    # Text keeps the classic "time LEVEL logger: message" line; json writes one object a
    # line. Both carry the turn's ids and never a secret setting's or connector's value.
    secrets = [
        value.get_secret_value()
        for value in (getattr(settings, name) for name in type(settings).model_fields)
        if isinstance(value, SecretStr)
    ]
    secrets += sorted(_connector_secrets(settings))
    configure_logging(settings.larkgate_log_level, settings.larkgate_log_format, secrets)
    # The SDKs' own loggers are chatty at INFO and below.
    # (openai 3.x sends through httpx2/httpcore2, which log under those names.)
    for noisy in ("Lark", "httpx", "httpcore", "httpx2", "httpcore2", "openai"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


def _connector_secrets(settings: Settings) -> set[str]:
    """The connectors' secrets (MCP env and headers, HTTP headers, the SQL URL), read
    from their settings without starting any connector."""
    from connectors.config import connector_secrets

    try:
        config = settings.connectors()
    except SettingsError:
        # An unreadable larkgate.toml starts no connector (serve reports it itself), and
        # must not stop commands that need none, such as migrate.
        return set()
    return connector_secrets(config)


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    missing = settings.missing_for_serve()
    if missing:
        raise SettingsError(
            "larkgate serve needs these settings (environment or .env): " + ", ".join(missing)
        )
    settings.agent()  # a wrong [models] or [plan] table stops here, said plainly
    settings.network()  # so do a proxy or a CA file that cannot be used
    settings.profiles()  # and a [profiles] table or a route to no profile
    for spec in settings.apps():  # and an [apps.NAME] table or a secret it names unset
        settings.for_app(spec).unsigned_events_warning()  # its pushes unsigned, not allowed
    _configure_logging(settings)
    from bot.app import create_app
    from bot.serving import serve

    app = create_app(settings)
    freeze_after_startup(app)
    serve(
        app,
        host=host or settings.larkgate_host,
        port=port or settings.larkgate_port,
        shutdown_timeout=settings.larkgate_shutdown_grace_seconds + 5,
        loop=serving_event_loop(settings.larkgate_event_loop),
    )
    return 0


def freeze_after_startup(app: web.Application) -> None:
    """Once the app has started, leave what exists then out of every later collection.

    The imports and start-up leave about 490,000 objects that live as long as the
    process; each full collection of the cyclic garbage collector walked them all, about
    100-200 ms on this kind of machine with the event loop stopped, every time enough
    new objects had survived (tens of seconds apart under load): the ACKs queued behind
    it were the webhook's slowest. Frozen (``gc.freeze``), a collection walks only what
    was created since.
    """

    async def freeze(_: web.Application) -> None:
        gc.collect()
        gc.freeze()

    app.on_startup.append(freeze)


def serving_event_loop(wanted: str) -> asyncio.AbstractEventLoop:
    """The loop ``larkgate serve`` runs on (``LARKGATE_EVENT_LOOP``); the bench's server
    takes the same one."""
    if wanted == "uvloop":
        try:
            import uvloop
        except ImportError:
            logging.getLogger(__name__).warning(
                "LARKGATE_EVENT_LOOP=uvloop, but uvloop is not installed here: asyncio's loop"
            )
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _dev(settings: Settings, host: str, port: int) -> int:
    import contextlib

    from bot.sandbox.origins import settings_report
    from bot.sandbox.runner import Sandbox, check_dev_settings

    # Where the model, the database and the rest came from, said first: a copied .env or
    # an old export changes what dev does, and a missing model is seen with its cause.
    print(settings_report(settings), flush=True)
    check_dev_settings(settings)  # before logging and the 2 s of importing the SDK
    _configure_logging(settings)

    async def run() -> None:
        async with Sandbox(settings, host=host, port=port) as sandbox:
            print(f"larkgate dev: open {sandbox.page_url} (Ctrl+C stops)", flush=True)
            print(
                f"  bot {sandbox.bot_url}, Feishu emulator {sandbox.emulator.domain}",
                flush=True,
            )
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def _check(settings: Settings) -> int:

    from bot.checks import run_checks

    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(run_checks(settings))
    width = max(len(r.name) for r in results)
    for result in results:
        print(f"{result.level:<4}  {result.name:<{width}}  {result.detail}")
    return 0 if all(r.ok for r in results) else 1


def _audit(settings: Settings, limit: int, action: str | None) -> int:
    import json
    from datetime import datetime

    from bot.store.audit import AuditLog, AuditRecord
    from bot.store.db import Database, normalize_url, sqlite_file
    from bot.store.migrate import current_revision

    async def recent() -> list[AuditRecord]:
        async with Database(settings.database_url) as database:
            return await AuditLog(database).recent(limit=limit, action=action)

    # Read-only: a mistyped DATABASE_URL must not create an empty database.
    file = sqlite_file(normalize_url(settings.database_url))
    if (file is not None and not file.exists()) or current_revision(settings.database_url) is None:
        print(f"larkgate: no larkgate database at {settings.database_url}", file=sys.stderr)
        return 1
    zone = time_zone(settings.larkgate_timezone)
    records = asyncio.run(recent())
    if not records:
        print("no audit entries")
    for record in reversed(records):  # oldest first, like a log
        when = datetime.fromtimestamp(record.at, zone).strftime("%Y-%m-%d %H:%M:%S")
        fields = [
            when,
            record.action,
            f"by {record.actor or 'system'}",
            f"target {record.target}" if record.target else "",
            f"in {record.chat_id}" if record.chat_id else "",
            json.dumps(record.detail, ensure_ascii=False) if record.detail else "",
        ]
        print("  ".join(field for field in fields if field))
    return 0


def _migrate(settings: Settings) -> int:
    _configure_logging(settings)
    from bot.store.migrate import current_revision, upgrade

    upgrade(settings.database_url)
    print(f"database at revision {current_revision(settings.database_url)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
