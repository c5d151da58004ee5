"""Verifying and opening what Feishu POSTs to us (events and card callbacks).

lark-oapi's ``EventDispatcherHandler.do()`` answers HTTP 500 for every failure (so
Feishu retries forged requests forever) and checks no timestamp (a captured request
can be replayed). This module does the same checks with proper outcomes: decryption
as the SDK's ``AESCipher`` decrypts (AES-256-CBC, the key the SHA-256 of the Encrypt Key,
the IV the first 16 bytes, PKCS#7 padding checked) but with OpenSSL's AES through
``cryptography`` (pycryptodome's set-up per call was a quarter of this module's CPU a
push), the SDK's signature recipe
``sha256(timestamp + nonce + encrypt_key + raw body)`` compared in constant time, the
verification token, and a freshness window on the signed timestamp.

The url_verification challenge may arrive encrypted and unsigned: it is answered on
the strength of its verification token alone, as Feishu expects. So an encrypted body
is decrypted even when its signature is missing or wrong (the signature is checked
first all the same), and such a body is then told only that decryption failed, never
why: bad padding and a plaintext that is not JSON answer alike, or the answers would
be a padding oracle.

Without an Encrypt Key Feishu signs nothing, so nothing but the verification token
vouches for a push and no signed timestamp dates it. In that mode (refused at start-up
unless LARKGATE_ALLOW_UNSIGNED_EVENTS=true) an envelope must carry a ``header.create_time``
inside the same freshness window, which stops verbatim replays of captured pushes.

Every body, and every decrypted payload, is parsed by ``untrusted_json.load_object``:
size, depth and shape are checked before ``json.loads`` runs, and nothing it rejects
raises past this module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .untrusted_json import JSON_OBJECT, UntrustedJson, load_object

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"


@dataclass(frozen=True, slots=True)
class Challenge:
    """A url_verification request: answer ``{"challenge": ...}``."""

    challenge: str


@dataclass(frozen=True, slots=True)
class VerifiedEvent:
    """A genuine schema-2.0 push, decrypted: ``envelope`` is the plaintext JSON object, and
    ``raw`` its UTF-8 text as it came (checked by ``load_object``; the ledger stores it
    instead of encoding the envelope again)."""

    envelope: Mapping[str, Any]
    event_type: str
    event_id: str
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Refused:
    """Not accepted. ``status`` is the HTTP answer; ``reason`` is safe to log."""

    status: int
    reason: str


Opened = Challenge | VerifiedEvent | Refused

_UNDECRYPTABLE = Refused(400, "body cannot be decrypted with the configured key")


class WebhookVerifier:
    """Turns a raw request (body bytes and headers) into a verified event or a refusal."""

    def __init__(
        self,
        *,
        verification_token: str,
        encrypt_key: str,
        max_age_seconds: float,
        clock: Callable[[], float] = time.time,
        app_id: str = "",
    ) -> None:
        self._token = verification_token.encode()
        # A push names the app it is for (header.app_id): another app's is refused, even
        # signed with this app's key (two apps configured with one Encrypt Key).
        self._app_id = app_id
        self._encrypt_key = encrypt_key
        self._cipher = PushCipher(encrypt_key) if encrypt_key else None
        self._max_age = max_age_seconds
        self._clock = clock

    def open(self, body: bytes, headers: Mapping[str, str]) -> Opened:
        outer = _json_object(body, "body")
        if isinstance(outer, Refused):
            return outer
        encrypted = outer.get("encrypt")
        if encrypted is None:
            payload = outer
            if payload.get("type") == "url_verification":
                return self._challenge(payload)
            if self._encrypt_key:
                # With an Encrypt Key configured, Feishu signs every push.
                refused = self._check_signature(body, headers)
                if refused is not None:
                    return refused
            return self._event(payload, body)
        # The signature first: what an unsigned (or forged) body learns from decryption is
        # only that it failed, whatever failed, so no answer can serve as a padding oracle.
        unsigned = self._check_signature(body, headers) if self._encrypt_key else None
        decrypted = self._decrypt(encrypted, detailed=unsigned is None)
        if isinstance(decrypted, Refused):
            return decrypted
        payload, plaintext = decrypted
        if payload.get("type") == "url_verification":
            return self._challenge(payload)  # may come unsigned: its token vouches
        if unsigned is not None:
            return unsigned
        return self._event(payload, plaintext)

    # -- steps -------------------------------------------------------------------------

    def _decrypt(
        self, encrypted: object, *, detailed: bool
    ) -> tuple[dict[str, Any], bytes] | Refused:
        """The envelope and its plaintext."""
        if self._cipher is None:
            return Refused(400, "encrypted body, but FEISHU_ENCRYPT_KEY is not set")
        if not isinstance(encrypted, str) or not encrypted:
            return Refused(400, "'encrypt' is not a non-empty string")
        try:
            # Bytes: the plaintext's UTF-8 is load_object's to check. (binascii.Error, for
            # bad base64, is a ValueError; so are length and padding.)
            plaintext = self._cipher.decrypt(base64.b64decode(encrypted))
        except ValueError:
            return _UNDECRYPTABLE
        payload = _json_object(plaintext, "decrypted body")
        if isinstance(payload, Refused):
            # Bad padding and bad plaintext must look the same.
            return payload if detailed else _UNDECRYPTABLE
        return payload, plaintext

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
        # Header bytes that are not UTF-8 come surrogate-escaped (as aiohttp and the push
        # front decode them): encoded back as they came, they are hashed as they came,
        # and compared as bytes (compare_digest refuses a str that is not ASCII).
        expected = hashlib.sha256(
            (timestamp + nonce + self._encrypt_key).encode("utf-8", "surrogateescape") + body
        ).hexdigest()
        given = signature.strip().lower().encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(expected.encode(), given):
            return Refused(401, "signature does not match the body")
        try:
            signed_at = float(timestamp)
        except ValueError:
            return Refused(400, "signature timestamp is not a number")
        if abs(self._clock() - signed_at) > self._max_age:
            return Refused(401, "signed timestamp outside the accepted window (replayed?)")
        return None

    def _event(self, payload: Mapping[str, Any], raw: bytes) -> VerifiedEvent | Refused:
        header = payload.get("header")
        if payload.get("schema") != "2.0" or not isinstance(header, JSON_OBJECT):
            # Schema 1.0 carries its token at the top level; we only speak 2.0.
            if self._token_ok(payload.get("token")):
                return Refused(400, "schema 1.0 events are not supported; subscribe to 2.0")
            return Refused(401, "wrong or missing verification token")
        if not self._token_ok(header.get("token")):
            return Refused(401, "wrong or missing verification token")
        named = header.get("app_id")
        if self._app_id and named is not None and named != self._app_id:
            return Refused(403, "the push is for another app (header.app_id)")
        if self._cipher is None:
            refused = self._check_created(header)
            if refused is not None:
                return refused
        return _envelope_event(payload, raw)

    def _check_created(self, header: Mapping[str, Any]) -> Refused | None:
        """Unsigned mode: the envelope's own timestamp stands in for the signed one."""
        created = create_time_seconds(header.get("create_time"))
        if created is None:
            return Refused(400, "unsigned event without a readable header.create_time")
        if abs(self._clock() - created) > self._max_age:
            return Refused(401, "unsigned event's header.create_time is outside the window")
        return None

    def _token_ok(self, token: object) -> bool:
        if not self._token or not isinstance(token, str):
            return False
        return hmac.compare_digest(self._token, token.encode())


class PushCipher:
    """Feishu's encryption of pushes with the app's Encrypt Key, the decrypting half."""

    def __init__(self, encrypt_key: str) -> None:
        self._key = algorithms.AES(hashlib.sha256(encrypt_key.encode()).digest())

    def decrypt(self, data: bytes) -> bytes:
        """The plaintext of IV + ciphertext; ValueError when it cannot be one."""
        if len(data) < 32 or len(data) % 16:
            raise ValueError("not an IV and whole AES blocks")
        decryptor = Cipher(self._key, modes.CBC(data[:16])).decryptor()
        padded = decryptor.update(data[16:]) + decryptor.finalize()
        size = padded[-1]
        if not 1 <= size <= 16 or padded[-size:] != bytes((size,)) * size:
            raise ValueError("bad PKCS#7 padding")
        return padded[:-size]


def open_trusted(body: bytes) -> VerifiedEvent | Refused:
    """A plaintext envelope from a channel that authenticates itself (the long connection).

    Feishu sends the same schema-2.0 envelopes over its WebSocket, but neither encrypted
    nor signed (the connection was opened with the app secret), so there is nothing to
    verify: this only parses, exactly as ``WebhookVerifier`` does after its checks.
    """
    payload = _json_object(body, "payload")
    if isinstance(payload, Refused):
        return payload
    if "encrypt" in payload:
        return Refused(400, "encrypted payload where a plaintext envelope was expected")
    return _envelope_event(payload, body)


def _envelope_event(payload: Mapping[str, Any], raw: bytes) -> VerifiedEvent | Refused:
    header = payload.get("header")
    if payload.get("schema") != "2.0" or not isinstance(header, JSON_OBJECT):
        return Refused(400, "not a schema 2.0 event envelope")
    event_type = header.get("event_type")
    if not isinstance(event_type, str) or not event_type:
        return Refused(400, "event without header.event_type")
    event_id = header.get("event_id")
    return VerifiedEvent(payload, event_type, event_id if isinstance(event_id, str) else "", raw)


def create_time_seconds(raw: object) -> float | None:
    """``header.create_time`` in seconds, or None when it is not a timestamp.

    Feishu writes it as a string of digits: milliseconds for events (13 digits),
    microseconds for card callbacks (16 digits). The unit is read off the magnitude;
    a forger gains nothing by choosing one, since every reading must land in the window.
    """
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 20:
        value = int(raw)
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        value = raw
    else:
        return None
    if value >= 10**14:
        return value / 1_000_000
    if value >= 10**11:
        return value / 1_000
    return float(value)


def _json_object(raw: bytes, what: str) -> dict[str, Any] | Refused:
    try:
        return load_object(raw)
    except UntrustedJson as exc:
        return Refused(400, f"{what} is not a JSON object we accept: {exc}")
