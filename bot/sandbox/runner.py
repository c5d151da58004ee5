"""Start the emulator, the real bot wired to it, and the chat page; stop them in reverse."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from aiohttp import web
from cryptography.fernet import Fernet
from pydantic import SecretStr

from bot.app import create_app
from bot.config import Settings, SettingsError
from bot.engine import Tool
from bot.serving import start_site
from connectors.base import Connector
from connectors.config import ConnectorsConfig

from .emulator import FakeFeishu
from .page import BotEndpoint, ChatPage
from .people import ADMIN, APP_ID, BOT_NAME, BOT_OPEN_ID, GROUP_CHAT_ID, PEOPLE

DEV_DATABASE_URL = "sqlite+aiosqlite:///./larkgate-dev.db"
RECORDED_REQUESTS = 2000  # the emulator keeps this many; a long session must not grow
# The user's settings dev_settings replaces by the emulator's (whatever they say).
EMULATOR_SETTINGS = (
    "feishu_app_id",
    "feishu_app_secret",
    "feishu_verification_token",
    "feishu_encrypt_key",
    "feishu_domain",
    "feishu_event_mode",
)


def check_dev_settings(settings: Settings) -> None:
    """Only the model is real in the sandbox: its settings must be there."""
    model = {"LLM_BASE_URL": settings.llm_base_url, "LLM_MODEL": settings.llm_model}
    missing = [name for name, value in model.items() if not value]
    if missing:
        raise SettingsError(
            "larkgate dev needs a model (environment or .env): "
            + ", ".join(missing)
            + "; e.g. LLM_BASE_URL=http://localhost:11434/v1 LLM_MODEL=qwen2.5 for Ollama"
        )


def dev_settings(
    settings: Settings,
    *,
    domain: str,
    app_secret: str,
    token: str,
    key: str,
    bot_url: str = "",
) -> Settings:
    """The user's settings with Feishu pointed at the emulator (a clear error without a model).

    Per-user authorisation is on, against the emulator's OAuth: the consent page sends the
    browser back to the bot at ``bot_url``, and without a LARKGATE_TOKEN_KEY of the user's
    the session seals tokens with a key of its own (the emulator forgets its grants when it
    stops anyway).
    """
    check_dev_settings(settings)
    token_key = settings.larkgate_token_key.get_secret_value() or Fernet.generate_key().decode()
    update: dict[str, object] = {
        "feishu_app_id": APP_ID,
        "feishu_app_secret": SecretStr(app_secret),
        "feishu_verification_token": SecretStr(token),
        "feishu_encrypt_key": SecretStr(key),
        "feishu_domain": domain,
        "feishu_event_mode": "webhook",
        "larkgate_admins": tuple(dict.fromkeys([*settings.larkgate_admins, ADMIN.open_id])),
        "larkgate_public_url": bot_url,
        "larkgate_token_key": SecretStr(token_key),
    }
    if "database_url" not in settings.model_fields_set:
        update["database_url"] = DEV_DATABASE_URL
    return settings.model_copy(update=update)


class Sandbox:
    """``async with Sandbox(settings) as sandbox: print(sandbox.page_url)``."""

    def __init__(
        self,
        settings: Settings,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        tools: Sequence[Tool] = (),
        connectors: ConnectorsConfig | None = None,
        connector_classes: Mapping[str, type[Connector]] | None = None,
        env_file: Path | str = ".env",
    ) -> None:
        self._settings = settings
        # Where the page's "Connect a real Feishu app" writes the new app (as larkgate setup
        # does): the .env the settings were read from, in the directory dev started in.
        self.env_file = Path(env_file).absolute()
        self._host = host
        self._port = port
        self._tools = tools
        self._connectors = connectors
        self._connector_classes = connector_classes
        secret = secrets.token_urlsafe(16)
        self._token = secrets.token_urlsafe(16)
        self._key = secrets.token_urlsafe(24)
        self.emulator = FakeFeishu(
            app_id=APP_ID, app_secret=secret, bot_open_id=BOT_OPEN_ID, bot_name=BOT_NAME
        )
        self.emulator.max_recorded = RECORDED_REQUESTS
        # Everyone on the page is in its group: a task scheduled there runs only while its
        # creator is a member, as Feishu's member list says.
        members = {person.open_id for person in PEOPLE.values()}
        self.emulator.workspace.add_chat(GROUP_CHAT_ID, "larkgate sandbox", members=members)
        # What the bot sends a person (a paused task's notice) shows in their DM on the page.
        for person in PEOPLE.values():
            self.emulator.dm_chats[person.open_id] = person.dm_chat_id()
        self.bot_settings: Settings | None = None
        self.bot_app: web.Application | None = None
        self.bot_url = ""
        self.page_url = ""
        self._runners: list[web.AppRunner] = []

    async def start(self) -> Self:
        try:
            await self.emulator.start()
            # The bot's port is known before its settings: the OAuth callback's URL is in them.
            bot_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            bot_socket.bind(("127.0.0.1", 0))
            self.bot_url = f"http://127.0.0.1:{bot_socket.getsockname()[1]}"
            self.bot_settings = dev_settings(
                self._settings,
                domain=self.emulator.domain,
                app_secret=self.emulator.app_secret,
                token=self._token,
                key=self._key,
                bot_url=self.bot_url,
            )
            self.bot_app = create_app(
                self.bot_settings,
                tools=self._tools,
                connectors=self._connectors,
                connector_classes=self._connector_classes,
            )
            await self._serve_on(self.bot_app, bot_socket)
            endpoint = BotEndpoint(self.bot_url, self._token, self._key)
            page = ChatPage(
                self.emulator, endpoint, self.bot_settings.llm_model, env_file=self.env_file
            )
            self.page_url = await self._serve(page.app(host=self._host), self._host, self._port)
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        await self.emulator.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _serve_on(self, app: web.Application, sock: socket.socket) -> None:
        shutdown = self._settings.larkgate_shutdown_grace_seconds + 1
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown)
        self._runners.append(runner)
        try:
            await runner.setup()
        except BaseException:
            sock.close()
            raise
        await start_site(runner, sock=sock)

    async def _serve(self, app: web.Application, host: str, port: int) -> str:
        shutdown = self._settings.larkgate_shutdown_grace_seconds + 1
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown)
        await runner.setup()
        self._runners.append(runner)
        await start_site(runner, host, port)
        bound_host, bound_port = runner.addresses[0][:2]
        shown = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
        return f"http://{shown}:{bound_port}"
