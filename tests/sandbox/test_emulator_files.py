"""The emulator's files on the wire: seeded messages in Feishu's shapes, the receive events
made from them, the resource answer's headers and the message-get answer of a forward."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bot.feishu.events import InboundMessage, parse_message_event

from fakes.feishu_server import FakeFeishu

PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 32
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


async def _token(http: aiohttp.ClientSession, fake: FakeFeishu) -> str:
    async with http.post(
        f"{fake.domain}/open-apis/auth/v3/tenant_access_token/internal",
        json={"app_id": fake.app_id, "app_secret": fake.app_secret},
    ) as response:
        return str((await response.json())["tenant_access_token"])


def _parsed(fake: FakeFeishu, message_id: str) -> InboundMessage:
    envelope = fake.message_event(fake.message_by_id[message_id], verification_token="vt")
    result = parse_message_event(envelope, bot_open_id=fake.bot_open_id)
    assert isinstance(result, InboundMessage), result
    return result


async def test_seeded_messages_push_as_events_with_their_files(fake):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")
    fake.add_file_message("om_file", chat_id="oc_1", data=b"%PDF", file_name="r.pdf")
    fake.add_audio_message("om_voice", chat_id="oc_1", data=b"OggS", duration_ms=4200)
    fake.add_post_message("om_post", chat_id="oc_1", title="T", text="look", images=[PNG])
    fake.add_sticker_message("om_sticker", chat_id="oc_1")
    fake.add_merge_forward("om_mf", chat_id="oc_1", messages=[fake.message_by_id["om_img"]])

    assert [(a.kind, a.key) for a in _parsed(fake, "om_img").attachments] == [("image", "img_v3_a")]
    assert _parsed(fake, "om_file").attachments[0].name == "r.pdf"
    voice = _parsed(fake, "om_voice")
    assert (voice.text, voice.attachments[0].duration_ms) == ("[audio: 4s]", 4200)
    post = _parsed(fake, "om_post")
    assert post.text == "T\nlook\n[image]" and post.attachments[0].kind == "image"
    assert _parsed(fake, "om_sticker").attachments[0].download_type is None
    forward = _parsed(fake, "om_mf")
    assert (forward.message_type, forward.text, forward.attachments) == (
        "merge_forward",
        "[forwarded messages]",
        (),
    )
    envelope = fake.message_event(fake.message_by_id["om_mf"])
    assert envelope["event"]["message"]["content"] == "Merged and Forwarded Message"


async def test_a_resource_answer_carries_length_type_and_name(fake):
    fake.add_file_message(
        "om_file", chat_id="oc_1", data=b"%PDF-1.7", file_name="报告.pdf",
        file_key="file_v3_r", content_type="application/pdf",
    )  # fmt: skip
    url = f"{fake.domain}/open-apis/im/v1/messages/om_file/resources/file_v3_r"
    async with aiohttp.ClientSession() as http:
        token = await _token(http, fake)
        headers = {"Authorization": f"Bearer {token}"}
        async with http.get(url, params={"type": "file"}, headers=headers) as response:
            body = await response.read()
            got = response.headers
        async with http.get(url, params={"type": "video"}, headers=headers) as response:
            refused = (response.status, await response.json())

    assert body == b"%PDF-1.7"
    assert got["Content-Length"] == "8"
    assert got["Content-Type"] == "application/pdf"
    assert got["Content-Disposition"].startswith('attachment; filename="')
    assert "filename*=UTF-8''%E6%8A%A5%E5%91%8A.pdf" in got["Content-Disposition"]
    assert refused[0] == 400 and refused[1]["code"] == 234001


async def test_the_message_get_answer_of_a_forward_has_the_real_shape(fake):
    child = fake.add_message("om_child_a", chat_id="oc_origin", content={"text": "first child"})
    fake.add_merge_forward("om_root", chat_id="oc_1", messages=[child])
    url = f"{fake.domain}/open-apis/im/v1/messages/om_root"
    async with aiohttp.ClientSession() as http:
        token = await _token(http, fake)
        async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
            items = (await response.json())["data"]["items"]

    real = json.loads((FIXTURES / "api" / "message_get_merge_forward.json").read_text())
    real_items = real["data"]["items"]
    # Every field the real answer shows is there, with the same meaning.
    for ours, theirs in zip(items, real_items[:2], strict=True):
        assert set(theirs) <= set(ours)
        assert ours["msg_type"] == theirs["msg_type"]
        assert ours["body"]["content"] == theirs["body"]["content"]
    assert items[0]["upper_message_id"] == ""
    assert items[1]["upper_message_id"] == "om_root"
