"""The OAuth ``state`` and PKCE of per-user authorisation (issue 18), without any storage.

``state`` travels through the user's browser to Feishu and back to our callback, so it must
say, unforgeably, who asked and where: it is ``<payload>.<mac>``, both url-safe base64, the
payload ``{"u": open_id, "c": chat_id, "n": nonce, "e": expiry}`` and the mac HMAC-SHA256
under a key derived from a secret of ours with a label of its own (the same secret may key
other things; the label keeps a MAC made for one use from verifying as another).

PKCE (RFC 7636, S256): the code verifier is derived from the state's nonce with the same
key, so any replica can recompute it at the callback and nothing is stored between the
``/login`` card and the callback; it never travels through the browser, only its challenge.

A state verifies for as long as it has not expired; that it is used once is the caller's
to enforce with the shared replay guard: :func:`first_use` keys it by the nonce.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

_STATE_LABEL = b"larkgate/oauth-state/v1"
_VERIFIER_LABEL = b"larkgate/oauth-pkce/v1"
# RFC 7636 §4.1: 43-128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~".
_VERIFIER = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")
# A state is a URL query parameter: refuse anything long before parsing it.
_MAX_STATE_CHARS = 1024


class StateError(ValueError):
    """The state is refused; ``reason`` is ``malformed``, ``forged``, ``expired`` or
    ``wrong_user``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"OAuth state refused: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StateClaims:
    open_id: str
    chat_id: str
    nonce: str
    expires_at: int


@dataclass(frozen=True, slots=True)
class IssuedState:
    """What the authorisation card needs: ``state`` and ``code_challenge`` go in the URL."""

    state: str
    claims: StateClaims
    code_challenge: str


class SightingGuard(Protocol):
    """The replay guard's one method (bot.store.replays.ReplayGuard has it)."""

    async def first_sighting(self, key: str, *, remember_seconds: float) -> bool: ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise StateError("malformed")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise StateError("malformed") from None


def code_challenge(verifier: str) -> str:
    """The S256 challenge of ``verifier`` (RFC 7636 §4.2)."""
    if not _VERIFIER.match(verifier):
        raise ValueError("a PKCE code verifier is 43-128 unreserved characters")
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


class StateSigner:
    """Issues and verifies states under ``secret`` (LARKGATE_TOKEN_KEY, or the app secret)."""

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else secret
        if not raw:
            raise ValueError("the OAuth state needs a non-empty secret")
        self._key = hmac.new(raw, _STATE_LABEL, hashlib.sha256).digest()
        self._verifier_key = hmac.new(raw, _VERIFIER_LABEL, hashlib.sha256).digest()

    def issue(self, *, open_id: str, chat_id: str, now: float, ttl_seconds: float) -> IssuedState:
        claims = StateClaims(
            open_id=open_id,
            chat_id=chat_id,
            nonce=secrets.token_urlsafe(16),
            expires_at=int(now + ttl_seconds),
        )
        payload = {"u": open_id, "c": chat_id, "n": claims.nonce, "e": claims.expires_at}
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        state = f"{body}.{_b64(self._mac(body))}"
        return IssuedState(state, claims, code_challenge(self.code_verifier(claims)))

    def code_verifier(self, claims: StateClaims) -> str:
        """The PKCE verifier of this state, recomputable by any replica holding the secret."""
        digest = hmac.new(self._verifier_key, claims.nonce.encode(), hashlib.sha512).digest()
        return _b64(digest)  # 86 characters of the url-safe alphabet

    def verify(self, state: str, *, now: float, open_id: str | None = None) -> StateClaims:
        """The claims of a state we issued that has not expired; else :class:`StateError`.

        ``open_id``: the Feishu user who came back with it must be the one who asked.
        """
        if not isinstance(state, str) or len(state) > _MAX_STATE_CHARS or state.count(".") != 1:
            raise StateError("malformed")
        body, mac = state.split(".")
        # The MAC is checked before the payload is parsed: nothing forged gets read. As
        # text, not decoded: base64 ignores the spare bits of a last character (and any
        # character outside its alphabet), so several strings decode to the same MAC.
        if not hmac.compare_digest(mac.encode(), _b64(self._mac(body)).encode()):
            raise StateError("forged")
        claims = _claims(_unb64(body))
        if now >= claims.expires_at:
            raise StateError("expired")
        if open_id is not None and not hmac.compare_digest(open_id, claims.open_id):
            raise StateError("wrong_user")
        return claims

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest()


def _claims(raw: bytes) -> StateClaims:
    try:
        payload = json.loads(raw)
    except ValueError:
        raise StateError("malformed") from None
    if not isinstance(payload, dict):
        raise StateError("malformed")
    open_id, chat_id, nonce, expiry = (payload.get(k) for k in ("u", "c", "n", "e"))
    strings = all(isinstance(v, str) and v for v in (open_id, nonce)) and isinstance(chat_id, str)
    if not strings or not isinstance(expiry, int) or isinstance(expiry, bool):
        raise StateError("malformed")
    return StateClaims(str(open_id), str(chat_id), str(nonce), expiry)


async def first_use(guard: SightingGuard, claims: StateClaims, *, now: float) -> bool:
    """True the first time this state comes back; False for a replay (refuse it).

    Remembered until the state expires (plus a minute of clock skew between replicas):
    after that it no longer verifies anyway.
    """
    remember = max(claims.expires_at - now, 0.0) + 60.0
    return await guard.first_sighting(f"oauth-state:{claims.nonce}", remember_seconds=remember)
