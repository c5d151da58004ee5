"""What the parsers take from messages with files in them, on real payload shapes.

``tests/fixtures/inbound/real_*.event.json`` are copied from the corpus in
``../shared/fixtures/feishu-real/`` (the corpus README names each source): verbatim for
its full envelopes (``event__env-p2p-{file,audio,post-title-text-img,media-video}__hermes``),
wrapped in an envelope for its event bodies (``event__body-group-image`` and
``event__body-group-post-zh-cn-at-img-mentions`` of channel-sdk-node) and its sticker
content. ``real_merge_forward`` is the forward whose children
``tests/fixtures/api/message_get_merge_forward.json`` lists (the corpus's
``event__api-merge-forward-children-via-message-get__channel-sdk-node``, wrapped in the
answer's envelope); the event carries the body the API answers for it. Their whole parse is
pinned by ``test_events_golden``; here: the attachments, and what downloading needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.feishu.content import Attachment
from bot.feishu.events import InboundMessage, parse_message_event
from bot.feishu.fetched import fetched_messages

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# fixture -> (message_type, [(kind, key, name, duration_ms, download type)])
EXPECTED = {
    "real_image": ("image", [("image", "img_v3_xyz", "", 0, "image")]),
    "real_file": ("file", [("file", "file_test_key", "report.pdf", 0, "file")]),
    "real_audio": ("audio", [("audio", "audio_test_key", "voice.opus", 3000, "file")]),
    "real_media_video": ("media", [("media", "video_test_key", "clip.mp4", 5000, "file")]),
    "real_post_title_text_img": ("post", [("image", "img_v2_test_key", "", 0, "image")]),
    "real_post_zh_cn_img": ("post", [("image", "img_1", "", 0, "image")]),
    "real_sticker": ("sticker", [("sticker", "s1", "", 0, None)]),
    # The event of a merge_forward carries nothing: its messages come from get_message.
    "real_merge_forward": ("merge_forward", []),
}


def _parse(name: str) -> InboundMessage:
    envelope = json.loads((FIXTURES / "inbound" / f"{name}.event.json").read_text())
    result = parse_message_event(envelope, bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage), result
    return result


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_attachments_of_real_shapes(name: str):
    message_type, expected = EXPECTED[name]

    message = _parse(name)

    assert message.message_type == message_type
    got = [(a.kind, a.key, a.name, a.duration_ms, a.download_type) for a in message.attachments]
    assert got == expected


def test_a_file_message_says_its_size_before_any_download():
    [attachment] = _parse("real_file").attachments
    assert attachment.size == 12345


def test_the_texts_stand_for_the_files():
    assert _parse("real_audio").text == "[audio: 3s]"
    assert _parse("real_file").text == "[file: report.pdf]"
    assert _parse("real_post_title_text_img").text == "Update\nSee: [image]"
    assert _parse("real_post_zh_cn_img").text == "Greeting\nhi @Bob\n[image]"
    assert _parse("real_merge_forward").text == "[forwarded messages]"


def test_the_message_get_answer_of_a_merge_forward_lists_its_children():
    answer = json.loads((FIXTURES / "api" / "message_get_merge_forward.json").read_text())

    items = fetched_messages(answer["data"], "om_root")

    assert [(m.message_id, m.upper_message_id) for m in items] == [
        ("om_root", ""), ("om_child_a", "om_root"), ("om_child_b", "om_root"),
    ]  # fmt: skip
    root, first, second = items
    assert root.content == "Merged and Forwarded Message"  # not JSON, kept as sent
    assert root.text == "[forwarded messages]"
    assert (first.text, second.text) == ("first child", "second child")
    assert (first.sender_id, second.sender_id) == ("ou_alice", "ou_bob")
    # Children are older than the forward: they keep their own time.
    assert first.create_time_ms < second.create_time_ms < root.create_time_ms
    assert {m.resource_message_id for m in items} == {"om_root"}


def test_fetched_children_with_files_say_how_to_download_them():
    data = {
        "items": [
            {"message_id": "om_mf", "msg_type": "merge_forward",
             "body": {"content": "Merged and Forwarded Message"}},
            {"message_id": "om_img", "upper_message_id": "om_mf", "msg_type": "image",
             "body": {"content": '{"image_key":"img_v3_c"}'}},
            {"message_id": "om_doc", "upper_message_id": "om_mf", "msg_type": "file",
             "body": {"content": '{"file_key":"file_v3_d","file_name":"d.docx"}'}},
            {"message_id": "om_voice", "upper_message_id": "om_mf", "msg_type": "audio",
             "body": {"content": '{"file_key":"file_v3_v","duration":1500}'}},
            "not a message", {"msg_type": "text"},
        ]
    }  # fmt: skip

    items = fetched_messages(data, "om_mf")

    assert [m.message_id for m in items] == ["om_mf", "om_img", "om_doc", "om_voice"]
    assert [m.attachments for m in items[1:]] == [
        (Attachment("image", "img_v3_c"),),
        (Attachment("file", "file_v3_d", "d.docx"),),
        (Attachment("audio", "file_v3_v", duration_ms=1500),),
    ]
    assert all(m.resource_message_id == "om_mf" for m in items)


@pytest.mark.parametrize("data", [None, [], {"items": None}, {"items": [None, 3, {}]}, "x"])
def test_a_malformed_answer_gives_no_messages(data):
    assert fetched_messages(data, "om_1") == []
