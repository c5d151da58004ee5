"""Images for a main model that may not see them: descriptions, notes, and the fallback
when an endpoint refuses images, over the real OpenAI client against the fake server."""

from __future__ import annotations

import logging

import pytest

from bot.engine import ImagePart, LLMRequestError, Message, OpenAICompatibleLLM
from bot.runtime.vision import ImageDescriber, ImageFallbackLLM, ImageText

PNG_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def llm(server, model: str = "main") -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        base_url=server.base_url, api_key="sk-test", model=model, max_retries=0
    )


def question() -> list[Message]:
    return [Message.user("What does it say?", images=(ImagePart(PNG_URL, label="shot.png"),))]


def sent_content(server, index: int):
    return server.requests[index].body["messages"][-1]["content"]


async def test_a_refused_image_request_is_retried_as_text_and_said_once(fake_openai, caplog):
    fake_openai.push_error(400, message="image input is not supported by this model")
    fake_openai.push_text("I cannot see the image.")
    fake_openai.push_text("Still cannot.")
    main = llm(fake_openai)
    model = ImageFallbackLLM(main, ImageText(None))

    with caplog.at_level(logging.WARNING, logger="bot.runtime.vision"):
        first = await model.chat(question())
        second = await model.chat(question())
    await main.aclose()

    assert (first.content, second.content) == ("I cannot see the image.", "Still cannot.")
    assert isinstance(sent_content(fake_openai, 0), list)  # tried with the image
    for index in (1, 2):  # then, and from then on, as a note
        text = sent_content(fake_openai, index)
        assert isinstance(text, str) and "image (shot.png) that you cannot see" in text
    assert len(fake_openai.requests) == 3  # the later request did not try the image first
    assert sum("refused a request with images" in r.message for r in caplog.records) == 1


async def test_a_vision_model_describes_each_image_once(fake_openai):
    fake_openai.push_text("A sign that says OPEN.")
    vision = llm(fake_openai, "vision")
    images = ImageText(ImageDescriber(vision))

    first = await images.without_images(question())
    again = await images.without_images(question())
    await vision.aclose()

    assert len(fake_openai.requests) == 1  # cached by the image
    assert fake_openai.requests[0].body["model"] == "vision"
    assert "A sign that says OPEN." in first[0].content
    assert first[0].images == () and again[0].content == first[0].content


async def test_a_failing_vision_model_leaves_a_note_not_a_failed_turn(fake_openai):
    fake_openai.push_error(500, times=5)
    vision = llm(fake_openai, "vision")
    notes = await ImageText(ImageDescriber(vision)).without_images(question())
    await vision.aclose()
    assert "cannot see" in notes[0].content


async def test_other_request_errors_are_not_mistaken_for_refused_images(fake_openai):
    fake_openai.push_error(401, message="bad key")
    main = llm(fake_openai)
    model = ImageFallbackLLM(main, ImageText(None))
    with pytest.raises(LLMRequestError):
        await model.chat(question())
    await main.aclose()
    assert len(fake_openai.requests) == 1
    assert not model.refuses_images
