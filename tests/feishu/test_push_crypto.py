"""The push helpers encrypt, sign and shape envelopes the way Feishu and lark-oapi expect."""

from __future__ import annotations

import base64
import hashlib
import json

import lark_oapi as lark
import pytest
from Crypto.Cipher import AES
from hypothesis import given
from hypothesis import strategies as st
from lark_oapi.core.utils import AESCipher
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)

from bot.feishu.webhook import PushCipher

from fakes.feishu_push import (
    card_action_event,
    encrypt,
    encrypted_body,
    message_event,
    plain_request,
    sign,
    signed_request,
    url_verification,
)

# research/lark-sdk.md §2.1
VECTOR_BODY = (
    b'{"encrypt":"AAECAwQFBgcICQoLDA0OD1QJYPW4moaXxfwPzsjEDTi3fO9lscmCXeXZcIMf7LPM94YJiaebImbq'
    b'pgIRVGnqammJi/MZEv4l0RnFJZ5Ha4g="}'
)
VECTOR_SIGNATURE = "e80c7cccc8ae9c6890369c2ade25a50b213fa7e8bcd293b6c9f694842ebfdaed"


def test_encryption_and_signature_match_the_test_vector():
    envelope = url_verification("c1", "vt")
    body = encrypted_body(envelope, "test_key", iv=bytes(range(16)))

    assert body == VECTOR_BODY
    assert sign(1700000000, "n1", "test_key", body) == VECTOR_SIGNATURE
    assert sign("1700000000", "n1", "test_key", body) == VECTOR_SIGNATURE


def test_sdk_decrypts_what_we_encrypt():
    cipher = AESCipher("ek-42")
    for text in ["", "x" * 16, "x" * 31, '{"text":"你好, bot"}', json.dumps({"a": "b" * 999})]:
        first, second = encrypt(text, "ek-42"), encrypt(text, "ek-42")
        assert first != second  # a random IV each time
        assert cipher.decrypt_str(first) == text


def test_the_webhook_decrypts_the_test_vector():
    encrypted = base64.b64decode(json.loads(VECTOR_BODY)["encrypt"])

    assert json.loads(PushCipher("test_key").decrypt(encrypted)) == url_verification("c1", "vt")


@given(key=st.text(min_size=1, max_size=40), text=st.text(max_size=300))
def test_the_webhook_decrypts_as_the_sdk_does(key, text):
    encrypted = base64.b64decode(encrypt(text, key))

    assert PushCipher(key).decrypt(encrypted) == AESCipher(key).decrypt(encrypted)
    assert PushCipher(key).decrypt(encrypted) == text.encode()


@given(data=st.binary(max_size=100))
def test_bytes_that_are_no_encryption_raise_value_error_only(data):
    try:
        plain = PushCipher("ek").decrypt(data)
    except ValueError:
        return
    assert len(plain) < len(data) - 16  # the IV and at least one byte of padding went


@pytest.mark.parametrize("last", [0, 17, 255])
def test_bad_padding_is_refused_as_the_sdk_refuses_it(last):
    iv, block = bytes(16), b"x" * 15 + bytes((last,))
    data = iv + AES.new(hashlib.sha256(b"ek").digest(), AES.MODE_CBC, iv).encrypt(block)

    with pytest.raises(ValueError, match="padding"):
        PushCipher("ek").decrypt(data)
    with pytest.raises(ValueError, match="padding"):
        AESCipher("ek").decrypt(data)


def test_signed_request_headers():
    envelope = url_verification("c2", "vt")
    body, headers = signed_request(envelope, encrypt_key="ek", timestamp=1700000001, nonce="n2")

    assert headers["X-Lark-Request-Timestamp"] == "1700000001"
    assert headers["X-Lark-Request-Nonce"] == "n2"
    assert headers["X-Lark-Signature"] == sign(1700000001, "n2", "ek", body)
    assert json.loads(AESCipher("ek").decrypt_str(json.loads(body)["encrypt"])) == envelope

    plain, plain_headers = plain_request(envelope)
    assert json.loads(plain) == envelope
    assert not any(name.startswith("X-Lark") for name in plain_headers)


def dispatcher(**handlers) -> lark.EventDispatcherHandler:
    builder = lark.EventDispatcherHandler.builder("ek", "vt", lark.LogLevel.ERROR)
    if "message" in handlers:
        builder = builder.register_p2_im_message_receive_v1(handlers["message"])
    if "card" in handlers:
        builder = builder.register_p2_card_action_trigger(handlers["card"])
    return builder.build()


def raw_request(body: bytes, headers: dict[str, str]) -> lark.RawRequest:
    raw = lark.RawRequest()
    raw.uri = "/feishu/events"
    raw.body = body
    raw.headers = headers
    return raw


def test_sdk_accepts_a_signed_message_event_and_parses_it():
    received = []
    envelope = message_event(
        message_id="om_9",
        chat_id="oc_group",
        chat_type="group",
        text="@_user_1 deploy",
        mentions=[("@_user_1", "ou_bot", "larkgate")],
        root_id="om_root",
        parent_id="om_root",
        thread_id="omt_1",
        create_time_ms=1700000000123,
        verification_token="vt",
    )
    body, headers = signed_request(envelope, encrypt_key="ek")

    response = dispatcher(message=received.append).do(raw_request(body, headers))

    assert response.status_code == 200, response.content
    message = received[0].event.message
    assert (message.message_id, message.chat_type, message.thread_id) == ("om_9", "group", "omt_1")
    assert json.loads(message.content) == {"text": "@_user_1 deploy"}
    assert message.mentions[0].id.open_id == "ou_bot"
    assert message.create_time == "1700000000123"
    assert received[0].event.sender.sender_id.open_id == "ou_user"
    assert received[0].header.token == "vt"


def test_message_event_leaves_out_absent_fields():
    envelope = message_event(
        message_id="om_1",
        chat_id="oc_1",
        content={"title": "t", "content": []},
        message_type="post",
        verification_token="vt",
    )
    message = envelope["event"]["message"]
    assert not {"root_id", "parent_id", "thread_id", "mentions"} & message.keys()
    assert json.loads(message["content"]) == {"title": "t", "content": []}
    assert envelope["schema"] == "2.0"
    assert envelope["header"]["event_type"] == "im.message.receive_v1"


def test_sdk_answers_an_encrypted_unsigned_challenge():
    body = encrypted_body(url_verification("c3", "vt"), "ek")
    response = dispatcher().do(raw_request(body, {}))
    assert json.loads(response.content) == {"challenge": "c3"}


def test_sdk_accepts_a_card_action_callback():
    actions: list[P2CardActionTrigger] = []

    def on_card(data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        actions.append(data)
        return P2CardActionTriggerResponse({"toast": {"type": "success", "content": "ok"}})

    envelope = card_action_event(
        verification_token="vt",
        value={"action": "approve", "req_id": "r1"},
        operator_open_id="ou_admin",
        open_message_id="om_card1",
        name="btn_ok",
    )
    body, headers = signed_request(envelope, encrypt_key="ek")

    response = dispatcher(card=on_card).do(raw_request(body, headers))

    assert response.status_code == 200, response.content
    assert json.loads(response.content)["toast"]["content"] == "ok"
    event = actions[0].event
    assert event.action.value == {"action": "approve", "req_id": "r1"}
    assert event.operator.open_id == "ou_admin"
    assert event.context.open_message_id == "om_card1"
    assert len(actions[0].header.create_time) == 16  # microseconds
