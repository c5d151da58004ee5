"""``larkgate setup``: a Feishu (or Lark) app for the bot in one scan.

Feishu's one-click registration (research/anchors-2026.md §3) is a device flow on the
*accounts* host that creates an app: lark-oapi's ``aregister_app`` runs it (init, begin,
then polls through pending and slow_down; a Lark tenant switches to the Lark accounts host
once). We ask, in its ``addons``, for the scopes, the event and the callback larkgate uses,
so the new app needs no visit to the console before its first version is published. The
link is shown once, on screen, with a QR code for the phone.

On success the credentials are checked (a tenant token and ``bot/v3/info``) through the
bot's own Feishu client, then written into the env file in place (other lines kept, mode
0600). The app secret, the device code and the link with its code are never logged.

``onboard`` is that one path (register → check → write) for both fronts: the terminal's
(``setup``, the link as a QR code in the terminal, :class:`Terminal`) and the "Connect a
real Feishu app" panel of ``larkgate dev``'s page (``bot/sandbox/setup.py``), each a
:class:`Display` of the link and the progress.

``FEISHU_ACCOUNTS_URL`` / ``LARK_ACCOUNTS_URL`` replace the accounts hosts (tests, private
deployments): they are the SDK's ``domain`` / ``lark_domain``. ``FEISHU_DOMAIN``, when it
names neither public open platform, is where the new credentials are checked and what a
Lark app's ``FEISHU_DOMAIN`` is written as. The registration's requests go through the
bot's own HTTP session (``bot.network``): ``HTTP(S)_PROXY``, ``NO_PROXY``,
``SSL_CERT_FILE`` and ``LARKGATE_CA_BUNDLE`` apply as to every other call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import urlencode, urlsplit

import aiohttp

from bot.feishu.client import BotInfo, FeishuClient
from bot.feishu.config import FeishuConfig
from bot.feishu.errors import FeishuError
from bot.network import Network, NetworkSettingError, ProxiedSession

logger = logging.getLogger(__name__)

FEISHU_ACCOUNTS = "https://accounts.feishu.cn"
LARK_ACCOUNTS = "https://accounts.larksuite.com"
FEISHU_OPEN = "https://open.feishu.cn"
LARK_OPEN = "https://open.larksuite.com"

# What the new app is asked for (README, "Connecting a Feishu (or Lark) app", step 4):
# only these, not the platform's preset list; the console can add more later.
TENANT_SCOPES = (
    "im:message.p2p_msg:readonly",
    "im:message.group_at_msg:readonly",
    "im:message",
    "im:message:send_as_bot",
    "cardkit:card:write",
    "contact:user.base:readonly",
    "im:chat:readonly",
    "calendar:calendar",
    "task:task:write",
    "bitable:app",
    "docx:document",
    "docs:permission.member:retrieve",
    "drive:drive.metadata:readonly",
    "application:application:self_manage",
)
EVENTS = ("im.message.receive_v1",)
CALLBACKS = ("card.action.trigger",)
ADDONS: dict[str, Any] = {
    "preset": False,
    "scopes": {"tenant": list(TENANT_SCOPES), "user": []},
    "events": {"items": {"tenant": list(EVENTS)}},
    "callbacks": {"items": list(CALLBACKS)},
}
APP_PRESET = {"name": "larkgate", "desc": "An agent bot that asks before it acts."}

CHECK_TIMEOUT = 30.0


class SetupFailed(Exception):
    """Setup stopped: the message says why, to the person at the terminal."""


@dataclass(frozen=True, slots=True)
class Options:
    env_file: Path
    webhook: str | None = None  # the bot's public base URL (webhook_base), for webhook mode
    lark: bool = False  # a Lark tenant: start on the Lark accounts host


@dataclass(frozen=True, slots=True)
class NewApp:
    app_id: str
    app_secret: str = field(repr=False)
    brand: str  # "feishu" or "lark"
    owner_open_id: str | None  # who scanned


def run(options: Options, *, out: TextIO | None = None) -> int:
    """The command: 0 when the env file holds the new app, 1 when nothing was written."""
    out = out or sys.stdout
    try:
        asyncio.run(setup(options, os.environ, out))
    except SetupFailed as exc:
        print(f"larkgate setup: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("larkgate setup: stopped; nothing was written", file=sys.stderr, flush=True)
        return 130
    return 0


class Display(Protocol):
    """What the person sees while the registration runs: the terminal's (:class:`Terminal`)
    or ``larkgate dev``'s page."""

    def link(self, url: str, expire_in: int, *, lark: bool) -> None:
        """The link to scan (it carries the one-time code: shown, never logged)."""

    def say(self, text: str) -> None:
        """A line of progress."""

    def created(self, app: NewApp) -> None:
        """The app was made (someone scanned and confirmed); its credentials are checked
        next."""


class Terminal:
    """The terminal's display: the link as a QR code, progress as lines of ``out``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def link(self, url: str, expire_in: int, *, lark: bool) -> None:
        _show_link(self.out, url, expire_in, lark=lark)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def created(self, app: NewApp) -> None:
        self.say(f"App {app.app_id} created; checking its credentials…")


@dataclass(frozen=True, slots=True)
class Outcome:
    """A new app whose checked credentials are in ``env_file``."""

    env_file: Path
    app: NewApp
    bot: BotInfo
    domain: str
    values: Mapping[str, str] = field(repr=False)  # what was written (the secret with it)
    next_steps: tuple[str, ...]  # what is left to do, in order


async def setup(options: Options, environ: Mapping[str, str], out: TextIO) -> None:
    _report(out, await onboard(options, environ, Terminal(out)))


async def onboard(options: Options, environ: Mapping[str, str], display: Display) -> Outcome:
    """Register → check → write: the one path of ``larkgate setup`` and of ``larkgate
    dev``'s page. SetupFailed, with nothing written, when any step fails."""
    webhook = options.webhook
    _check_writable(options.env_file)  # before an app is made whose secret would be lost
    current = _env_values(options.env_file)

    def setting(name: str) -> str:
        return environ.get(name) or current.get(name) or ""

    network = _network(setting("LARKGATE_CA_BUNDLE"))
    app = await register(
        feishu_accounts=environ.get("FEISHU_ACCOUNTS_URL") or FEISHU_ACCOUNTS,
        lark_accounts=environ.get("LARK_ACCOUNTS_URL") or LARK_ACCOUNTS,
        lark=options.lark,
        display=display,
        network=network,
    )
    domain = open_domain(app.brand, setting("FEISHU_DOMAIN"))
    display.created(app)
    bot = await check_credentials(app, domain, network)

    values = {
        "FEISHU_APP_ID": app.app_id,
        "FEISHU_APP_SECRET": app.app_secret,
        "FEISHU_EVENT_MODE": "webhook" if webhook else "ws",
    }
    if app.brand == "lark" or "FEISHU_DOMAIN" in current:
        values["FEISHU_DOMAIN"] = domain
    admins = setting("LARKGATE_ADMINS").strip()
    if not admins and app.owner_open_id:
        values["LARKGATE_ADMINS"] = app.owner_open_id
    update_env_file(options.env_file, values)
    model = bool(setting("LLM_BASE_URL") and setting("LLM_MODEL"))
    steps = next_steps(app, domain, webhook, model=model)
    return Outcome(options.env_file, app, bot, domain, values, steps)


async def register(
    *,
    feishu_accounts: str,
    lark_accounts: str,
    lark: bool,
    out: TextIO | None = None,
    network: Network | None = None,
    display: Display | None = None,
) -> NewApp:
    """Run the one-scan registration, the link and progress shown on ``display`` (else on
    ``out``, the terminal); a SetupFailed on a refusal, an expired link or a network
    failure."""
    from lark_oapi.scene.registration.errors import (
        AppAccessDeniedError,
        AppExpiredError,
        RegisterAppError,
    )

    switched = False
    shown = display or Terminal(out or sys.stdout)

    def show(info: dict[str, Any]) -> None:
        shown.link(str(info["url"]), int(info.get("expire_in") or 600), lark=lark)

    def status(info: dict[str, Any]) -> None:
        nonlocal switched
        if info.get("status") == "domain_switched":
            switched = True
            shown.say(
                "A Lark tenant: going on with Lark's accounts host "
                "(on a phone, open the link in a browser if Lark says it expired)."
            )
        elif info.get("status") == "slow_down":
            logger.info("registration: asked to slow down, polling every %s s", info["interval"])

    start = lark_accounts if lark else feishu_accounts
    session = (network or Network()).client_session(timeout=aiohttp.ClientTimeout(total=30))
    try:
        flow = _registration_flow(session)(
            show,
            status,
            "larkgate",
            start.rstrip("/"),
            lark_accounts.rstrip("/"),
            app_preset=APP_PRESET,
            addons=ADDONS,
            create_only=True,
        )
        result = await flow.run()
    except AppAccessDeniedError:
        raise SetupFailed(
            "the new app was refused on the confirmation page; nothing was written"
        ) from None
    except AppExpiredError:
        raise SetupFailed(
            "the link expired before the app was confirmed; nothing was written (run "
            "larkgate setup again for a new link)"
        ) from None
    except RegisterAppError as exc:
        raise SetupFailed(f"the registration failed: {exc.code}: {exc.description}") from None
    except (OSError, ValueError, KeyError, TypeError, aiohttp.ClientError) as exc:
        # No usable answer from the accounts host: the network, a proxy, a gateway's page.
        host = lark_accounts if switched else start
        raise SetupFailed(
            f"could not reach {urlsplit(host).netloc or host} to register the app "
            f"({type(exc).__name__}: {_short(exc)}); nothing was written"
        ) from None
    finally:
        await session.close()
    user_info = result.get("user_info") or {}
    brand = "lark" if lark or switched or user_info.get("tenant_brand") == "lark" else "feishu"
    return NewApp(
        app_id=str(result["client_id"]),
        app_secret=str(result["client_secret"]),
        brand=brand,
        owner_open_id=str(user_info["open_id"]) if user_info.get("open_id") else None,
    )


async def check_credentials(app: NewApp, domain: str, network: Network | None = None) -> BotInfo:
    """A tenant token for the new app, then its bot's identity; SetupFailed otherwise."""
    config = FeishuConfig(
        app_id=app.app_id,
        app_secret=app.app_secret,
        verification_token="",
        encrypt_key="",
        domain=domain,
    )
    console = f"{_console(domain)}/app/{app.app_id}"
    try:
        async with FeishuClient(config, timeout=10.0, network=network) as client:
            async with asyncio.timeout(CHECK_TIMEOUT):
                await client.tokens.get()
                return await client.bot_info()
    except (FeishuError, TimeoutError, OSError) as exc:
        detail = (str(exc) or type(exc).__name__).replace(app.app_secret, "***")
        raise SetupFailed(
            f"app {app.app_id} was created, but its credentials could not be checked at "
            f"{domain}: {detail}. Nothing was written: copy its App ID and App Secret from "
            f"{console} into the env file, or run larkgate setup again"
        ) from None


def open_domain(brand: str, configured: str) -> str:
    """The open platform of the new app: ``configured`` (FEISHU_DOMAIN) when it names a
    private deployment or a local emulator, else the brand's public one."""
    configured = configured.strip().rstrip("/")
    if configured and configured not in (FEISHU_OPEN, LARK_OPEN):
        return configured
    return LARK_OPEN if brand == "lark" else FEISHU_OPEN


# -- the env file -------------------------------------------------------------------------

_KEY = re.compile(r"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)(\s*=)")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/,@+-]*")


def update_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Set ``values`` in the dotenv file at ``path``: each key's lines rewritten in place,
    new keys added at the end, every other line (comments included) kept as it was. The
    file is replaced at once and left readable by its owner only (0600)."""
    target = Path(os.path.realpath(path))
    try:
        with open(target, encoding="utf-8", newline="") as file:  # line endings as they are
            text = file.read()
    except FileNotFoundError:
        text = ""
    wanted = {key.upper(): (key, value) for key, value in values.items()}
    written: set[str] = set()
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = _KEY.match(line)
        if match is None or match.group(2).upper() not in wanted:
            continue
        key, value = wanted[match.group(2).upper()]
        ending = line[len(line.rstrip("\r\n")) :] or "\n"
        lines[index] = f"{match.group(1)}{key}={_quoted(value)}{ending}"
        written.add(key.upper())
    new = [(key, value) for upper, (key, value) in wanted.items() if upper not in written]
    if new:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        lines.append("# Feishu app (larkgate setup)\n")
        lines.extend(f"{key}={_quoted(value)}\n" for key, value in new)
    _write_private(target, "".join(lines))


def _check_writable(path: Path) -> None:
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise SetupFailed(f"{path} is a directory; --env-file names the file to write")
    if not target.parent.is_dir():
        raise SetupFailed(f"cannot write {path}: {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK) or (
        target.exists() and not os.access(target, os.R_OK | os.W_OK)
    ):
        raise SetupFailed(f"cannot write {path}: permission denied")


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.chmod(path, 0o600)


def _quoted(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _env_values(path: Path) -> dict[str, str]:
    from dotenv import dotenv_values

    if not path.exists():
        return {}
    return {k.upper(): v for k, v in dotenv_values(path).items() if v is not None}


# -- what the person sees -----------------------------------------------------------------


def _show_link(out: TextIO, url: str, expire_in: int, *, lark: bool) -> None:
    import segno

    phone = "the Lark app" if lark else "the Feishu app"
    print(
        f"Scan this code with {phone} (or open the link) to create larkgate's app. "
        f"It works once, for {max(expire_in // 60, 1)} minutes.\n",
        file=out,
    )
    # The link is long (the addons ride in it): the lowest error level and a narrow quiet
    # zone keep the code within a terminal's width.
    segno.make(url, error="l", boost_error=False).terminal(out=out, border=2, compact=True)
    print(f"\n  {url}\n", file=out)
    if lark:
        print("On a phone, open the link in a browser: Lark's own may say it expired.", file=out)
    print("Waiting for the scan… (Ctrl+C stops)", file=out, flush=True)


def next_steps(app: NewApp, domain: str, webhook: str | None, *, model: bool) -> tuple[str, ...]:
    """What is left to do once the env file holds the new app (``model``: the model's
    settings are there already)."""
    console = f"{_console(domain)}/app/{app.app_id}"
    steps = [
        f"Publish a version of the app (Version Management & Release, {console}); a tenant "
        "admin may have to approve it. Its scopes and event work only once published."
    ]
    if webhook:
        steps += [
            "Events & Callbacks → Encryption Strategy: copy the Verification Token into "
            "FEISHU_VERIFICATION_TOKEN, set an Encrypt Key and copy it into FEISHU_ENCRYPT_KEY.",
            "Start larkgate serve where Feishu reaches it, then under Events & Callbacks "
            f"choose 'Send events to developer's server' with {webhook}/feishu/events, and "
            f"set the card callback URL to {webhook}/feishu/card.",
        ]
    else:
        steps.append(
            "Events arrive over the long connection (FEISHU_EVENT_MODE=ws): no public URL "
            "is needed."
        )
    if not model:
        steps.append("Set LLM_BASE_URL and LLM_MODEL (and LLM_API_KEY) for the model.")
    steps.append("Run larkgate serve, then message the bot (or mention it in a group).")
    return tuple(steps)


def _report(out: TextIO, outcome: Outcome) -> None:
    app, values = outcome.app, outcome.values
    print(
        f"\nDone: the bot {outcome.bot.app_name or app.app_id} ({outcome.bot.open_id}) of app "
        f"{app.app_id}; {', '.join(values)} written to {outcome.env_file} (mode 0600).",
        file=out,
    )
    if "LARKGATE_ADMINS" in values:
        print(f"You ({values['LARKGATE_ADMINS']}) are the bot's admin.", file=out)
    print("Left to do:", file=out)
    for number, step in enumerate(outcome.next_steps, 1):
        print(f"  {number}. {step}", file=out)
    out.flush()


def _console(domain: str) -> str:
    return domain.rstrip("/")


def webhook_base(url: str) -> str:
    """``--webhook``: the bot's public base URL (a URL ending in /feishu/events or
    /feishu/card is taken for its base)."""
    import argparse

    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"the bot's public URL, e.g. https://bot.example.com, not {url!r}"
        )
    base = url.strip().rstrip("/")
    for suffix in ("/feishu/events", "/feishu/card"):
        base = base.removesuffix(suffix)
    return base


def _network(ca_bundle: str) -> Network:
    """The proxies of the environment and the CA ``LARKGATE_CA_BUNDLE`` names, checked
    before an app is made."""
    network = Network(ca_bundle=Path(ca_bundle) if ca_bundle.strip() else None)
    try:
        network.check()  # a proxy or a CA file that cannot be used fails here, not later
    except NetworkSettingError as exc:
        raise SetupFailed(f"{exc}; nothing was registered") from None
    return network


def _registration_flow(session: ProxiedSession) -> Any:
    """lark-oapi's registration flow (``aregister_app``'s), its one HTTP call sent over
    ``session``: the SDK's own makes a new httpx client per poll, which knows neither
    ``LARKGATE_CA_BUNDLE`` nor the bot's session (docs/architecture.md, "lark-oapi
    beyond its public API")."""
    from lark_oapi.scene.registration import _ENDPOINT, _AsyncFlow

    class Flow(_AsyncFlow):
        async def _post(self, data: dict[str, Any]) -> Any:
            url = self._base_url + _ENDPOINT
            async with session.post(
                url,
                data=urlencode(data),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ) as response:
                # The action and the URL only: the form carries the device code.
                logger.debug(
                    "registration: %s at %s: HTTP %d", data["action"], url, response.status
                )
                # The SDK reads the JSON whatever the status (an error is a JSON answer).
                return await response.json(content_type=None)

    return Flow


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:200]
