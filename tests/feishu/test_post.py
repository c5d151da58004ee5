"""Post content as the message APIs return it, read without a mentions book."""

from __future__ import annotations

import json

from bot.feishu.post import at_as_written, flatten_post_json


def test_a_listed_post_is_read_from_its_json_string() -> None:
    content = {
        "title": "Release notes",
        "content": [
            [
                {"tag": "text", "text": "v2.3 ships Friday, "},
                {"tag": "at", "user_id": "@_user_1", "user_name": "Alice Wang"},
            ],
            [{"tag": "a", "text": "changelog", "href": "https://example.invalid/cl"}],
            [{"tag": "img", "image_key": "img_v3_1"}],
        ],
    }
    flat = flatten_post_json(json.dumps(content))
    assert flat is not None
    assert flat.text == (
        "Release notes\nv2.3 ships Friday, @Alice Wang\nchangelog (https://example.invalid/cl)\n"
        "[image]"
    )
    assert flat.attachments == (("image", "img_v3_1"),)


def test_a_sent_post_is_read_through_its_locale() -> None:
    sent = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": "**Hi**"}]]}}
    flat = flatten_post_json(json.dumps(sent, ensure_ascii=False))
    assert flat is not None and flat.text == "**Hi**"
    assert flatten_post_json(sent) == flat  # already decoded: the same


def test_what_is_not_a_post_is_none() -> None:
    assert flatten_post_json("not json") is None
    assert flatten_post_json(json.dumps(["a list"])) is None
    assert flatten_post_json(json.dumps({"text": "a text message"})) is None
    assert flatten_post_json(None) is None


def test_at_tags_without_a_mentions_book() -> None:
    assert at_as_written({"tag": "at", "user_id": "ou_1", "user_name": " Bob "}) == "@Bob"
    # A placeholder stays as is, for the caller to resolve against the message's mentions.
    assert at_as_written({"tag": "at", "user_id": "@_user_2", "user_name": ""}) == "@_user_2"
    assert at_as_written({"tag": "at", "user_id": "all"}) == "@all"
    assert at_as_written({"tag": "at", "open_id": "ou_2", "user_id": None}) == "@ou_2"
    assert at_as_written({"tag": "at"}) == ""


def test_a_custom_at_renderer_is_used() -> None:
    content = {"content": [[{"tag": "at", "user_id": "ou_1"}, {"tag": "text", "text": " hi"}]]}
    flat = flatten_post_json(json.dumps(content), lambda element: "@someone")
    assert flat is not None and flat.text == "@someone hi"
