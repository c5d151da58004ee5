"""Per-user authorisation (issue 18): Feishu's consent page, the v2 token endpoint and
user_info, so the OAuth code runs over HTTP against something that refuses what Feishu does.

    GET  /open-apis/authen/v1/authorize     no page to click: answers 302 to ``redirect_uri``
         with ``code`` and ``state``, consenting as ``consent_as(open_id)`` (default
         ou_fake_alice) or the ``as_user`` query parameter; ``deny=1`` redirects with
         ``error=access_denied`` instead. A wrong ``client_id`` or a challenge method other
         than S256 is a plain HTTP 400.
    POST /open-apis/authen/v2/oauth/token   flat ``{code: 0, access_token, expires_in,
         refresh_token, refresh_token_expires_in, scope, token_type}``; errors are HTTP 400
         ``{code, error, error_description}`` (RFC 6749 style, no ``msg``). A code is good
         once, for ``code_ttl`` seconds, with its redirect_uri and the PKCE verifier of its
         challenge. A refresh rotates: the old refresh token then answers 20073 (with
         ``rotate_refresh_tokens = False`` it answers without a new refresh token instead).
    GET  /open-apis/authen/v1/user_info     with a user token: ``data.open_id``, name, ...;
         missing 99991661, unknown or revoked 99991668, expired 99991677.

Refresh-token codes 20026 (unknown), 20037 (expired), 20064 (revoked), 20073 (used) are the
ones larksuite/openclaw-lark names (research/feishu-bots.md). The authorisation-code codes
below are Feishu's v2 token docs as we remember them, not verified against a captured
answer: bot.feishu.errors does not map them, so the client raises a plain FeishuError.

The device authorization grant (no redirect; module ``device``) shares the token endpoint.

Test controls: ``consent_as``, ``withheld_scopes`` (left out of every consent),
``expire_user_tokens(open_id)`` (access tokens lapse), ``expire_refresh_tokens(open_id)``,
``revoke_user_grant(open_id)`` (both die), ``user_grants``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .core import EmulatorCore
from .device import DEVICE_GRANT, DeviceApi, DeviceRefused, device_error
from .identity import bearer
from .wire import FakeError, parse_json

AUTHORIZE_PATH = "/open-apis/authen/v1/authorize"
USER_TOKEN_PATH = "/open-apis/authen/v2/oauth/token"
USER_INFO_PATH = "/open-apis/authen/v1/user_info"
OAUTH_PUBLIC_PATHS = frozenset({AUTHORIZE_PATH, USER_TOKEN_PATH, USER_INFO_PATH})

# Unverified (see the module docstring).
CODE_BAD_CLIENT = 20002
CODE_UNKNOWN = 20003
CODE_EXPIRED = 20004
CODE_PKCE_MISMATCH = 20049
CODE_USED = 20065
CODE_REDIRECT_MISMATCH = 20071
# Named by larksuite/openclaw-lark (and mapped in bot.feishu.errors).
REFRESH_INVALID, REFRESH_EXPIRED, REFRESH_REVOKED, REFRESH_USED = 20026, 20037, 20064, 20073


@dataclass
class FakeCode:
    open_id: str
    redirect_uri: str
    scope: str
    challenge: str
    expires_at: float
    used: bool = False


@dataclass(eq=False)  # compared by identity: two grants with equal fields are two grants
class FakeUserGrant:
    """One live token pair; ``refresh_used`` once it was rotated away."""

    open_id: str
    scope: str
    access_expires_at: float
    refresh_expires_at: float
    refresh_used: bool = False
    revoked: bool = False


class OAuthApi(DeviceApi, EmulatorCore):
    def _init_oauth(self) -> None:
        self._init_device()
        self.consenting_user = "ou_fake_alice"
        self.code_ttl = 300.0
        self.user_token_ttl = 7200.0
        self.refresh_token_ttl = 30 * 86400.0
        # False: a refresh answers without refresh_token(_expires_in), the old one stays
        # good (Feishu's own clients handle such answers).
        self.rotate_refresh_tokens = True
        # Scopes a consent leaves out whatever was asked (the app may not ask for them).
        self.withheld_scopes: set[str] = set()
        self.oauth_codes: dict[str, FakeCode] = {}
        # Keyed by both tokens of a pair: the access token and the refresh token.
        self.user_grants: dict[str, FakeUserGrant] = {}
        self._refresh_grants: dict[str, FakeUserGrant] = {}
        self._public_paths.update(OAUTH_PUBLIC_PATHS)

    def _oauth_routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("GET", AUTHORIZE_PATH, self._authorize),
            ("POST", USER_TOKEN_PATH, self._user_token),
            ("GET", USER_INFO_PATH, self._user_info),
            *self._device_routes(),
        ]

    # -- test controls ----------------------------------------------------------------

    def consent_as(self, open_id: str) -> None:
        """Who consents on the next authorize requests."""
        self.consenting_user = open_id

    def expire_user_tokens(self, open_id: str) -> None:
        for grant in self._grants_of(open_id):
            grant.access_expires_at = 0.0

    def expire_refresh_tokens(self, open_id: str) -> None:
        for grant in self._grants_of(open_id):
            grant.refresh_expires_at = 0.0

    def revoke_user_grant(self, open_id: str) -> None:
        for grant in self._grants_of(open_id):
            grant.revoked = True

    def _grants_of(self, open_id: str) -> list[FakeUserGrant]:
        return [g for g in self._refresh_grants.values() if g.open_id == open_id]

    # -- handlers ---------------------------------------------------------------------

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != self.app_id or query.get("response_type") != "code":
            raise web.HTTPBadRequest(text="unknown client_id or response_type")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            raise web.HTTPBadRequest(text="code_challenge with method S256 required")
        redirect_uri = query.get("redirect_uri", "")
        back: dict[str, str] = {"state": query.get("state", "")}
        if query.get("deny") == "1":
            back["error"] = "access_denied"
        else:
            code = "fake-code-" + secrets.token_urlsafe(12)
            self.oauth_codes[code] = FakeCode(
                open_id=query.get("as_user") or self.consenting_user,
                redirect_uri=redirect_uri,
                scope=" ".join(
                    s for s in query.get("scope", "").split() if s not in self.withheld_scopes
                ),
                challenge=query["code_challenge"],
                expires_at=time.time() + self.code_ttl,
            )
            back["code"] = code
        separator = "&" if "?" in redirect_uri else "?"
        raise web.HTTPFound(f"{redirect_uri}{separator}{urllib.parse.urlencode(back)}")

    async def _user_token(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        if not isinstance(body, dict):
            return _oauth_error(20001, "invalid_request", "the body is not a JSON object")
        if body.get("client_id") != self.app_id or body.get("client_secret") != self.app_secret:
            return _oauth_error(CODE_BAD_CLIENT, "invalid_client", "client authentication failed")
        try:
            if body.get("grant_type") == "authorization_code":
                grant = self._redeem_code(body)
            elif body.get("grant_type") == "refresh_token":
                grant = self._rotate(str(body.get("refresh_token") or ""))
            elif body.get("grant_type") == DEVICE_GRANT:
                open_id, scope = self._redeem_device(body)
                grant = FakeUserGrant(open_id, scope, 0.0, 0.0)
            else:
                return _oauth_error(20001, "unsupported_grant_type", "unknown grant_type")
        except _Refused as refused:
            return _oauth_error(refused.code, refused.error, refused.description)
        except DeviceRefused as refused:
            return device_error(refused)
        return self._issue(grant)

    def _redeem_code(self, body: dict[str, Any]) -> FakeUserGrant:
        code = self.oauth_codes.get(str(body.get("code") or ""))
        if code is None:
            raise _Refused(CODE_UNKNOWN, "invalid_grant", "the authorization code is invalid")
        if code.used:
            raise _Refused(CODE_USED, "invalid_grant", "the authorization code was already used")
        if code.expires_at <= time.time():
            raise _Refused(CODE_EXPIRED, "invalid_grant", "the authorization code expired")
        if body.get("redirect_uri") != code.redirect_uri:
            raise _Refused(CODE_REDIRECT_MISMATCH, "invalid_grant", "redirect_uri mismatch")
        if _s256(str(body.get("code_verifier") or "")) != code.challenge:
            raise _Refused(CODE_PKCE_MISMATCH, "invalid_grant", "code_verifier mismatch")
        code.used = True
        return FakeUserGrant(code.open_id, code.scope, 0.0, 0.0)

    def _rotate(self, refresh_token: str) -> FakeUserGrant:
        old = self._refresh_grants.get(refresh_token)
        if old is None:
            raise _Refused(REFRESH_INVALID, "invalid_grant", "the refresh token is invalid")
        if old.revoked:
            raise _Refused(REFRESH_REVOKED, "invalid_grant", "the refresh token was revoked")
        if old.refresh_used:
            raise _Refused(REFRESH_USED, "invalid_grant", "the refresh token was already used")
        if old.refresh_expires_at <= time.time():
            raise _Refused(REFRESH_EXPIRED, "invalid_grant", "the refresh token expired")
        if not self.rotate_refresh_tokens:
            return old
        old.refresh_used = True
        return FakeUserGrant(old.open_id, old.scope, 0.0, 0.0)

    def _issue(self, grant: FakeUserGrant) -> web.Response:
        now = time.time()
        rotating = all(known is not grant for known in self._refresh_grants.values())
        grant.access_expires_at = now + self.user_token_ttl
        access = "u-" + secrets.token_hex(16)
        self.user_grants[access] = grant
        answer: dict[str, Any] = {
            "code": 0,
            "access_token": access,
            "expires_in": int(self.user_token_ttl),
            "scope": grant.scope,
            "token_type": "Bearer",
        }
        if rotating:
            grant.refresh_expires_at = now + self.refresh_token_ttl
            refresh = "ur-" + secrets.token_hex(16)
            self._refresh_grants[refresh] = grant
            answer |= {
                "refresh_token": refresh,
                "refresh_token_expires_in": int(self.refresh_token_ttl),
            }
        return web.json_response(answer)

    async def _user_info(self, request: web.Request) -> web.Response:
        grant = self._live_grant(bearer(request))
        user = self.workspace.users.get(grant.open_id)
        name = user.name if user is not None else grant.open_id
        return self._ok(
            {"open_id": grant.open_id, "name": name, "en_name": name, "tenant_key": "fake_tenant"}
        )

    def _live_grant(self, token: str) -> FakeUserGrant:
        """The grant of a user access token still good: 99991668 for an unknown or revoked
        one, 99991677 once it expired."""
        grant = self.user_grants.get(token)
        if grant is None or grant.revoked:
            raise FakeError(99991668)
        if grant.access_expires_at <= time.time():
            raise FakeError(99991677, "user access token expired")
        return grant


class _Refused(Exception):
    def __init__(self, code: int, error: str, description: str) -> None:
        super().__init__(description)
        self.code, self.error, self.description = code, error, description


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _oauth_error(code: int, error: str, description: str) -> web.Response:
    body = {"code": code, "error": error, "error_description": description}
    return web.json_response(body, status=400)
