"""Per-user authorisation without a public URL: Feishu's device authorization grant (RFC 8628).

Where no browser can be sent back to the bot (the long connection's usual deployment),
the bot asks Feishu's accounts host for a device code (``POST /oauth/v1/device_authorization``,
the app authenticating with HTTP Basic, the scopes in a form), shows the person the
verification page (``verification_uri_complete``) and the user code, and asks the v2 token
endpoint every ``interval`` seconds (``grant_type=urn:ietf:params:oauth:grant-type:device_code``)
until the person agrees, refuses, or the code expires.

The evidence (no Feishu doc page was at hand): larksuite's own OpenClaw plugin
(``src/core/device-flow.js``, ByteDance's copyright) calls exactly these two endpoints this
way, reads ``device_code``, ``user_code``, ``verification_uri(_complete)``, ``expires_in``
(240 s when absent) and ``interval`` (5 s), and treats the token endpoint's RFC 8628
errors ``authorization_pending`` (keep polling), ``slow_down`` (add 5 s), ``access_denied``
and ``expired_token``/``invalid_grant`` (give up); several other clients do the same.
Those answers may come without Feishu's ``code`` or inside ``data``: both are read here.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import lark_oapi as lark

from bot.oauth_tokens import UserTokens

from .oauth import OFFLINE_ACCESS, FeishuOAuth, accounts_domain

DEVICE_AUTHORIZATION_PATH = "/oauth/v1/device_authorization"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# RFC 8628 §3.5: "not yet" answers, and the ones that end the flow.
_WAITING = ("authorization_pending", "slow_down")
_ENDED = {"access_denied": "denied", "expired_token": "expired", "invalid_grant": "expired"}
DEFAULT_EXPIRES_IN = 240.0
DEFAULT_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class DeviceAuthorization:
    """What the person is shown (the page and the code) and what the bot polls with."""

    device_code: str = field(repr=False)  # a bearer secret until it is redeemed
    user_code: str
    verification_url: str
    expires_in: float
    interval: float


@dataclass(frozen=True, slots=True)
class DevicePending:
    """Not yet: ask again after ``interval`` (``slow_down``: Feishu asked for 5 s more)."""

    slow_down: bool = False


class DeviceFlowEnded(Exception):
    """The person refused (``denied``) or the code ran out (``expired``)."""

    def __init__(self, reason: Literal["denied", "expired"], detail: str = "") -> None:
        super().__init__(f"device authorization {reason}" + (f": {detail}" if detail else ""))
        self.reason = reason


class FeishuDeviceFlow:
    def __init__(self, oauth: FeishuOAuth, *, domain: str) -> None:
        self._oauth = oauth
        self._url = accounts_domain(domain) + DEVICE_AUTHORIZATION_PATH

    async def start(self, scopes: Iterable[str]) -> DeviceAuthorization:
        """A device code for ``scopes`` (``offline_access`` is always asked too)."""
        wanted = " ".join(dict.fromkeys([*scopes, OFFLINE_ACCESS]))
        request = (
            lark.BaseRequest.builder()
            .http_method(lark.HttpMethod.POST)
            .uri(self._url)
            .token_types(set())
            .headers(
                {
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Authorization": self._oauth.basic_credentials(),
                }
            )
            .body({"client_id": self._oauth.app_id, "scope": wanted})
            .build()
        )
        body = await self._oauth.send("authen.device_authorization", request, rewrite=_flat)
        device_code, url = body.get("device_code"), _verification_url(body)
        if not (isinstance(device_code, str) and device_code and url):
            raise self._oauth.malformed(
                "authen.device_authorization", "no device_code or verification URL"
            )
        return DeviceAuthorization(
            device_code=device_code,
            user_code=str(body.get("user_code") or ""),
            verification_url=url,
            expires_in=_seconds(body.get("expires_in"), DEFAULT_EXPIRES_IN),
            interval=_seconds(body.get("interval"), DEFAULT_INTERVAL),
        )

    async def poll(self, device_code: str, *, now: float) -> UserTokens | DevicePending:
        """The tokens once the person agreed; DevicePending until then.

        Raises DeviceFlowEnded when they refused or the code expired, and FeishuError for
        anything else Feishu refuses.
        """
        grant = {"grant_type": DEVICE_GRANT, "device_code": device_code}
        body = await self._oauth.token_call(grant, rewrite=_device_answer)
        status = body.get("device_status")
        if status in _WAITING:
            return DevicePending(slow_down=status == "slow_down")
        if isinstance(status, str) and status in _ENDED:
            reason: Literal["denied", "expired"] = (
                "denied" if _ENDED[status] == "denied" else "expired"
            )
            raise DeviceFlowEnded(reason, str(body.get("msg") or ""))
        return await self._oauth.tokens_from(body, now=now, open_id=None)


def _verification_url(body: dict[str, Any]) -> str:
    for key in ("verification_uri_complete", "verification_url", "verification_uri"):
        value = body.get(key)
        if isinstance(value, str) and urllib.parse.urlsplit(value).scheme in ("https", "http"):
            return value
    return ""


def _seconds(value: object, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return default


def _load(content: bytes | None) -> Any:
    try:
        return json.loads(content or b"")
    except ValueError:
        return None


def _flat(content: bytes | None) -> bytes | None:
    """An accounts-host answer as the envelope reads one: ``data`` unwrapped, and a
    ``code`` added when the answer has none (an RFC-style error keeps its description)."""
    body = _load(content)
    if not isinstance(body, dict):
        return content
    data = body.get("data")
    flat = {**body, **data} if isinstance(data, dict) else dict(body)
    error = flat.get("error")
    if isinstance(error, str) and error:
        code = flat.get("code") if isinstance(flat.get("code"), int) and flat["code"] else 20001
        return json.dumps(
            {"code": code, "msg": str(flat.get("error_description") or error)}
        ).encode()
    flat.setdefault("code", 0)
    return json.dumps(flat).encode()


def _device_answer(content: bytes | None) -> bytes | None:
    """The token endpoint's answer to a device-code poll: RFC 8628's status errors become
    ``{"code": 0, "device_status": …}`` (expected answers, not failures to log), the rest
    is read like any other token answer."""
    body = _load(content)
    if isinstance(body, dict):
        data = body.get("data")
        flat = {**body, **data} if isinstance(data, dict) else dict(body)
        error = flat.get("error")
        if isinstance(error, str) and (error in _WAITING or error in _ENDED):
            detail = str(flat.get("error_description") or "")
            return json.dumps({"code": 0, "device_status": error, "msg": detail}).encode()
        if "access_token" in flat and not flat.get("error"):
            flat["code"] = 0
            return json.dumps(flat).encode()
    return _flat(content)
