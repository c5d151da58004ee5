"""Uploading images and files (multipart/form-data through lark-oapi's CreateImageRequest
and CreateFileRequest) and sending them as messages, against the emulator over HTTP."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest

from bot.feishu import FeishuClient, FeishuError, FeishuResourceTooLarge
from bot.feishu.resources import FILE_UPLOAD_LIMIT, IMAGE_UPLOAD_LIMIT, file_type_for

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

# Bytes of every value, \r\n and boundary-like runs included: the multipart body must
# carry them unchanged.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64 + b"\r\n--\r\n\r\n"


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


async def test_an_uploaded_image_arrives_intact_and_can_be_sent(fake, client):
    image_key = await client.upload_image(PNG)

    upload = fake.uploaded_images[image_key]
    assert upload.data == PNG
    assert upload.image_type == "message"
    request = fake.requests[-1]
    assert request.path == "/open-apis/im/v1/images"
    assert request.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert request.headers["Authorization"].startswith("Bearer t-")
    assert client.call_counts["im.image.create"] == 1

    sent = await client.send_message(
        "chat_id", "oc_1", msg_type="image", content=json.dumps({"image_key": image_key})
    )
    assert fake.message_by_id[sent.message_id].content == {"image_key": image_key}


async def test_an_uploaded_file_arrives_with_its_fields_and_can_be_replied(fake, client):
    data = os.urandom(300_000)

    file_key = await client.upload_file(data, file_name="季度 报告.pdf")

    upload = fake.uploaded_files[file_key]
    assert upload.data == data
    assert (upload.file_name, upload.file_type, upload.duration_ms) == (
        "季度 报告.pdf",
        "pdf",
        None,
    )
    assert upload.filename == "季度 报告.pdf"  # the part's filename too
    fake.add_message("om_user", chat_id="oc_1")
    sent = await client.reply_message(
        "om_user", msg_type="file", content=json.dumps({"file_key": file_key})
    )
    assert fake.message_by_id[sent.message_id].content == {"file_key": file_key}
    assert fake.message_by_id[sent.message_id].reply_to == "om_user"


async def test_an_audio_file_carries_its_duration(fake, client):
    file_key = await client.upload_file(
        b"OggS" + os.urandom(1000), file_name="v.opus", duration_ms=2500
    )

    upload = fake.uploaded_files[file_key]
    assert (upload.file_type, upload.duration_ms) == ("opus", 2500)


async def test_an_upload_is_resent_whole_after_a_token_refresh(fake, client):
    await client.upload_image(PNG)
    fake.revoke_tokens()

    image_key = await client.upload_image(PNG)

    assert fake.uploaded_images[image_key].data == PNG
    assert fake.token_requests == 2
    assert client.call_counts["im.image.create"] == 3


@pytest.mark.parametrize(
    ("name", "file_type"),
    [
        ("a.PDF", "pdf"), ("b.docx", "doc"), ("c.doc", "doc"), ("d.xlsx", "xls"),
        ("e.xls", "xls"), ("f.pptx", "ppt"), ("g.mp4", "mp4"), ("h.opus", "opus"),
        ("table.csv", "stream"), ("notes.md", "stream"), ("README", "stream"), (".pdf", "pdf"),
    ],
)  # fmt: skip
def test_the_file_type_comes_from_the_name(name, file_type):
    assert file_type_for(name) == file_type


async def test_uploads_feishu_would_refuse_cost_no_call(client):
    with pytest.raises(ValueError, match="empty"):
        await client.upload_image(b"")
    with pytest.raises(ValueError, match="image_type"):
        await client.upload_image(PNG, image_type="banner")
    with pytest.raises(ValueError, match="file_name"):
        await client.upload_file(b"x", file_name=" ")
    with pytest.raises(ValueError, match="file_type"):
        await client.upload_file(b"x", file_name="a.txt", file_type="txt")
    with pytest.raises(FeishuResourceTooLarge) as caught:
        await client.upload_image(b"\xff\xd8\xff" + bytes(IMAGE_UPLOAD_LIMIT))
    assert caught.value.limit == IMAGE_UPLOAD_LIMIT
    with pytest.raises(FeishuResourceTooLarge):
        await client.upload_file(bytes(FILE_UPLOAD_LIMIT + 1), file_name="big.bin")
    assert not client.call_counts


async def test_the_emulator_refuses_what_feishu_refuses(fake, client):
    with pytest.raises(FeishuError) as caught:
        await client.upload_image(b"GIF8 but not quite an image")
    assert caught.value.code == 234001
    assert "not an image" in caught.value.msg

    with pytest.raises(FeishuError) as caught:
        await client.send_message(
            "chat_id", "oc_1", msg_type="image", content=json.dumps({"image_key": "img_v3_never"})
        )
    assert caught.value.code == 230001
    with pytest.raises(FeishuError) as caught:
        await client.send_message("chat_id", "oc_1", msg_type="file", content=json.dumps({}))
    assert caught.value.code == 230001
    assert not fake.uploaded_images and not fake.sent
