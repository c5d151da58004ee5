"""One-scan app registration (``larkgate setup``): the accounts host's device flow that
creates an app, as lark-oapi's ``lark_oapi.scene.registration`` speaks it
(research/anchors-2026.md §3).

    POST /oauth/v1/app/registration        the Feishu accounts host (``accounts_url``)
    POST /lark/oauth/v1/app/registration   the Lark accounts host (``lark_accounts_url``)

Form bodies, no credentials; every answer is flat JSON, and the waiting states come back
as HTTP 400 with a JSON body, as the real host answers them.

    action=init    ``supported_auth_methods`` (``registration_auth_methods``)
    action=begin   archetype PersonalAgent, auth_method client_secret: ``device_code``,
                   ``user_code``, ``verification_uri_complete`` (this domain's
                   ``/page/launcher?user_code=…``), ``interval`` (``registration_interval``),
                   ``expires_in`` (``registration_ttl``); anything else ``invalid_request``
    action=poll    ``device_code``: the next step of ``registration_script`` on the host
                   that is polled

Script steps (``script_registration(*steps)``; with no script left a poll is pending until
someone opens the launcher page, ``GET /page/launcher?user_code=…``, then a success):

    "pending"    ``authorization_pending`` (code 20094)
    "slow_down"  ``slow_down``
    "denied"     ``access_denied``
    "expired"    ``expired_token``
    "lark"       the tenant is a Lark one: ``user_info.tenant_brand = "lark"`` and no app.
                 From then on the Feishu host answers only that, and only the Lark host's
                 polls go on with the script (the client must switch hosts)
    "success"    a new app: ``client_id`` (cli_…), ``client_secret``, ``user_info``
                 (``open_id`` = ``registration_open_id``, ``tenant_brand``). The app is in
                 ``registered_apps`` and the token endpoint accepts it.

A poll with an unknown device code answers ``invalid_grant``; after an end (denied,
expired, success) the code is spent (``invalid_grant`` too). Inspection:
``registrations`` (:class:`FakeRegistration`: what begin was asked, each poll's host and
answer, the app made).
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .core import EmulatorCore

REGISTRATION_PATH = "/oauth/v1/app/registration"
LARK_PREFIX = "/lark"
LAUNCHER_PATH = "/page/launcher"
STEPS = ("pending", "slow_down", "denied", "expired", "lark", "success")

_ERRORS = {
    "pending": ("authorization_pending", "the user has not scanned yet"),
    "slow_down": ("slow_down", "polling too fast"),
    "denied": ("access_denied", "the user refused"),
    "expired": ("expired_token", "the registration expired"),
}


@dataclass
class FakeRegistration:
    device_code: str
    user_code: str
    begin: dict[str, str]
    expires_at: float
    brand: str = "feishu"  # the host begun on, "lark" after the lark step
    scanned: bool = False
    done: bool = False
    app_id: str | None = None
    polls: list[tuple[str, str]] = field(default_factory=list)  # (host, step answered)


class RegistrationApi(EmulatorCore):
    def _init_registration(self) -> None:
        self.registration_auth_methods = ["client_secret"]
        self.registration_interval = 5
        self.registration_ttl = 600
        self.registration_open_id = "ou_fake_alice"
        self.registration_script: list[str] = []
        self.registrations: list[FakeRegistration] = []
        self._public_paths.update(
            {REGISTRATION_PATH, LARK_PREFIX + REGISTRATION_PATH, LAUNCHER_PATH}
        )

    def _registration_routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", REGISTRATION_PATH, self._register_feishu),
            ("POST", LARK_PREFIX + REGISTRATION_PATH, self._register_lark),
            ("GET", LAUNCHER_PATH, self._launcher),
        ]

    # -- test controls ----------------------------------------------------------------

    @property
    def accounts_url(self) -> str:
        """The Feishu accounts host of this emulator (``FEISHU_ACCOUNTS_URL``)."""
        return self.domain  # type: ignore[attr-defined]  # FakeFeishu's

    @property
    def lark_accounts_url(self) -> str:
        """The Lark accounts host of this emulator (``LARK_ACCOUNTS_URL``)."""
        return self.accounts_url + LARK_PREFIX

    def script_registration(self, *steps: str) -> None:
        unknown = [s for s in steps if s not in STEPS]
        if unknown:
            raise ValueError(f"unknown registration steps {unknown}; known: {STEPS}")
        self.registration_script = list(steps)

    # -- handlers ---------------------------------------------------------------------

    async def _register_feishu(self, request: web.Request) -> web.Response:
        return await self._registration(request, "feishu")

    async def _register_lark(self, request: web.Request) -> web.Response:
        return await self._registration(request, "lark")

    async def _registration(self, request: web.Request, host: str) -> web.Response:
        fields = dict(urllib.parse.parse_qsl((await request.read()).decode("utf-8", "replace")))
        action = fields.get("action")
        if action == "init":
            return web.json_response({"supported_auth_methods": self.registration_auth_methods})
        if action == "begin":
            return self._begin(request, fields, host)
        if action == "poll":
            return self._poll(fields.get("device_code", ""), host)
        return _refusal("invalid_request", f"unknown action {action!r}")

    def _begin(self, request: web.Request, fields: dict[str, str], host: str) -> web.Response:
        if fields.get("archetype") != "PersonalAgent" or fields.get("auth_method") not in (
            self.registration_auth_methods
        ):
            return _refusal("invalid_request", "unsupported archetype or auth_method")
        user_code = f"{secrets.token_hex(2).upper()}-{secrets.token_hex(2).upper()}"
        registration = FakeRegistration(
            device_code="rdc-" + secrets.token_urlsafe(18),
            user_code=user_code,
            begin=fields,
            expires_at=time.monotonic() + self.registration_ttl,
            brand=host,
        )
        self.registrations.append(registration)
        page = f"{request.scheme}://{request.host}{LAUNCHER_PATH}?user_code={user_code}"
        return web.json_response(
            {
                "device_code": registration.device_code,
                "user_code": user_code,
                "verification_uri": f"{request.scheme}://{request.host}{LAUNCHER_PATH}",
                "verification_uri_complete": page,
                "interval": self.registration_interval,
                "expires_in": self.registration_ttl,
            }
        )

    def _poll(self, device_code: str, host: str) -> web.Response:
        registration = next(
            (r for r in self.registrations if r.device_code == device_code and not r.done), None
        )
        if registration is None:
            return _refusal("invalid_grant", "unknown or spent device_code")
        if registration.brand == "lark" and host == "feishu":
            registration.polls.append((host, "lark"))
            return _lark_hint()
        if registration.brand != host:
            return _refusal("invalid_grant", "unknown device_code on this host")
        if time.monotonic() > registration.expires_at:
            step = "expired"
        elif self.registration_script:
            step = self.registration_script.pop(0)
        else:
            step = "success" if registration.scanned else "pending"
        registration.polls.append((host, step))
        if step == "lark":
            registration.brand = "lark"
            return _lark_hint()
        if step == "success":
            return self._created(registration)
        if step in ("denied", "expired"):
            registration.done = True
        error, description = _ERRORS[step]
        return _refusal(error, description)

    def _created(self, registration: FakeRegistration) -> web.Response:
        registration.done = True
        app_id = "cli_" + secrets.token_hex(8)
        secret = secrets.token_urlsafe(24)
        self.registered_apps[app_id] = secret
        registration.app_id = app_id
        user_info = {"open_id": self.registration_open_id, "tenant_brand": registration.brand}
        return web.json_response(
            {"client_id": app_id, "client_secret": secret, "user_info": user_info}
        )

    async def _launcher(self, request: web.Request) -> web.Response:
        code = request.query.get("user_code", "")
        for registration in self.registrations:
            if registration.user_code == code and not registration.done:
                registration.scanned = True
                page = "<p>App created. Go back to the terminal.</p>"
                return web.Response(text=page, content_type="text/html")
        return web.Response(status=404, text="unknown code", content_type="text/plain")


def _refusal(error: str, description: str) -> web.Response:
    body: dict[str, Any] = {"error": error, "error_description": description}
    if error == "authorization_pending":
        body["code"] = 20094
    return web.json_response(body, status=400)


def _lark_hint() -> web.Response:
    body = {"error": "authorization_pending", "user_info": {"tenant_brand": "lark"}}
    return web.json_response(body, status=400)
