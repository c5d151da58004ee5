"""Feishu's device authorization grant (RFC 8628), as ``bot.feishu.oauth_device`` meets it.

    POST /oauth/v1/device_authorization   the app in HTTP Basic (``app_id:app_secret``) or
         ``client_id``/``client_secret`` in the body (form or JSON); ``scope``. Answers flat,
         without Feishu's ``code``: ``device_code``, ``user_code``, ``verification_uri``,
         ``verification_uri_complete``, ``expires_in`` (``device_ttl``), ``interval``
         (``device_interval``). A wrong client is HTTP 401 ``{"error": "invalid_client"}``.
    GET  /oauth/v1/device/verify?user_code=   the page a person opens: no form to fill, it
         consents as ``as_user`` or ``consent_as(open_id)``'s person (``deny=1`` refuses),
         and answers a small HTML page.
    POST /open-apis/authen/v2/oauth/token with ``grant_type`` =
         ``urn:ietf:params:oauth:grant-type:device_code``: RFC 8628 §3.5 errors, HTTP 400
         without ``code``: ``authorization_pending`` until someone consents, ``slow_down``
         when polled sooner than ``interval`` after the last poll (with
         ``device_enforce_interval``), ``access_denied``, ``expired_token``, and
         ``invalid_grant`` for an unknown or already redeemed code; then the same token
         answer as a code exchange (one redemption per device code).

Test controls: ``approve_device(user_code, as_user)``, ``deny_device(user_code)``,
``device_codes`` (by device code), ``device_ttl``, ``device_interval``.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .core import EmulatorCore
from .wire import parse_json

DEVICE_AUTHORIZATION_PATH = "/oauth/v1/device_authorization"
DEVICE_VERIFY_PATH = "/oauth/v1/device/verify"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@dataclass
class FakeDeviceCode:
    device_code: str
    user_code: str
    scope: str
    expires_at: float
    interval: float
    consented_by: str | None = None
    denied: bool = False
    redeemed: bool = False
    last_poll: float = 0.0


class DeviceRefused(Exception):
    """An RFC 8628 error answer of the token endpoint."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error, self.description = error, description


class DeviceApi(EmulatorCore):
    consenting_user: str

    def _init_device(self) -> None:
        self.device_ttl = 240.0
        self.device_interval = 5.0
        self.device_enforce_interval = False
        self.device_codes: dict[str, FakeDeviceCode] = {}
        self._public_paths.update({DEVICE_AUTHORIZATION_PATH, DEVICE_VERIFY_PATH})

    def _device_routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", DEVICE_AUTHORIZATION_PATH, self._device_authorization),
            ("GET", DEVICE_VERIFY_PATH, self._device_verify),
        ]

    # -- test controls ----------------------------------------------------------------

    def approve_device(self, user_code: str, as_user: str | None = None) -> None:
        self._by_user_code(user_code).consented_by = as_user or self.consenting_user

    def deny_device(self, user_code: str) -> None:
        self._by_user_code(user_code).denied = True

    def _by_user_code(self, user_code: str) -> FakeDeviceCode:
        for code in self.device_codes.values():
            if code.user_code == user_code:
                return code
        raise KeyError(user_code)

    # -- handlers ---------------------------------------------------------------------

    async def _device_authorization(self, request: web.Request) -> web.Response:
        fields = await _fields(request)
        client_id, secret = _basic(request.headers.get("Authorization", ""))
        client_id = client_id or fields.get("client_id", "")
        secret = secret or fields.get("client_secret", "")
        if client_id != self.app_id or secret != self.app_secret:
            body = {"error": "invalid_client", "error_description": "client authentication failed"}
            return web.json_response(body, status=401)
        user_code = f"{secrets.token_hex(2).upper()}-{secrets.token_hex(2).upper()}"
        code = FakeDeviceCode(
            device_code="dc-" + secrets.token_urlsafe(16),
            user_code=user_code,
            scope=fields.get("scope", ""),
            expires_at=time.time() + self.device_ttl,
            interval=self.device_interval,
        )
        self.device_codes[code.device_code] = code
        page = f"{request.scheme}://{request.host}{DEVICE_VERIFY_PATH}"
        return web.json_response(
            {
                "device_code": code.device_code,
                "user_code": user_code,
                "verification_uri": page,
                "verification_uri_complete": f"{page}?user_code={user_code}",
                "expires_in": self.device_ttl,
                "interval": self.device_interval,
            }
        )

    async def _device_verify(self, request: web.Request) -> web.Response:
        try:
            code = self._by_user_code(request.query.get("user_code", ""))
        except KeyError:
            return web.Response(status=404, text="unknown code", content_type="text/plain")
        if request.query.get("deny") == "1":
            code.denied = True
            return web.Response(text="<p>Refused.</p>", content_type="text/html")
        code.consented_by = request.query.get("as_user") or self.consenting_user
        page = "<p>Authorised. You may close this page.</p>"
        return web.Response(text=page, content_type="text/html")

    def _redeem_device(self, body: dict[str, Any]) -> tuple[str, str]:
        """(open_id, scope) of a consented device code; DeviceRefused otherwise."""
        code = self.device_codes.get(str(body.get("device_code") or ""))
        if code is None or code.redeemed:
            raise DeviceRefused("invalid_grant", "the device code is invalid or was used")
        now = time.time()
        if code.expires_at <= now:
            raise DeviceRefused("expired_token", "the device code expired")
        if code.denied:
            raise DeviceRefused("access_denied", "the user refused")
        too_soon = now - code.last_poll < code.interval * 0.9
        code.last_poll = now
        if code.consented_by is None:
            if self.device_enforce_interval and too_soon:
                raise DeviceRefused("slow_down", "polling too fast")
            raise DeviceRefused("authorization_pending", "the user has not answered yet")
        code.redeemed = True
        return code.consented_by, code.scope


def device_error(refused: DeviceRefused) -> web.Response:
    body = {"error": refused.error, "error_description": refused.description}
    return web.json_response(body, status=400)


async def _fields(request: web.Request) -> dict[str, str]:
    raw = await request.read()
    if request.content_type == "application/x-www-form-urlencoded":
        return dict(urllib.parse.parse_qsl(raw.decode("utf-8", "replace")))
    body = parse_json(raw)
    return {str(k): str(v) for k, v in body.items()} if isinstance(body, dict) else {}


def _basic(header: str) -> tuple[str, str]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return "", ""
    try:
        pair = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    client_id, _, secret = pair.partition(":")
    return client_id, secret
