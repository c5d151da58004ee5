"""Verifying and opening what Feishu POSTs to us (events and card callbacks).

lark-oapi's ``EventDispatcherHandler.do()`` answers HTTP 500 for every failure (so
Feishu retries forged requests forever) and checks no timestamp (a captured request
can be replayed). This module does the same checks with proper outcomes: decryption
with the SDK's own ``AESCipher``, the SDK's signature recipe
``sha256(timestamp + nonce + encrypt_key + raw body)`` compared in constant time, the
verification token, and a freshness window on the signed timestamp.

The url_verification challenge may arrive encrypted and unsigned: it is answered on
the strength of its verification token alone, as Feishu expects.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lark_oapi.core.utils import AESCipher

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"


@dataclass(frozen=True, slots=True)
class Challenge:
    """A url_verification request: answer ``{"challenge": ...}``."""

    challenge: str


@dataclass(frozen=True, slots=True)
class VerifiedEvent:
    """A genuine schema-2.0 push, decrypted: ``envelope`` is the plaintext JSON object."""

    envelope: Mapping[str, Any]
    event_type: str
    event_id: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Not accepted. ``status`` is the HTTP answer; ``reason`` is safe to log."""

    status: int
    reason: str


Opened = Challenge | VerifiedEvent | Refused


class WebhookVerifier:
    """Turns a raw request (body bytes and headers) into a verified event or a refusal."""

    def __init__(
        self,
        *,
        verification_token: str,
        encrypt_key: str,
        max_age_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = verification_token.encode()
        self._encrypt_key = encrypt_key
        self._cipher = AESCipher(encrypt_key) if encrypt_key else None
        self._max_age = max_age_seconds
        self._clock = clock

    def open(self, body: bytes, headers: Mapping[str, str]) -> Opened:
        outer = _json_object(body)
        if outer is None:
            return Refused(400, "body is not a JSON object")
        encrypted = outer.get("encrypt")
        if encrypted is not None:
            payload = self._decrypt(encrypted)
            if isinstance(payload, Refused):
                return payload
        else:
            payload = outer
        if payload.get("type") == "url_verification":
            return self._challenge(payload)
        if self._encrypt_key:
            # With an Encrypt Key configured, Feishu signs every push.
            refused = self._check_signature(body, headers)
            if refused is not None:
                return refused
        return self._event(payload)

    # -- steps -------------------------------------------------------------------------

    def _decrypt(self, encrypted: object) -> dict[str, Any] | Refused:
        if self._cipher is None:
            return Refused(400, "encrypted body, but FEISHU_ENCRYPT_KEY is not set")
        if not isinstance(encrypted, str) or not encrypted:
            return Refused(400, "'encrypt' is not a non-empty string")
        try:
            plaintext = self._cipher.decrypt_str(encrypted)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return Refused(400, "body cannot be decrypted with the configured key")
        payload = _json_object(plaintext.encode())
        if payload is None:
            return Refused(400, "decrypted body is not a JSON object")
        return payload

    def _challenge(self, payload: Mapping[str, Any]) -> Challenge | Refused:
        if not self._token_ok(payload.get("token")):
            return Refused(401, "url_verification with a wrong verification token")
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            return Refused(400, "url_verification without a challenge")
        return Challenge(challenge)

    def _check_signature(self, body: bytes, headers: Mapping[str, str]) -> Refused | None:
        timestamp = headers.get(TIMESTAMP_HEADER)
        nonce = headers.get(NONCE_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        if not timestamp or nonce is None or not signature:
            return Refused(401, "missing signature headers")
        expected = hashlib.sha256(
            (timestamp + nonce + self._encrypt_key).encode() + body
        ).hexdigest()
        if not hmac.compare_digest(expected, signature.strip().lower()):
            return Refused(401, "signature does not match the body")
        try:
            signed_at = float(timestamp)
        except ValueError:
            return Refused(400, "signature timestamp is not a number")
        if abs(self._clock() - signed_at) > self._max_age:
            return Refused(401, "signed timestamp outside the accepted window (replayed?)")
        return None

    def _event(self, payload: Mapping[str, Any]) -> VerifiedEvent | Refused:
        header = payload.get("header")
        if payload.get("schema") != "2.0" or not isinstance(header, Mapping):
            # Schema 1.0 carries its token at the top level; we only speak 2.0.
            if self._token_ok(payload.get("token")):
                return Refused(400, "schema 1.0 events are not supported; subscribe to 2.0")
            return Refused(401, "wrong or missing verification token")
        if not self._token_ok(header.get("token")):
            return Refused(401, "wrong or missing verification token")
        return _envelope_event(payload)

    def _token_ok(self, token: object) -> bool:
        if not self._token or not isinstance(token, str):
            return False
        return hmac.compare_digest(self._token, token.encode())


def open_trusted(body: bytes) -> VerifiedEvent | Refused:
    """A plaintext envelope from a channel that authenticates itself (the long connection).

    Feishu sends the same schema-2.0 envelopes over its WebSocket, but neither encrypted
    nor signed (the connection was opened with the app secret), so there is nothing to
    verify: this only parses, exactly as ``WebhookVerifier`` does after its checks.
    """
    payload = _json_object(body)
    if payload is None:
        return Refused(400, "payload is not a JSON object")
    if "encrypt" in payload:
        return Refused(400, "encrypted payload where a plaintext envelope was expected")
    return _envelope_event(payload)


def _envelope_event(payload: Mapping[str, Any]) -> VerifiedEvent | Refused:
    header = payload.get("header")
    if payload.get("schema") != "2.0" or not isinstance(header, Mapping):
        return Refused(400, "not a schema 2.0 event envelope")
    event_type = header.get("event_type")
    if not isinstance(event_type, str) or not event_type:
        return Refused(400, "event without header.event_type")
    event_id = header.get("event_id")
    return VerifiedEvent(payload, event_type, event_id if isinstance(event_id, str) else "")


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
