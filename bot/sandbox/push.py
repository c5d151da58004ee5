"""Acting as Feishu toward the bot's webhook: envelopes, encryption and signatures.

The tests push with it (``tests/fakes/feishu_push.py`` re-exports it), and so does the
sandbox of ``larkgate dev``.

Build an envelope, then wrap it the way Feishu sends it::

    envelope = message_event(message_id="om_1", chat_id="oc_1", text="hi",
                             verification_token="vt")
    body, headers = signed_request(envelope, encrypt_key="ek")   # encrypted + signed
    await http.post(f"{bot_url}/feishu/events", data=body, headers=headers)

    body, headers = plain_request(envelope)      # no Encrypt Key configured: no signature
    body = encrypted_body(url_verification("c1", "vt"), "ek")   # encrypted, unsigned

Crypto (research/lark-sdk.md §4): AES-256-CBC with key = SHA-256(encrypt_key), a random
16-byte IV prepended to the ciphertext, PKCS#7 padding, base64; body
``{"encrypt": "..."}``. Signature = hex SHA-256 of timestamp + nonce + encrypt_key + the
raw body bytes (not an HMAC). Bodies are compact JSON, as Feishu sends them; the
signature covers those exact bytes.

Envelopes follow schema 2.0 (research §2.2, §2.3): ``create_time`` strings in ms
(microseconds for card callbacks); ``root_id``, ``parent_id``, ``thread_id`` and
``mentions`` appear only when given.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from Crypto.Cipher import AES

TENANT_KEY = "fake_tenant"

# A mention: a full Feishu mention object, or (key, open_id, name) such as
# ("@_user_1", "ou_bot", "larkgate").
MentionSpec = Mapping[str, Any] | tuple[str, str, str]


def dumps(value: Any) -> str:
    """Compact JSON, as Feishu serialises its pushes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- crypto ---------------------------------------------------------------------------


def encrypt(plaintext: str, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """Feishu's ``encrypt`` value for ``plaintext`` (``iv`` fixed only for test vectors)."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16) if iv is None else iv
    data = plaintext.encode()
    pad = 16 - len(data) % 16
    ciphertext = AES.new(key, AES.MODE_CBC, iv).encrypt(data + bytes([pad]) * pad)
    return base64.b64encode(iv + ciphertext).decode()


def sign(timestamp: int | str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """The ``X-Lark-Signature`` header for ``body``."""
    return hashlib.sha256(f"{timestamp}{nonce}{encrypt_key}".encode() + body).hexdigest()


def encrypted_body(envelope: Mapping[str, Any], encrypt_key: str, *, iv: bytes | None = None):
    """``{"encrypt": ...}`` as bytes: what Feishu POSTs once an Encrypt Key is set."""
    return dumps({"encrypt": encrypt(dumps(envelope), encrypt_key, iv=iv)}).encode()


def signed_request(
    envelope: Mapping[str, Any],
    *,
    encrypt_key: str,
    timestamp: int | None = None,
    nonce: str | None = None,
    iv: bytes | None = None,
) -> tuple[bytes, dict[str, str]]:
    """An encrypted body and its headers: the three ``X-Lark-*`` ones plus Content-Type."""
    body = encrypted_body(envelope, encrypt_key, iv=iv)
    ts = str(int(time.time()) if timestamp is None else timestamp)
    nonce = secrets.token_hex(8) if nonce is None else nonce
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sign(ts, nonce, encrypt_key, body),
    }
    return body, headers


def plain_request(envelope: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """An unencrypted, unsigned push (an app with no Encrypt Key)."""
    return dumps(envelope).encode(), {"Content-Type": "application/json; charset=utf-8"}


# -- envelopes ------------------------------------------------------------------------


def url_verification(challenge: str, token: str) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def message_event(
    *,
    message_id: str,
    chat_id: str,
    verification_token: str,
    chat_type: str = "p2p",
    text: str | None = None,
    content: Mapping[str, Any] | str | None = None,
    message_type: str = "text",
    sender_open_id: str = "ou_user",
    mentions: Sequence[MentionSpec] = (),
    root_id: str | None = None,
    parent_id: str | None = None,
    thread_id: str | None = None,
    create_time_ms: int | None = None,
    event_id: str | None = None,
    app_id: str = "cli_test",
    sender_type: str = "user",
) -> dict[str, Any]:
    """An ``im.message.receive_v1`` envelope. ``content`` (dict or JSON string) wins over
    ``text``, which becomes ``{"text": text}``."""
    if content is None:
        content = {"text": text or ""}
    created = str(_now_ms() if create_time_ms is None else create_time_ms)
    message: dict[str, Any] = {
        "message_id": message_id,
        "create_time": created,
        "update_time": created,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": message_type,
        "content": content if isinstance(content, str) else dumps(content),
    }
    for name, value in (("root_id", root_id), ("parent_id", parent_id), ("thread_id", thread_id)):
        if value:
            message[name] = value
    if mentions:
        message["mentions"] = [_mention(m) for m in mentions]
    sender = {
        "sender_id": {
            "union_id": f"on_{sender_open_id.removeprefix('ou_')}",
            "user_id": f"u_{sender_open_id.removeprefix('ou_')}",
            "open_id": sender_open_id,
        },
        "sender_type": sender_type,
        "tenant_key": TENANT_KEY,
    }
    return {
        "schema": "2.0",
        "header": _header("im.message.receive_v1", verification_token, event_id, app_id),
        "event": {"sender": sender, "message": message},
    }


def card_action_event(
    *,
    verification_token: str,
    value: Mapping[str, Any],
    operator_open_id: str = "ou_user",
    open_message_id: str = "om_card",
    open_chat_id: str = "oc_chat",
    tag: str = "button",
    name: str | None = None,
    form_value: Mapping[str, Any] | None = None,
    input_value: str | None = None,
    option: str | None = None,
    checked: bool | None = None,
    update_token: str | None = None,
    event_id: str | None = None,
    app_id: str = "cli_test",
    create_time_us: int | None = None,
) -> dict[str, Any]:
    """A ``card.action.trigger`` callback envelope (``value``: the button's callback value)."""
    action: dict[str, Any] = {"value": dict(value), "tag": tag}
    extras = {
        "name": name,
        "form_value": form_value,
        "input_value": input_value,
        "option": option,
        "checked": checked,
    }
    action |= {k: v for k, v in extras.items() if v is not None}
    header = _header("card.action.trigger", verification_token, event_id, app_id)
    header["create_time"] = str(create_time_us or _now_ms() * 1000)  # microseconds here
    suffix = operator_open_id.removeprefix("ou_")
    return {
        "schema": "2.0",
        "header": header,
        "event": {
            "operator": {
                "tenant_key": TENANT_KEY,
                "user_id": f"u_{suffix}",
                "open_id": operator_open_id,
                "union_id": f"on_{suffix}",
            },
            "token": update_token or f"c-{secrets.token_hex(12)}",
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": open_message_id, "open_chat_id": open_chat_id},
        },
    }


def _header(event_type: str, token: str, event_id: str | None, app_id: str) -> dict[str, Any]:
    return {
        "event_id": event_id or uuid.uuid4().hex,
        "event_type": event_type,
        "create_time": str(_now_ms()),
        "token": token,
        "app_id": app_id,
        "tenant_key": TENANT_KEY,
    }


def _mention(spec: MentionSpec) -> dict[str, Any]:
    if not isinstance(spec, tuple):
        return dict(spec)
    key, open_id, name = spec
    suffix = open_id.removeprefix("ou_")
    return {
        "key": key,
        "id": {"union_id": f"on_{suffix}", "user_id": "", "open_id": open_id},
        "name": name,
        "tenant_key": TENANT_KEY,
    }


def _now_ms() -> int:
    return int(time.time() * 1000)
