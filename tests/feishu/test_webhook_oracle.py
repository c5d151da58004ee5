"""An unsigned or forged encrypted body learns nothing from how its decryption failed.

The webhook decrypts before it can tell a url_verification (which Feishu may send
unsigned) from an event. If a bad PKCS#7 padding and a well-padded plaintext that is not
JSON answered differently, the answers would be a padding oracle: enough to decrypt a
captured push block by block. Only a body whose signature checks out is told the detail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

import pytest
from Crypto.Cipher import AES
from hypothesis import given
from hypothesis import strategies as st

from bot.feishu.webhook import Refused, WebhookVerifier

from fakes.feishu_push import sign

KEY = "ek-oracle"
UNDECRYPTABLE = Refused(400, "body cannot be decrypted with the configured key")


def verifier() -> WebhookVerifier:
    return WebhookVerifier(verification_token="vt", encrypt_key=KEY, max_age_seconds=300)


def body_of(plaintext: bytes, *, pad: bool = True) -> bytes:
    """``{"encrypt": ...}`` of ``plaintext``: PKCS#7-padded, or (``pad=False``) taken as
    whole blocks as it is, whatever its last byte says."""
    if pad:
        size = 16 - len(plaintext) % 16
        plaintext += bytes((size,)) * size
    iv = os.urandom(16)
    ciphertext = AES.new(hashlib.sha256(KEY.encode()).digest(), AES.MODE_CBC, iv).encrypt(plaintext)
    return json.dumps({"encrypt": base64.b64encode(iv + ciphertext).decode()}).encode()


def signed_headers(body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    return {
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": "n",
        "X-Lark-Signature": sign(timestamp, "n", KEY, body),
    }


def forged_headers(body: bytes) -> dict[str, str]:
    return {**signed_headers(body), "X-Lark-Signature": "0" * 64}


BAD_PADDING = b"0123456789abcde\x00" * 2  # last byte 0: never valid padding
NOT_JSON = b"\xff\xfe not json at all"


@pytest.mark.parametrize("headers_of", [lambda body: {}, forged_headers])
def test_bad_padding_and_a_bad_plaintext_answer_alike_without_a_signature(headers_of) -> None:
    for plaintext, pad in ((BAD_PADDING, False), (NOT_JSON, True), (b"[1, 2]", True)):
        body = body_of(plaintext, pad=pad)
        assert verifier().open(body, headers_of(body)) == UNDECRYPTABLE


def test_a_signed_body_is_told_what_was_wrong_with_its_plaintext() -> None:
    body = body_of(NOT_JSON)
    refused = verifier().open(body, signed_headers(body))

    assert isinstance(refused, Refused)
    assert refused.status == 400
    assert refused.reason.startswith("decrypted body is not a JSON object we accept")


def test_an_unsigned_encrypted_event_is_refused_for_its_missing_signature() -> None:
    envelope = {"schema": "2.0", "header": {"event_type": "x", "token": "vt"}, "event": {}}
    body = body_of(json.dumps(envelope).encode())

    assert verifier().open(body, {}) == Refused(401, "missing signature headers")


@given(plaintext=st.binary(max_size=64), pad=st.booleans())
def test_no_unsigned_answer_depends_on_how_decryption_failed(plaintext: bytes, pad: bool) -> None:
    if not pad:
        plaintext = plaintext.ljust((len(plaintext) // 16 + 1) * 16, b"\x00")
    body = body_of(plaintext, pad=pad)

    opened = verifier().open(body, {})

    if isinstance(opened, Refused):
        assert "decrypted body" not in opened.reason
        assert opened == UNDECRYPTABLE or opened.status == 401


HEADER_TEXT = st.one_of(
    st.text(max_size=40),
    # What a header's bytes that are not UTF-8 decode to (surrogate-escaped).
    st.binary(max_size=40).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
)


@given(
    name=st.sampled_from(["X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature"]),
    value=HEADER_TEXT,
)
def test_any_signature_header_text_gets_an_answer_never_an_exception(name, value) -> None:
    body = body_of(b'{"schema": "2.0"}')
    headers = {**signed_headers(body), name: value}
    opened = verifier().open(body, headers)
    # A header changed to something else no longer matches (401), or is not a timestamp
    # (400); whatever its bytes, the verifier answers.
    if value != signed_headers(body)[name]:
        assert isinstance(opened, Refused) and opened.status in (400, 401)
