"""Per-user authorisation with Feishu (issue 18): the consent URL, the v2 token endpoint,
and who the user is.

Flow (authorization code with PKCE): the bot sends the user to :func:`authorize_url`;
Feishu redirects the browser to ``redirect_uri?code=&state=``; the callback verifies the
state (:mod:`bot.feishu.oauth_state`), then :meth:`FeishuOAuth.exchange_code` trades the
code for tokens at ``POST /open-apis/authen/v2/oauth/token`` and asks
``GET /open-apis/authen/v1/user_info`` with the new token whose they are, so the caller
can check that the person who consented is the one who asked.

lark-oapi 1.7 has builders for ``authen/v1`` only (the v1 token calls take an app token
and no PKCE), so the v2 token request is a hand-built ``lark.BaseRequest`` without any
access token; user_info uses the SDK's ``GetUserInfoRequest`` with the user token. Both go
through :class:`~bot.feishu.client.FeishuClient`'s pooled transport and error mapping and
are counted in ``call_counts`` (``authen.oauth.token``, ``authen.user_info``) like every
other call, but never with the tenant token and never retried.

Revoking: neither lark-oapi nor our research knows a Feishu endpoint that revokes a user
token (larksuite/openclaw-lark's ``revokeUAT`` only deletes its stored copy), so ``/logout``
deletes ours (``UserTokenStore.delete``); the access token then lapses on its own within
two hours and the refresh token is never used again.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

import lark_oapi as lark
from lark_oapi.api.authen.v1 import GetUserInfoRequest

from bot.oauth_tokens import UserTokens

from .client import FeishuClient
from .config import FeishuConfig
from .errors import FeishuTransportError

AUTHORIZE_PATH = "/open-apis/authen/v1/authorize"
TOKEN_PATH = "/open-apis/authen/v2/oauth/token"
USER_INFO_PATH = "/open-apis/authen/v1/user_info"
# The v2 token endpoint hands out a refresh token only when this scope was granted; without
# it the user would have to consent again every two hours.
OFFLINE_ACCESS = "offline_access"

_ACCOUNTS = {
    "open.feishu.cn": "https://accounts.feishu.cn",
    "open.larksuite.com": "https://accounts.larksuite.com",
}


def accounts_domain(open_domain: str) -> str:
    """Where the consent page is for the OpenAPI domain of ``FEISHU_DOMAIN``.

    Feishu and Lark serve it on their accounts host (``open.`` becomes ``accounts.``, as
    Feishu's own clients derive it); any other domain (the emulator, a proxy) is taken to
    serve it itself.
    """
    split = urllib.parse.urlsplit(open_domain.rstrip("/"))
    host = split.hostname or ""
    if host in _ACCOUNTS:
        return _ACCOUNTS[host]
    if host.startswith("open."):  # e.g. a private deployment's open.<domain>, its port kept
        port = f":{split.port}" if split.port else ""
        return f"{split.scheme}://accounts.{host[len('open.') :]}{port}"
    return open_domain.rstrip("/")


def authorize_url(
    app_id: str,
    redirect_uri: str,
    state: str,
    code_challenge: str,
    scopes: Iterable[str],
    *,
    domain: str = lark.FEISHU_DOMAIN,
) -> str:
    """The consent page a user opens to grant ``scopes`` (PKCE S256; ``offline_access``
    is always asked for, so the grant can be refreshed)."""
    wanted = list(dict.fromkeys([*scopes, OFFLINE_ACCESS]))
    query = {
        "client_id": app_id,
        "response_type": "code",
        "redirect_uri": redirect_uri,
        "scope": " ".join(wanted),
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    }
    return f"{accounts_domain(domain)}{AUTHORIZE_PATH}?{urllib.parse.urlencode(query)}"


class FeishuOAuth:
    """The token calls of one app, over ``client``'s plumbing."""

    def __init__(
        self,
        client: FeishuClient,
        config: FeishuConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._config = config
        self._clock = clock

    def __repr__(self) -> str:
        return f"FeishuOAuth(app_id={self._config.app_id!r})"

    async def exchange_code(
        self, code: str, *, redirect_uri: str, code_verifier: str
    ) -> UserTokens:
        """The tokens a consent's ``code`` is worth, with the open_id of who consented."""
        body = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": code_verifier,
        }
        return await self._tokens(body, open_id=None)

    async def refresh(self, refresh_token: str, *, open_id: str | None = None) -> UserTokens:
        """New tokens for a refresh token (which Feishu then retires: use the new one).

        ``open_id``: whose they are, when the caller knows (saves the user_info call).
        Raises FeishuAuthorizationGone when the user must authorise again.
        """
        body = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        return await self._tokens(body, open_id=open_id, sent_refresh=refresh_token)

    async def user_open_id(self, access_token: str) -> str:
        """The open_id of the user a user access token belongs to."""
        request = GetUserInfoRequest.builder().build()
        option = lark.RequestOption.builder().user_access_token(access_token).build()
        body = await self._send("authen.user_info", request, option)
        data = body.get("data")
        open_id = data.get("open_id") if isinstance(data, dict) else None
        if not isinstance(open_id, str) or not open_id:
            raise self.malformed("authen.user_info", "no open_id in the answer")
        return open_id

    async def _tokens(
        self, grant: dict[str, str], *, open_id: str | None, sent_refresh: str = ""
    ) -> UserTokens:
        now = self._clock()
        body = await self.token_call(grant)
        return await self.tokens_from(body, now=now, open_id=open_id, sent_refresh=sent_refresh)

    async def token_call(
        self,
        grant: dict[str, str],
        *,
        rewrite: Callable[[bytes | None], bytes | None] | None = None,
    ) -> dict[str, Any]:
        """One POST of ``grant`` (plus the app's credentials) to the v2 token endpoint.

        ``rewrite`` reads the raw answer first (the device flow's "not yet" answers are
        RFC 8628 errors it turns into answers); by default an error's description becomes
        its ``msg``.
        """
        credentials = {"client_id": self._config.app_id, "client_secret": self._config.app_secret}
        request = (
            lark.BaseRequest.builder()
            .http_method(lark.HttpMethod.POST)
            .uri(TOKEN_PATH)
            .token_types(set())  # the app authenticates in the body, not with a token
            .body({**grant, **credentials})
            .build()
        )
        return await self.send("authen.oauth.token", request, rewrite=rewrite)

    async def tokens_from(
        self, body: dict[str, Any], *, now: float, open_id: str | None, sent_refresh: str = ""
    ) -> UserTokens:
        """The tokens of a token endpoint's answer (asked at ``now``), with whose they are."""
        access, expires_in = body.get("access_token"), body.get("expires_in")
        if not (isinstance(access, str) and access and isinstance(expires_in, int | float)):
            raise self.malformed("authen.oauth.token", "no access_token/expires_in")
        # A refresh answer without a new refresh token keeps the one sent (larksuite's own
        # openclaw-lark does the same); a code exchange without one means the app lacks
        # offline_access, and a grant that lapses in two hours is not worth storing.
        refresh = body.get("refresh_token") or sent_refresh
        if not isinstance(refresh, str) or not refresh:
            raise self.malformed(
                "authen.oauth.token", "no refresh_token (enable offline_access for the app)"
            )
        expires_at = now + float(expires_in)
        refresh_in = body.get("refresh_token_expires_in")
        # Unknown: assume no longer than the access token; the next refresh finds out.
        refresh_at = now + float(refresh_in) if isinstance(refresh_in, int | float) else expires_at
        return UserTokens(
            open_id=open_id or await self.user_open_id(access),
            access_token=access,
            refresh_token=refresh,
            expires_at=expires_at,
            refresh_expires_at=refresh_at,
            scope=str(body.get("scope") or ""),
        )

    async def send(
        self,
        endpoint: str,
        request: lark.BaseRequest,
        option: lark.RequestOption | None = None,
        *,
        rewrite: Callable[[bytes | None], bytes | None] | None = None,
    ) -> dict[str, Any]:
        """One request of the OAuth flows through the client's plumbing (see ``_send``)."""
        return await self._send(endpoint, request, option or lark.RequestOption(), rewrite)

    @property
    def app_id(self) -> str:
        return self._config.app_id

    def basic_credentials(self) -> str:
        """``Basic base64(app_id:app_secret)``: how the accounts host authenticates the app."""
        pair = f"{self._config.app_id}:{self._config.app_secret}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    async def _send(
        self,
        endpoint: str,
        request: lark.BaseRequest,
        option: lark.RequestOption,
        rewrite: Callable[[bytes | None], bytes | None] | None = None,
    ) -> dict[str, Any]:
        transport = self._client.transport
        read = rewrite or _msg_from_description

        async def send(option: lark.RequestOption) -> Any:
            response = await transport.send_raw_response(request, option)
            response.raw.content = read(response.raw.content)
            return response

        # The client's single attempt: counted, observed and mapped to FeishuError, but
        # with this option instead of the tenant token (and no token-refresh retry).
        _, body = await self._client._send(endpoint, send, option)
        return body

    def malformed(self, endpoint: str, what: str) -> FeishuTransportError:
        """The error of an answer that is not what the endpoint promises (counted)."""
        return self._client._malformed(endpoint, what)


def _msg_from_description(content: bytes | None) -> bytes | None:
    """The v2 token endpoint answers errors the RFC 6749 way, ``error`` (a string) and
    ``error_description``, with no ``msg``: copy the description into ``msg`` so that the
    FeishuError says why, and drop ``error``, which the envelope reads as an object."""
    try:
        body = json.loads(content or b"")
    except ValueError:
        return content
    if not isinstance(body, dict) or body.get("code") in (0, None) or body.get("msg"):
        return content
    body["msg"] = str(body.get("error_description") or body.get("error") or "")
    if not isinstance(body.get("error"), dict):
        body.pop("error", None)
    return json.dumps(body).encode()
