"""Images for a main model that may not see them: descriptions, notes, and the fallback
when an endpoint refuses images, over the real OpenAI client against the fake server."""

from __future__ import annotations

import logging

import pytest

from bot.engine import ImagePart, LLMContextOverflow, LLMRequestError, Message, OpenAICompatibleLLM
from bot.runtime.turn.vision import ImageDescriber, ImageFallbackLLM, ImageText

from fakes.openai_server import Reply

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

    with caplog.at_level(logging.WARNING, logger="bot.runtime.turn.vision"):
        first = await model.chat(question())
        second = await model.chat(question())
    await main.aclose()

    assert (first.content, second.content) == ("I cannot see the image.", "Still cannot.")
    assert isinstance(sent_content(fake_openai, 0), list)  # tried with the image
    for index in (1, 2):  # then, and from then on, as a note
        text = sent_content(fake_openai, index)
        assert isinstance(text, str) and "image (shot.png) that you cannot see" in text
    assert len(fake_openai.requests) == 3  # the later request did not try the image first
    assert sum("does not take images" in r.message for r in caplog.records) == 1


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


# Real servers' bodies (see tests/engine/test_llm_errors.py for the full set).
LLAMA_CPP_NO_PROJECTOR = Reply(
    status=500,
    body={
        "error": {
            "code": 500,
            "message": "image input is not supported - hint: if this is unexpected, you may "
            "need to provide the mmproj",
            "type": "server_error",
        }
    },
)
LLAMA_CPP_CONTEXT_FULL = Reply(
    status=400,
    body={
        "error": {
            "code": 400,
            "message": "request (5000 tokens) exceeds the available context size (4096 "
            "tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    },
)


async def test_a_prompt_too_long_with_an_image_is_not_taken_for_refused_images(fake_openai):
    fake_openai.push(LLAMA_CPP_CONTEXT_FULL)
    fake_openai.push_text("I can see it.")
    main = OpenAICompatibleLLM(
        base_url=fake_openai.base_url, api_key="sk-test", model="main", max_retries=2
    )
    model = ImageFallbackLLM(main, ImageText(None))

    with pytest.raises(LLMContextOverflow):  # for the context guard, not the image fallback
        await model.chat(question())
    answer = await model.chat(question())
    await main.aclose()

    assert not model.refuses_images
    assert answer.content == "I can see it."
    assert len(fake_openai.requests) == 2  # no retry of the first, and no text-only copy
    assert all(isinstance(sent_content(fake_openai, i), list) for i in (0, 1))  # images kept


async def test_llama_cpp_without_a_projector_is_answered_as_text_at_once(fake_openai):
    # A 500 that says what it is: not retried as a server failure, images off from then on.
    fake_openai.push(LLAMA_CPP_NO_PROJECTOR)
    fake_openai.push_text("I cannot see the image.")
    fake_openai.push_text("Still cannot.")
    main = OpenAICompatibleLLM(
        base_url=fake_openai.base_url, api_key="sk-test", model="main", max_retries=2
    )
    model = ImageFallbackLLM(main, ImageText(None))

    first = await model.chat(question())
    chunks = [d.content async for d in model.stream_chat(question())]
    await main.aclose()

    assert model.refuses_images
    assert first.content == "I cannot see the image." and "".join(chunks) == "Still cannot."
    assert len(fake_openai.requests) == 3
    assert isinstance(sent_content(fake_openai, 0), list)
    assert all(isinstance(sent_content(fake_openai, i), str) for i in (1, 2))


async def test_a_request_with_images_refused_without_a_reason_goes_again_as_text_once(
    fake_openai, caplog
):
    fake_openai.push_error(400, message="Invalid request.")
    fake_openai.push_text("Without the image, then.")
    fake_openai.push_text("I can see it.")
    main = llm(fake_openai)
    model = ImageFallbackLLM(main, ImageText(None))

    with caplog.at_level(logging.WARNING, logger="bot.runtime.turn.vision"):
        first = await model.chat(question())
        second = await model.chat(question())
    await main.aclose()

    assert (first.content, second.content) == ("Without the image, then.", "I can see it.")
    assert not model.refuses_images  # nothing said it takes no images: the next one tries
    assert [type(sent_content(fake_openai, i)) for i in range(3)] == [list, str, list]
    assert any("without saying why" in r.message for r in caplog.records)
