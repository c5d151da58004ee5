"""``larkgate dev``: images and files attached on the chat page, through the page's API as
the browser sends them; what the bot's model request carries of them; how the page shows
them back and serves their bytes; and the bot's own images and files in the transcript."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import aiohttp
import pytest
from PIL import Image

from bot.sandbox.attachments import UPLOAD_LIMIT
from bot.sandbox.people import GROUP_CHAT_ID, USER

from fakes.openai_server import FakeOpenAIServer
from support.env import clear_settings
from support.sandbox import Page, answered

NOTES = b"Quarterly numbers: 42 widgets sold in Hangzhou.\n"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


def png(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


async def attached(page: Page, *args: Any, **kwargs: Any) -> dict[str, Any]:
    resp = await page.attach(*args, **kwargs)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["status"] == 200, answer
    return answer


def user_parts(llm_server: FakeOpenAIServer) -> list[Any]:
    """The content of every user message the model was sent, strings and parts alike."""
    found: list[Any] = []
    for request in llm_server.requests:
        for message in request.body.get("messages", []):
            if message["role"] == "user":
                content = message["content"]
                found.extend(content if isinstance(content, list) else [content])
    return found


def sent_images(llm_server: FakeOpenAIServer) -> list[Image.Image]:
    images = []
    for part in user_parts(llm_server):
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = part["image_url"]["url"]
            assert url.startswith("data:image/")
            images.append(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    return images


def said(llm_server: FakeOpenAIServer) -> str:
    return json.dumps(user_parts(llm_server), ensure_ascii=False)


async def fetch(page: Page, url: str) -> tuple[aiohttp.ClientResponse, bytes]:
    async with page.session.get(page.url + url) as resp:
        return resp, await resp.read()


async def test_an_image_in_a_dm_reaches_the_model_and_shows_as_a_thumbnail(page, llm_server):
    image = png()
    # The browser's type is not trusted: the bytes make it an image message.
    sent = await attached(page, USER.key, "dm", image, "shot.png", content_type="text/plain")
    assert sent["message_types"] == ["image"] and sent["note"] is None
    messages = await page.until(USER.key, "dm", lambda ms: answered(ms, "All done here"))
    mine = messages[0]
    assert mine["id"] == sent["message_ids"][0] and mine["kind"] == "image"
    (shown,) = mine["attachments"]
    assert shown["kind"] == "image" and shown["size"] == len(image)
    resp, body = await fetch(page, shown["url"])
    assert resp.status == 200 and body == image
    assert resp.headers["Content-Type"] == "image/png"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Content-Disposition"].startswith("inline")
    # The bot downloaded it through the message-resources API and showed it to the model
    # (in each of the run's calls).
    seen = sent_images(llm_server)
    assert seen and all(image.size == (64, 48) for image in seen)


async def test_an_image_with_a_caption_in_the_group_is_one_post(page, sandbox, llm_server):
    sent = await attached(
        page, USER.key, "group", png(), "chart.png", content_type="image/png", text="what is it?"
    )
    assert sent["message_types"] == ["post"]
    messages = await page.until(USER.key, "group", lambda ms: answered(ms, "All done here"))
    post = messages[0]
    assert post["text"] == "@larkgate what is it?" and post["kind"] == "text"
    assert [a["kind"] for a in post["attachments"]] == ["image"]
    seeded = sandbox.emulator.message_by_id[post["id"]]
    assert seeded.msg_type == "post" and seeded.mentions[0]["name"] == "larkgate"
    assert sent_images(llm_server) and "what is it?" in said(llm_server)


async def test_a_file_in_a_dm_is_read_by_the_bot_and_served_as_a_download(page, llm_server):
    sent = await attached(page, USER.key, "dm", NOTES, "notes.txt", content_type="text/plain")
    assert sent["message_types"] == ["file"]
    messages = await page.until(USER.key, "dm", lambda ms: answered(ms, "All done here"))
    assert messages[0]["kind"] == "file"
    (shown,) = messages[0]["attachments"]
    assert shown == {
        "kind": "file",
        "key": shown["key"],
        "name": "notes.txt",
        "size": len(NOTES),
        "url": shown["url"],
    }
    assert "42 widgets sold in Hangzhou" in said(llm_server)
    resp, body = await fetch(page, shown["url"])
    assert resp.status == 200 and body == NOTES
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.headers["Content-Disposition"].startswith('attachment; filename="notes.txt"')
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_a_file_in_the_group_waits_for_the_caption_that_mentions_the_bot(page, llm_server):
    sent = await attached(page, USER.key, "group", NOTES, "notes.txt", text="how many widgets?")
    assert sent["message_types"] == ["file", "text"] and sent["note"] is None
    messages = await page.until(USER.key, "group", lambda ms: answered(ms, "All done here"))
    assert [m["kind"] for m in messages[:2]] == ["file", "text"]
    assert messages[1]["text"] == "@larkgate how many widgets?"
    assert "42 widgets sold" in said(llm_server) and "how many widgets?" in said(llm_server)


async def test_html_and_svg_are_files_served_only_as_downloads(page, sandbox, llm_server):
    hostile = {
        "page.html": b"<html><script>alert(1)</script></html>",
        "logo.svg": b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
    }
    for name, data in hostile.items():
        # In the group without a caption the file waits for a question: nothing runs.
        sent = await attached(page, USER.key, "group", data, name, content_type="image/svg+xml")
        assert sent["message_types"] == ["file"] and "next message" in sent["note"]
    messages = (await page.transcript(USER.key, "group"))["messages"]
    assert [m["kind"] for m in messages] == ["file", "file"]
    for message in messages:
        (shown,) = message["attachments"]
        resp, body = await fetch(page, shown["url"])
        assert body == hostile[shown["name"]]
        assert resp.headers["Content-Type"] == "application/octet-stream"
        assert resp.headers["Content-Disposition"].startswith("attachment;")
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert "sandbox" in resp.headers["Content-Security-Policy"]
    assert llm_server.requests == []
    # Only files messages carry are served, by the message that carries them.
    key = messages[0]["attachments"][0]["key"]
    for url in (f"/api/resource/{messages[1]['id']}/{key}", f"/api/resource/om_nope/{key}"):
        resp, _ = await fetch(page, url)
        assert resp.status == 404


@pytest.mark.parametrize("size", [UPLOAD_LIMIT + 1, UPLOAD_LIMIT + 5 * 1024 * 1024])
async def test_an_upload_over_the_limit_is_refused_saying_so(page, sandbox, size):
    resp = await page.attach(USER.key, "dm", b"\0" * size, "big.bin")
    assert resp.status == 413
    assert "the sandbox takes files up to 20 MiB" in await resp.text()
    assert not any(m.chat_id == USER.dm_chat_id() for m in sandbox.emulator.message_by_id.values())


async def test_a_form_without_a_file_or_not_a_form_is_refused(page):
    resp = await page.attach(USER.key, "dm", b"", "empty.txt")
    assert resp.status == 400 and "empty" in await resp.text()
    async with page.session.post(page.url + "/api/attachments", json={"user": "user"}) as resp:
        assert resp.status == 400 and "multipart" in await resp.text()
    form = aiohttp.FormData({"user": USER.key, "chat": "dm"})
    form.add_field("caption", "no file here", content_type="text/plain", filename=None)
    async with page.session.post(page.url + "/api/attachments", data=form) as resp:
        assert resp.status == 400 and "no file" in await resp.text()


async def test_the_bots_own_images_and_files_show_in_the_transcript(page, sandbox):
    """What the bot will do for a chart or a file: upload it, then send it by key."""
    emulator = sandbox.emulator
    chart, csv = png(320, 200), b"region,sold\nHangzhou,42\n"
    async with aiohttp.ClientSession(base_url=emulator.domain) as feishu:
        token = await _token(feishu, emulator.app_id, emulator.app_secret)
        auth = {"Authorization": f"Bearer {token}"}
        image_key = await _upload(feishu, auth, "images", image_type="message", image=chart)
        file_key = await _upload(
            feishu, auth, "files", file_type="stream", file_name="sales.csv", file=csv
        )
        for msg_type, content in (
            ("image", {"image_key": image_key}),
            ("file", {"file_key": file_key}),
        ):
            body = {
                "receive_id": GROUP_CHAT_ID,
                "msg_type": msg_type,
                "content": json.dumps(content),
            }
            async with feishu.post(
                "/open-apis/im/v1/messages?receive_id_type=chat_id", json=body, headers=auth
            ) as resp:
                assert (await resp.json())["code"] == 0
    image, file = (await page.transcript(USER.key, "group"))["messages"]
    assert image["from_bot"] and image["kind"] == "image"
    assert file["from_bot"] and file["kind"] == "file"
    assert file["attachments"][0]["name"] == "sales.csv"
    assert file["attachments"][0]["size"] == len(csv)
    resp, body = await fetch(page, image["attachments"][0]["url"])
    assert body == chart and resp.headers["Content-Type"] == "image/png"
    resp, body = await fetch(page, file["attachments"][0]["url"])
    assert body == csv and resp.headers["Content-Disposition"].startswith("attachment;")


async def _token(feishu: aiohttp.ClientSession, app_id: str, app_secret: str) -> str:
    async with feishu.post(
        "/open-apis/auth/v3/tenant_access_token/internal",
        json={"app_id": app_id, "app_secret": app_secret},
    ) as resp:
        return str((await resp.json())["tenant_access_token"])


async def _upload(
    feishu: aiohttp.ClientSession, auth: dict[str, str], what: str, **fields: Any
) -> str:
    form = aiohttp.FormData()
    for name, value in fields.items():
        if isinstance(value, bytes):
            form.add_field(name, value, filename=fields.get("file_name", "chart.png"))
        else:
            form.add_field(name, value)
    async with feishu.post(f"/open-apis/im/v1/{what}", data=form, headers=auth) as resp:
        data = (await resp.json())["data"]
    return str(data.get("image_key") or data["file_key"])
