"""Reading a message by id (GetMessageRequest): a quoted parent, and a merge_forward with the
messages it forwards, whose files download through the forward's id."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.feishu import FeishuClient, FeishuError, FeishuResourceUnavailable, FetchedMessage
from bot.feishu.content import Attachment

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


def _forward(fake: FakeFeishu) -> None:
    text = fake.add_message(
        "om_a", chat_id="oc_origin", content={"text": "first child"}, create_time_ms=1_000
    )
    image = fake.add_image_message(
        "om_b", chat_id="oc_origin", data=PNG, image_key="img_v3_b", sender_open_id="ou_bob"
    )
    fake.add_merge_forward("om_mf", chat_id="oc_1", messages=[text, image])


async def test_a_merge_forward_comes_with_what_it_forwards(fake, client):
    _forward(fake)

    items = await client.get_message("om_mf")

    assert [m.message_id for m in items] == ["om_mf", "om_a", "om_b"]
    forward, text, image = items
    assert isinstance(forward, FetchedMessage)
    assert forward.msg_type == "merge_forward"
    assert forward.content == "Merged and Forwarded Message"
    assert forward.text == "[forwarded messages]"
    assert forward.upper_message_id == "" and forward.resource_message_id == "om_mf"
    assert (text.upper_message_id, text.text, text.content) == (
        "om_mf", "first child", {"text": "first child"},
    )  # fmt: skip
    assert (text.chat_id, text.create_time_ms) == ("oc_origin", 1_000)
    assert (image.sender_id, image.sender_id_type, image.sender_type) == (
        "ou_bob",
        "open_id",
        "user",
    )
    assert image.attachments == (Attachment("image", "img_v3_b"),)
    assert image.resource_message_id == "om_mf"
    assert client.call_counts["im.message.get"] == 1


async def test_a_forwarded_image_downloads_through_the_forward(fake, client):
    _forward(fake)
    image = (await client.get_message("om_mf"))[2]

    resource = await client.download_resource(
        image.resource_message_id, image.attachments[0].key, kind="image", max_bytes=1000
    )

    assert resource.data == PNG
    with pytest.raises(FeishuResourceUnavailable) as caught:
        await client.download_resource("om_b", "img_v3_b", kind="image", max_bytes=1000)
    assert caught.value.code == 234003


async def test_a_nested_forward_lists_its_messages_too(fake, client):
    inner_text = fake.add_message("om_inner_text", chat_id="oc_x", content={"text": "deep"})
    inner = fake.add_merge_forward("om_inner", chat_id="oc_x", messages=[inner_text])
    fake.add_merge_forward("om_outer", chat_id="oc_1", messages=[inner])

    items = await client.get_message("om_outer")

    assert [(m.message_id, m.upper_message_id) for m in items] == [
        ("om_outer", ""), ("om_inner", "om_outer"), ("om_inner_text", "om_inner"),
    ]  # fmt: skip
    assert {m.resource_message_id for m in items} == {"om_outer"}


async def test_a_quoted_message_reads_like_an_event(fake, client):
    fake.add_message(
        "om_parent",
        chat_id="oc_1",
        content={"text": "@_user_1 see the plan"},
        root_id="om_root",
        parent_id="om_root",
    )
    fake.message_by_id["om_parent"].mentions = [
        {"key": "@_user_1", "id": "ou_bob", "id_type": "open_id", "name": "Bob", "tenant_key": "t"}
    ]

    [parent] = await client.get_message("om_parent")

    assert parent.text == "@Bob see the plan"
    assert parent.mentions[0].open_id == "ou_bob"
    assert (parent.root_id, parent.parent_id, parent.deleted) == ("om_root", "om_root", False)
    assert parent.resource_message_id == "om_parent"


async def test_a_post_with_images_lists_them(fake, client):
    fake.add_post_message("om_post", chat_id="oc_1", title="Plan", text="see", images=[PNG, PNG])

    [post] = await client.get_message("om_post")

    assert post.text.startswith("Plan\nsee")
    assert [a.kind for a in post.attachments] == ["image", "image"]
    for attachment in post.attachments:
        resource = await client.download_resource(
            "om_post", attachment.key, kind="image", max_bytes=1000
        )
        assert resource.data == PNG


async def test_an_unknown_message_is_an_invalid_parameter(client):
    with pytest.raises(FeishuError) as caught:
        await client.get_message("om_nobody_sent")

    assert caught.value.code == 230001
