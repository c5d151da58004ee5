"""Images, files, replies and forwards, end to end: a message with media is pushed to the
running bot, the bot downloads it from the Feishu emulator through lark-oapi, and the
test reads what the model was sent (image parts with the image's bytes, a file's text)
and what the chat was told."""

from __future__ import annotations

import base64
import io

from PIL import Image

from e2e.harness import BOT_OPEN_ID, VERIFICATION_TOKEN, running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

CHAT = "oc_dm"


def png(size: tuple[int, int] = (32, 24), colour: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def docx(*paragraphs: str) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def loop_requests(bot) -> list[dict]:
    return [r.body for r in bot.llm_server.requests if not is_synthesis(r.body)]


def image_urls(body: dict) -> list[str]:
    urls = []
    for message in body["messages"]:
        if isinstance(message["content"], list):
            urls += [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]
    return urls


def all_text(body: dict) -> str:
    parts = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            parts += [p.get("text", "") for p in content if p["type"] == "text"]
        elif content:
            parts.append(content)
    return "\n".join(parts)


async def push(bot, message) -> None:
    status = await bot.push(
        bot.feishu.message_event(message, verification_token=VERIFICATION_TOKEN)
    )
    assert status == 200


async def test_an_image_reaches_the_model_as_an_image_part_with_its_bytes(bot):
    picture = png((2400, 1200))  # over the 1,568 px side: shrunk before the model
    message = bot.feishu.add_image_message("om_img", chat_id=CHAT, data=picture)
    await push(bot, message)
    await bot.reply("om_img")

    (url,) = image_urls(loop_requests(bot)[0])
    head, data = url.split(",", 1)
    assert head.startswith("data:image/")
    sent = Image.open(io.BytesIO(base64.b64decode(data)))
    assert max(sent.size) == 1568 and sent.getpixel((10, 10))[:3] == (255, 0, 0)
    # The answer is that call's final reply, written looking at the image.
    assert loop_requests(bot)[0]["stream"] is True
    assert not any(is_synthesis(r.body) for r in bot.llm_server.requests)


async def test_a_post_with_text_and_images_sends_both(bot):
    message = bot.feishu.add_post_message(
        "om_post", chat_id=CHAT, text="which is brighter?", images=[png(), png(colour="blue")]
    )
    await push(bot, message)
    await bot.reply("om_post")
    body = loop_requests(bot)[0]
    assert "which is brighter?" in all_text(body)
    assert len(image_urls(body)) == 2


async def test_a_file_is_read_and_remembered_for_the_follow_up(bot):
    report = docx("Quarterly report", "Revenue rose 12% to 4.2 million yuan.")
    message = bot.feishu.add_file_message("om_file", chat_id=CHAT, data=report, file_name="q3.docx")
    await push(bot, message)
    await bot.reply("om_file")
    await bot.settle()
    first = loop_requests(bot)[0]
    assert "Revenue rose 12% to 4.2 million yuan." in all_text(first)
    assert "[File: q3.docx" in all_text(first)

    downloads = len([r for r in bot.feishu.requests if "/resources/" in r.path])
    await bot.say("om_follow", "what did revenue do?")
    await bot.reply("om_follow")
    follow_up = loop_requests(bot)[-1]
    assert "Revenue rose 12%" in all_text(follow_up)  # from history, not a new download
    assert len([r for r in bot.feishu.requests if "/resources/" in r.path]) == downloads


async def test_a_file_over_the_limit_is_refused_with_the_limit_and_no_model_call(
    tmp_path, feishu, llm_server
):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_download_max_bytes=64 * 1024)
    async with running_bot(settings, feishu, llm_server) as bot:
        message = feishu.add_file_message(
            "om_big", chat_id=CHAT, data=b"x" * (200 * 1024), file_name="dump.txt"
        )
        await push(bot, message)
        text = await bot.reply("om_big")
    assert "dump.txt is 200 KiB" in text and "the limit is 64 KiB" in text
    assert llm_server.requests == []


async def test_a_corrupt_image_and_a_sticker_are_said_plainly(bot):
    broken = bot.feishu.add_image_message("om_bad", chat_id=CHAT, data=b"not a picture at all")
    await push(bot, broken)
    said = await bot.reply("om_bad")
    assert "I can read PNG, JPEG, WebP, GIF, BMP and TIFF images." in said
    sticker = bot.feishu.add_sticker_message("om_sticker", chat_id=CHAT)
    await push(bot, sticker)
    assert "Stickers cannot be downloaded" in await bot.reply("om_sticker")


async def test_without_vision_the_model_is_told_it_cannot_see(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, llm_vision=False)
    async with running_bot(settings, feishu, llm_server) as bot:
        message = feishu.add_image_message("om_img", chat_id=CHAT, data=png())
        await push(bot, message)
        await bot.reply("om_img")
    for body in [r.body for r in llm_server.requests]:
        assert image_urls(body) == []
    assert "that you cannot see" in all_text(loop_requests_of(llm_server)[0])


async def test_without_vision_a_vision_model_describes_the_image(tmp_path, feishu, llm_server):
    def model(body):
        if body["model"] == "eyes":
            return Reply(content="A red rectangle with the word STOP.")
        return Reply(content="It says STOP.")

    llm_server.handler = model
    settings = settings_for(tmp_path, feishu, llm_server, llm_vision=False, llm_vision_model="eyes")
    async with running_bot(settings, feishu, llm_server) as bot:
        message = feishu.add_image_message("om_img", chat_id=CHAT, data=png())
        await push(bot, message)
        await bot.reply("om_img")
    vision, *main = [r.body for r in llm_server.requests]
    assert vision["model"] == "eyes" and len(image_urls(vision)) == 1
    assert all(image_urls(body) == [] for body in main)
    assert "A red rectangle with the word STOP." in all_text(main[0])


async def test_a_reply_carries_the_parent_messages_image_and_text(bot):
    parent = bot.feishu.add_image_message("om_parent", chat_id=CHAT, data=png(colour="green"))
    await bot.say(
        "om_child", "what colour is this?", parent_id=parent.message_id, root_id=parent.message_id
    )
    await bot.reply("om_child")
    body = loop_requests(bot)[0]
    assert len(image_urls(body)) == 1
    assert "what colour is this?" in all_text(body)


async def test_a_merge_forward_is_expanded_into_its_messages(bot):
    first = bot.feishu.add_message("om_f1", chat_id="oc_team", content={"text": "deploy is at 5pm"})
    second = bot.feishu.add_image_message("om_f2", chat_id="oc_team", data=png())
    forward = bot.feishu.add_merge_forward("om_fwd", chat_id=CHAT, messages=[first, second])
    await push(bot, forward)
    await bot.reply("om_fwd")
    body = loop_requests(bot)[0]
    assert "deploy is at 5pm" in all_text(body)
    assert "[Forwarded messages]" in all_text(body)
    assert len(image_urls(body)) == 1


def loop_requests_of(server) -> list[dict]:
    return [r.body for r in server.requests if not is_synthesis(r.body)]


async def test_a_refused_image_falls_back_to_text_and_still_answers(tmp_path, feishu, llm_server):
    def model(body):
        if image_urls(body):
            return Reply.error(400, "image_url is not supported by this model")
        return Reply(content="I cannot see images, but here is what I can say.")

    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        message = feishu.add_image_message("om_img", chat_id=CHAT, data=png())
        await push(bot, message)
        text = await bot.reply("om_img")
    assert "I cannot see images" in text
    sent = [r.body for r in llm_server.requests]
    assert image_urls(sent[0]) and all(image_urls(body) == [] for body in sent[1:])
    assert "that you cannot see" in all_text(sent[1])


# Real llama.cpp error bodies: a prompt larger than the server's context (a 400), and an
# image sent to a model started without its projector (a 500).
LLAMA_CPP_CONTEXT_FULL = {
    "error": {
        "code": 400,
        "message": "request (9000 tokens) exceeds the available context size (8192 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 9000,
        "n_ctx": 8192,
    }
}
LLAMA_CPP_NO_PROJECTOR = {
    "error": {
        "code": 500,
        "message": "image input is not supported - hint: if this is unexpected, you may need "
        "to provide the mmproj",
        "type": "server_error",
    }
}


async def test_a_prompt_too_long_with_an_image_keeps_images_on(tmp_path, feishu, llm_server):
    # It was taken for "the model refuses images": the request went again as text, and
    # images went off for the whole process.
    overflowed: list[bool] = []

    def model(body):
        if image_urls(body) and not overflowed:
            overflowed.append(True)
            return Reply(status=400, body=LLAMA_CPP_CONTEXT_FULL)
        return Reply(content="A square.")

    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_t1", "Earlier, we talked about the roadmap at length. " * 20)
        await bot.reply("om_t1")  # a history the context guard can summarise
        before = len(llm_server.requests)
        await push(bot, feishu.add_image_message("om_img1", chat_id=CHAT, data=png()))
        first = await bot.reply("om_img1")
        await push(bot, feishu.add_image_message("om_img2", chat_id=CHAT, data=png(colour="blue")))
        second = await bot.reply("om_img2")
    assert "A square." in first and "A square." in second
    sent = [r.body for r in llm_server.requests[before:]]
    assert not any("that you cannot see" in all_text(body) for body in sent)
    refused, *later = sent
    assert image_urls(refused)
    # The context guard summarised the history and asked again, with the image.
    red, blue = (base64.b64encode(png(colour=c)).decode() for c in ("red", "blue"))
    retried = [body for body in later if any(red in url for url in image_urls(body))]
    assert retried and len(retried[0]["messages"]) < len(refused["messages"])
    # And the next message's image still goes as an image.
    assert any(blue in url for body in later for url in image_urls(body))


async def test_a_model_without_a_projector_gets_images_as_text_at_once(
    tmp_path, feishu, llm_server
):
    def model(body):
        if image_urls(body):
            return Reply(status=500, body=LLAMA_CPP_NO_PROJECTOR)
        return Reply(content="I cannot see images, but here is what I can say.")

    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await push(bot, feishu.add_image_message("om_img1", chat_id=CHAT, data=png()))
        first = await bot.reply("om_img1")
        await push(bot, feishu.add_image_message("om_img2", chat_id=CHAT, data=png(colour="blue")))
        second = await bot.reply("om_img2")
    assert "I cannot see images" in first and "I cannot see images" in second
    sent = [r.body for r in llm_server.requests]
    # The 500 says what it is: not retried as a server failure, and images go as text after.
    assert sum(1 for body in sent if image_urls(body)) == 1
    assert "that you cannot see" in all_text(sent[-1])


async def test_a_voice_message_is_transcribed_and_answered(tmp_path, feishu, llm_server):
    llm_server.transcript = "what is on the agenda today"
    settings = settings_for(tmp_path, feishu, llm_server, llm_transcription_model="whisper-1")
    async with running_bot(settings, feishu, llm_server) as bot:
        message = feishu.add_audio_message(
            "om_voice", chat_id=CHAT, data=b"OggS fake opus", duration_ms=3000
        )
        await push(bot, message)
        await bot.reply("om_voice")
    (sent,) = llm_server.transcriptions
    assert sent["model"] == "whisper-1" and sent["data"] == b"OggS fake opus"
    assert loop_requests_of(llm_server)[0]["messages"][-1]["content"].startswith(
        "what is on the agenda today"
    )


async def test_without_transcription_voice_is_said_to_be_unsupported(bot):
    message = bot.feishu.add_audio_message("om_voice", chat_id=CHAT, data=b"x", duration_ms=900)
    await push(bot, message)
    assert "can't listen to voice messages" in await bot.reply("om_voice")
    assert loop_requests(bot) == []


async def test_in_a_group_a_file_waits_for_the_question_that_mentions_the_bot(bot):
    report = docx("Launch checklist", "Step 3: rotate the API keys.")
    dropped = bot.feishu.add_file_message(
        "om_gfile", chat_id="oc_group", chat_type="group", data=report, file_name="launch.docx"
    )
    await push(bot, dropped)
    await bot.settle()
    assert bot.replies_to("om_gfile") == []  # not for the bot: no reply, no download yet
    await bot.say(
        "om_gq", "@_user_1 what is step 3?", chat_type="group", chat_id="oc_group",
        mentions=[("@_user_1", BOT_OPEN_ID, "larkgate")],
    )  # fmt: skip
    await bot.reply("om_gq")
    assert "Step 3: rotate the API keys." in all_text(loop_requests(bot)[0])
    # Taken once: the next question does not read the file again.
    await bot.settle()
    await bot.say(
        "om_gq2", "@_user_1 thanks", chat_type="group", chat_id="oc_group",
        mentions=[("@_user_1", BOT_OPEN_ID, "larkgate")],
    )  # fmt: skip
    await bot.reply("om_gq2")
    downloads = [r for r in bot.feishu.requests if "/resources/" in r.path]
    assert len(downloads) == 1


async def test_an_image_only_post_is_answered_not_refused(bot):
    message = bot.feishu.add_post_message("om_ipost", chat_id=CHAT, images=[png()])
    await push(bot, message)
    await bot.reply("om_ipost")
    body = loop_requests(bot)[0]
    assert len(image_urls(body)) == 1
    # No words beside the image: the model is told what is wanted, not sent an empty question.
    assert "Describe what it shows" in all_text(body)


async def test_a_file_waiting_in_a_group_is_never_read_for_someone_else(bot):
    secret = docx("Payroll", "Ada earns 90,000.")
    dropped = bot.feishu.add_file_message(
        "om_pay", chat_id="oc_group", chat_type="group", data=secret, file_name="pay.docx"
    )
    await push(bot, dropped)
    await bot.settle()
    # Another member asks the bot in the same group: the file is not theirs to have read.
    await bot.say(
        "om_other", "@_user_1 what does the file say?", chat_type="group", chat_id="oc_group",
        sender_open_id="ou_mallory", mentions=[("@_user_1", BOT_OPEN_ID, "larkgate")],
    )  # fmt: skip
    await bot.reply("om_other")
    assert "90,000" not in all_text(loop_requests(bot)[0])
    assert not [r for r in bot.feishu.requests if "/resources/" in r.path]
