"""Downloading message resources: FeishuClient through lark-oapi's GetMessageResourceRequest,
over HTTP on 127.0.0.1, against the emulator's resource route.

How "refused before the body is read" is shown: the emulator's ``hold_body`` fault sends
the headers (a true Content-Length) and then no body at all until the client hangs up.
A client that read the body before judging the length would wait out ``hold_body_s``;
this one must fail at once, having read nothing, while the emulator wrote no body byte.
"""

from __future__ import annotations

import asyncio
import os
import time
import unicodedata
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.feishu import (
    FeishuClient,
    FeishuError,
    FeishuResourceTooLarge,
    FeishuResourceUnavailable,
    FeishuTransportError,
)
from bot.feishu.errors import FEISHU_DOWNLOAD_LIMIT
from bot.feishu.resources import file_name_from, media_type_from

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
RESOURCE = "im.message.resource"
CHUNK = 64 * 1024
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}  # control, format, ..., line breaks


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def observed() -> list[tuple[str, str]]:
    return []


@pytest.fixture
async def client(fake: FakeFeishu, observed: list[tuple[str, str]]) -> AsyncIterator[FeishuClient]:
    def on_call(endpoint: str, code: str) -> None:
        observed.append((endpoint, code))

    async with FeishuClient(feishu_config(fake), timeout=5.0, on_call=on_call) as feishu:
        yield feishu


async def _settled(condition, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# -- within the limit --------------------------------------------------------------------


async def test_an_image_within_the_limit_arrives_whole(fake, client, observed):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")

    resource = await client.download_resource("om_img", "img_v3_a", kind="image", max_bytes=4096)

    assert resource.data == PNG
    assert resource.size == len(PNG)
    assert resource.content_type == "image/png"
    assert resource.file_name == ""
    assert "data=" not in repr(resource)  # the bytes stay out of logs
    request = fake.requests[-1]
    assert request.path == "/open-apis/im/v1/messages/om_img/resources/img_v3_a"
    assert request.query == {"type": "image"}
    assert request.headers["Authorization"].startswith("Bearer t-")
    assert client.call_counts[RESOURCE] == 1
    assert observed[-1] == (RESOURCE, "0")


async def test_a_file_keeps_its_name_and_type(fake, client):
    data = os.urandom(100_000)
    fake.add_file_message(
        "om_pdf", chat_id="oc_1", data=data, file_name="季度 报告.pdf",
        file_key="file_v3_q", content_type="application/pdf",
    )  # fmt: skip

    resource = await client.download_resource(
        "om_pdf", "file_v3_q", kind="file", max_bytes=len(data)
    )

    assert resource.data == data  # exactly at the limit is within it
    assert resource.file_name == "季度 报告.pdf"
    assert resource.content_type == "application/pdf"


async def test_audio_downloads_as_a_file(fake, client):
    fake.add_audio_message("om_voice", chat_id="oc_1", data=b"OggS" + b"\0" * 100, duration_ms=3000)
    key = fake.message_by_id["om_voice"].content["file_key"]

    resource = await client.download_resource("om_voice", key, kind="file", max_bytes=1000)

    assert resource.data.startswith(b"OggS")
    assert resource.content_type == "audio/opus"


# -- over the limit ----------------------------------------------------------------------


async def test_a_content_length_over_the_limit_is_refused_before_the_body(fake, client, observed):
    fake.hold_body_s = 8.0
    resource = fake.add_resource("om_big", "file_v3_big", os.urandom(50_000), kind="file")
    fake.add_message("om_big", chat_id="oc_1", msg_type="file", content={"file_key": "file_v3_big"})
    fake.resource_fault("om_big", "file_v3_big", mode="hold_body")

    started = time.monotonic()
    with pytest.raises(FeishuResourceTooLarge) as caught:
        await client.download_resource("om_big", "file_v3_big", kind="file", max_bytes=10_000)

    assert time.monotonic() - started < 4.0  # it never waited for the held-back body
    error = caught.value
    assert (error.size, error.limit, error.read, error.code) == (50_000, 10_000, 0, None)
    assert "50000 bytes" in str(error) and "10000" in str(error)
    assert await _settled(lambda: resource.served[0].client_left)
    assert resource.served[0].declared == 50_000
    assert resource.served[0].bytes_sent == 0
    assert client.error_counts[(RESOURCE, None)] == 1
    assert observed[-1] == (RESOURCE, "too_large")


async def test_an_honest_content_length_over_the_limit_is_refused_too(fake, client):
    fake.add_file_message("om_f", chat_id="oc_1", data=os.urandom(30_000), file_name="a.bin")
    key = fake.message_by_id["om_f"].content["file_key"]

    with pytest.raises(FeishuResourceTooLarge) as caught:
        await client.download_resource("om_f", key, kind="file", max_bytes=29_999)

    assert caught.value.size == 30_000
    assert caught.value.read == 0


async def test_a_chunked_body_is_cut_off_just_past_the_limit(fake, client):
    data = os.urandom(24 * 1024 * 1024)
    fake.add_file_message("om_stream", chat_id="oc_1", data=data, file_name="big.bin")
    key = fake.message_by_id["om_stream"].content["file_key"]
    fake.resource_fault("om_stream", key, mode="chunked")
    limit = 256 * 1024

    with pytest.raises(FeishuResourceTooLarge) as caught:
        await client.download_resource("om_stream", key, kind="file", max_bytes=limit)

    error = caught.value
    assert error.size is None  # nothing was declared
    assert limit < error.read <= limit + CHUNK
    served = fake.resources[("om_stream", key)].served[0]
    assert served.declared is None
    assert await _settled(lambda: served.client_left or served.complete)
    assert not served.complete and served.bytes_sent < len(data)


async def test_an_understated_length_delivers_no_more_than_it_said(fake, client):
    data = os.urandom(100_000)
    fake.add_file_message("om_u", chat_id="oc_1", data=data, file_name="u.bin")
    key = fake.message_by_id["om_u"].content["file_key"]
    fake.resource_fault("om_u", key, mode="understated", claimed=10_000)

    resource = await client.download_resource("om_u", key, kind="file", max_bytes=50_000)

    assert resource.data == data[:10_000]
    assert resource.size == 10_000


async def test_a_body_shorter_than_its_length_is_a_transport_error(fake, client):
    fake.add_file_message("om_o", chat_id="oc_1", data=os.urandom(10_000), file_name="o.bin")
    key = fake.message_by_id["om_o"].content["file_key"]
    fake.resource_fault("om_o", key, mode="overstated", claimed=20_000)

    with pytest.raises(FeishuTransportError) as caught:
        await client.download_resource("om_o", key, kind="file", max_bytes=50_000)

    assert caught.value.retryable


async def test_feishus_own_size_refusal_maps_to_the_same_error(fake, client, observed):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")
    fake.fail("GET", r"/resources/", 234037, msg="Downloaded file size exceeds limit.")

    with pytest.raises(FeishuResourceTooLarge) as caught:
        await client.download_resource("om_img", "img_v3_a", kind="image", max_bytes=10**9)

    assert caught.value.code == 234037
    assert caught.value.limit == FEISHU_DOWNLOAD_LIMIT
    assert observed[-1] == (RESOURCE, "234037")


# -- Feishu's refusals --------------------------------------------------------------------


async def test_an_unknown_key_is_not_in_the_message(fake, client):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")

    with pytest.raises(FeishuResourceUnavailable) as caught:
        await client.download_resource("om_img", "img_v3_other", kind="image", max_bytes=4096)

    assert (caught.value.code, caught.value.http_status) == (234003, 400)
    assert caught.value.msg == "File not in msg."
    assert caught.value.log_id
    assert client.error_counts[(RESOURCE, 234003)] == 1


async def test_a_sticker_cannot_be_downloaded(fake, client):
    fake.add_sticker_message("om_sticker", chat_id="oc_1", file_key="file_v3_sticker")

    with pytest.raises(FeishuResourceUnavailable) as caught:
        await client.download_resource("om_sticker", "file_v3_sticker", kind="file", max_bytes=10)

    assert caught.value.code == 234043


async def test_the_wrong_type_is_an_invalid_parameter(fake, client):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")

    with pytest.raises(FeishuError) as caught:
        await client.download_resource("om_img", "img_v3_a", kind="file", max_bytes=4096)

    assert type(caught.value) is FeishuError
    assert caught.value.code == 234001


async def test_a_chat_without_the_bot_gives_no_files(fake, client):
    fake.add_image_message("om_hr", chat_id="oc_fake_hr", data=PNG, image_key="img_v3_hr")

    with pytest.raises(FeishuResourceUnavailable) as caught:
        await client.download_resource("om_hr", "img_v3_hr", kind="image", max_bytes=4096)

    assert caught.value.code == 234004


async def test_a_bad_kind_or_limit_costs_no_call(client):
    with pytest.raises(ValueError, match="kind"):
        await client.download_resource("om_1", "k", kind="sticker", max_bytes=10)
    with pytest.raises(ValueError, match="max_bytes"):
        await client.download_resource("om_1", "k", kind="image", max_bytes=-1)
    assert not client.call_counts


async def test_a_revoked_token_is_refreshed_and_the_download_retried(fake, client):
    fake.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_a")
    await client.download_resource("om_img", "img_v3_a", kind="image", max_bytes=4096)
    fake.revoke_tokens()

    resource = await client.download_resource("om_img", "img_v3_a", kind="image", max_bytes=4096)

    assert resource.data == PNG
    assert fake.token_requests == 2
    assert client.call_counts[RESOURCE] == 3
    assert client.error_counts[(RESOURCE, 99991663)] == 1


# -- hostile headers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ('attachment; filename="../../etc/passwd"', "passwd"),
        ('attachment; filename="C:\\\\Windows\\\\evil.exe"', "evil.exe"),
        ("attachment; filename=\"x.txt\"; filename*=UTF-8''%E6%8A%A5%E5%91%8A.pdf", "报告.pdf"),
        ("attachment; filename*=no-such-charset''a%20b.txt", "a b.txt"),
        ('attachment; filename="doc\u202etxt.exe"', "doctxt.exe"),
        ('attachment; filename=".."', ""),
        ("attachment; filename=" + "a" * 3000 + ".pdf", "a" * 251 + ".pdf"),
        ("inline", ""),
        ('attachment; filename="quoted \\"name\\".txt"', 'quoted "name".txt'),
    ],
)
async def test_hostile_content_disposition_gives_a_bare_name(fake, client, header, name):
    fake.add_message("om_f", chat_id="oc_1", msg_type="file", content={"file_key": "file_v3_x"})
    fake.add_resource("om_f", "file_v3_x", b"abc", kind="file", content_disposition=header)

    resource = await client.download_resource("om_f", "file_v3_x", kind="file", max_bytes=10)

    assert resource.file_name == name
    assert resource.data == b"abc"


@pytest.mark.parametrize(
    ("header", "media_type"),
    [
        ("IMAGE/PNG; charset=binary", "image/png"),
        ("text/html\x0b<script>", "application/octet-stream"),
        ("", "application/octet-stream"),
        ("nonsense", "application/octet-stream"),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",
         "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ],
)  # fmt: skip
def test_content_types_are_reduced_to_a_media_type(header, media_type):
    assert media_type_from(header) == media_type


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600), st.text(max_size=300))
def test_any_header_text_parses_into_a_safe_name_and_type(disposition, content_type):
    for header in (disposition, "attachment; filename=" + disposition,
                   "attachment; filename*=UTF-8''" + disposition,
                   'attachment; filename="' + disposition + '"'):  # fmt: skip
        name = file_name_from(header)
        assert len(name) <= 255
        assert "/" not in name and "\\" not in name
        assert name not in (".", "..")
        assert name == name.strip()
        assert not any(unicodedata.category(ch) in UNSAFE for ch in name)
    media_type = media_type_from(content_type)
    assert media_type == media_type.lower() and media_type.count("/") == 1
    assert ";" not in media_type and " " not in media_type
