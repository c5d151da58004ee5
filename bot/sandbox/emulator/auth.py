"""Auth and app info: tenant access tokens (issued, reissued, revoked, checked), the bot's
info and the app's granted scopes."""

from __future__ import annotations

import re
import secrets
import time

from aiohttp import web

from .core import TOKEN_PATH, EmulatorCore
from .wire import FakeError, request_body


class AuthApi(EmulatorCore):
    async def _tenant_token(self, request: web.Request) -> web.Response:
        body = request_body(request)
        app_id = str(body.get("app_id"))
        secret = self.app_secret if app_id == self.app_id else self.registered_apps.get(app_id)
        if app_id in self.apps:
            secret = self.apps[app_id].app_secret
        if secret is None:
            raise FakeError(10003)
        if body.get("app_secret") != secret:
            raise FakeError(10014)
        now = time.monotonic()
        token = self._current_tokens.get(app_id)
        left = self._tokens.get(token, 0.0) - now if token else 0.0
        if token is None or left < self.token_reissue_below:
            token = "t-" + secrets.token_hex(16)
            self._tokens[token] = now + self.token_ttl
            self._token_apps[token] = app_id
            self._current_tokens[app_id] = token
            left = self.token_ttl
        # Flat body: no "data" envelope on this endpoint.
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": int(left)}
        )

    def _tenant_token_valid(self, token: str) -> bool:
        expiry = self._tokens.get(token)
        return expiry is not None and expiry > time.monotonic()

    def revoke_tokens(self) -> None:
        """Invalidate every token issued so far; they now answer 99991663."""
        self._tokens.clear()
        self._token_apps.clear()
        self._current_tokens.clear()

    @property
    def token_requests(self) -> int:
        return self.count("POST", re.escape(TOKEN_PATH))

    async def _bot_info(self, request: web.Request) -> web.Response:
        other = self.apps.get(self.calling_app_id)
        bot = {
            "activate_status": 2,
            "app_name": self.bot_name if other is None else other.bot_name,
            "avatar_url": "https://example.invalid/avatar.png",
            "ip_white_list": [],
            "open_id": self.bot_open_id if other is None else other.bot_open_id,
        }
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    async def _app_scopes(self, request: web.Request) -> web.Response:
        scopes = [
            {"scope_name": name, "grant_status": 1, "scope_type": "tenant"}
            for name in self.granted_scopes
        ]
        return self._ok({"scopes": scopes})
