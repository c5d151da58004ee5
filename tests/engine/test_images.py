"""Images and documents in a run: what reaches the model over the wire, in the loop and in
synthesis, and what the engine's public functions accept."""

from __future__ import annotations

import pytest

from bot.engine import ImagePart, OpenAICompatibleLLM, ReActAgent, structured_llm_call
from bot.engine.context_guard import IMAGE_TOKENS, message_tokens
from bot.engine.messages import Message, as_message

# A 1×1 PNG: real image bytes, so a test reading the URL back sees what the bot sends.
PNG_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def provider(server) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        base_url=server.base_url, api_key="sk-test-not-a-secret", model="fake-vision"
    )


def image_parts(message: dict) -> list[dict]:
    content = message["content"]
    assert isinstance(content, list), content
    return [part for part in content if part["type"] == "image_url"]


async def test_the_question_carries_its_images_to_the_loop_and_to_synthesis(fake_openai):
    fake_openai.push_text("A red square.")
    fake_openai.push_text("It is a red square.")
    llm = provider(fake_openai)
    agent = ReActAgent(llm, [], synthesis="always")
    image = ImagePart(PNG_URL, detail="high", label="shot.png")

    result = await agent.run("What is in this picture?", images=[image])
    answer = "".join([d async for d in agent.stream_answer("What is in this picture?", result)])
    await llm.aclose()

    assert result.status == "completed"
    assert answer == "It is a red square."
    loop_request, synthesis_request = (r.body for r in fake_openai.requests)
    question = loop_request["messages"][-1]
    assert question["role"] == "user"
    assert question["content"][0] == {"type": "text", "text": "What is in this picture?"}
    assert image_parts(question) == [
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}}
    ]
    # Synthesis writes the answer looking at the same image, not only at the trace.
    assert image_parts(synthesis_request["messages"][-1])[0]["image_url"]["url"] == PNG_URL


async def test_a_run_without_images_sends_plain_text_content(fake_openai):
    fake_openai.push_text("Hi.")
    llm = provider(fake_openai)
    await ReActAgent(llm, []).run("Hello")
    await llm.aclose()
    assert fake_openai.requests[0].body["messages"][-1]["content"] == "Hello"


async def test_an_attachment_in_history_keeps_its_kind_and_reaches_synthesis_whole(fake_openai):
    document = "[File: q3.pdf]\n" + "Revenue rose 12% in Q3. " * 200  # ~5,000 chars
    fake_openai.push_text("Revenue rose 12%.")
    fake_openai.push_text("Q3 revenue rose 12%.")
    llm = provider(fake_openai)
    agent = ReActAgent(llm, [], synthesis="always")
    history = [Message.user(document, kind="attachment")]

    result = await agent.run("What happened to revenue?", history=history)
    _ = [d async for d in agent.stream_answer("What happened to revenue?", result)]
    await llm.aclose()

    assert any(m.kind == "attachment" for m in result.messages)
    loop_messages = fake_openai.requests[0].body["messages"]
    assert document in [m["content"] for m in loop_messages]
    synthesis_text = fake_openai.requests[1].body["messages"][-1]["content"]
    # History is cut to 1,000 characters in synthesis; a document the user sent is not.
    assert document.strip()[:4000] in synthesis_text


def test_openai_content_parts_become_text_and_images():
    message = as_message(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look: "},
                {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
                {"type": "text", "text": "what is it?"},
            ],
        }
    )
    assert message.content == "Look: what is it?"
    assert message.images == (ImagePart(PNG_URL, "low"),)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": ""}},
        {"type": "image_url", "image_url": {"detail": "high"}},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "huge"}},
    ],
)
def test_a_malformed_image_part_is_a_clear_error(part):
    with pytest.raises((TypeError, ValueError), match="image"):
        as_message({"role": "user", "content": [part]})


def test_images_count_in_the_context_budget():
    text_only = Message.user("What is this?")
    with_two = Message.user("What is this?", images=(ImagePart(PNG_URL), ImagePart(PNG_URL)))
    assert message_tokens(with_two) - message_tokens(text_only) == 2 * IMAGE_TOKENS


def test_an_image_repr_does_not_dump_the_data_url():
    assert len(repr(ImagePart(PNG_URL * 1000))) < 120


async def test_run_refuses_images_that_are_not_image_parts(fake_openai):
    llm = provider(fake_openai)
    with pytest.raises(TypeError, match="ImagePart"):
        await ReActAgent(llm, []).run("Hi", images=[PNG_URL])  # type: ignore[list-item]
    await llm.aclose()


async def test_structured_calls_take_openai_image_parts(fake_openai):
    fake_openai.push_text('{"colour": "red"}')
    llm = provider(fake_openai)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which colour?"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
            ],
        }
    ]
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}}
    result = await structured_llm_call(llm, messages, schema)
    await llm.aclose()
    assert result.value == {"colour": "red"}
    sent = fake_openai.requests[0].body["messages"]
    assert any(isinstance(m["content"], list) and image_parts(m) for m in sent)
