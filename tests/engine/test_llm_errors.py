"""Errors are read by what they say: real servers' error bodies, classified, and mapped by
the OpenAI provider to the engine error whose fallback fits (and retried only when a
retry can help), over the real SDK against the fake server."""

from __future__ import annotations

import string
from typing import Any

import httpx2
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bot.engine.llm import (
    LLMAuthError,
    LLMContextOverflow,
    LLMImagesUnsupported,
    LLMRequestError,
    LLMTransientError,
)
from bot.engine.llm_errors import RETRIED, classify_error
from bot.engine.messages import Message
from bot.engine.openai_compat import OpenAICompatibleLLM

from fakes.openai_server import FakeOpenAIServer, Reply


def openai_error(message: str, *, code: Any = None, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# (server, HTTP status, the body it sends, the kind it means). Bodies as the servers send them.
REAL_ERRORS: list[tuple[str, int, dict, str]] = [
    (
        "OpenAI, prompt too long",
        400,
        openai_error(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130512 tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
        ),
        "context",
    ),
    (
        "llama.cpp, prompt too long",
        400,
        {
            "error": {
                "code": 400,
                "message": "request (9000 tokens) exceeds the available context size "
                "(8192 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            }
        },
        "context",
    ),
    (
        "vLLM, prompt too long",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        "context",
    ),
    (
        "vLLM, prompt longer than the model",
        400,
        openai_error(
            "The decoder prompt (length 12324) is longer than the maximum model length of "
            "8192. Make sure that `max_model_len` is no smaller than the number of text "
            "tokens plus multimodal tokens. For image inputs, the number of image tokens "
            "depends on the number of images, and possibly their aspect ratios as well.",
            code=400,
            kind="BadRequestError",
        ),
        "context",
    ),
    (
        "llama.cpp without a projector, an image",
        500,
        {
            "error": {
                "code": 500,
                "message": "image input is not supported - hint: if this is unexpected, "
                "you may need to provide the mmproj",
                "type": "server_error",
            }
        },
        "images",
    ),
    (
        "OpenAI, an image to a text model",
        400,
        openai_error("Invalid content type. image_url is only supported by certain models."),
        "images",
    ),
    (
        "vLLM, an image to a text model",
        400,
        {
            "object": "error",
            "message": "facebook/opt-125m is not a multimodal model None",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        "images",
    ),
    (
        "Ollama, an image the model has no projector for",
        500,
        openai_error(
            "Failed to create new sequence: failed to process inputs: this model is missing "
            "data required for image input",
            kind="api_error",
        ),
        "images",
    ),
    (
        "OpenRouter, no provider takes images",
        404,
        {"error": {"message": "No endpoints found that support image input", "code": 404}},
        "images",
    ),
    (
        "Ollama, a model without tool support",
        400,
        openai_error(
            "registry.ollama.ai/library/gemma3:4b does not support tools", kind="api_error"
        ),
        "tools",
    ),
    (
        "llama.cpp without --jinja, tools",
        500,
        {
            "error": {
                "code": 500,
                "message": "tools param requires --jinja flag",
                "type": "server_error",
            }
        },
        "tools",
    ),
    (
        "vLLM without --enable-auto-tool-choice",
        400,
        {
            "object": "error",
            "message": '"auto" tool choice requires --enable-auto-tool-choice and '
            "--tool-call-parser to be set",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        "tools",
    ),
    (
        "OpenAI, a wrong key",
        401,
        openai_error("Incorrect API key provided: sk-abc.", code="invalid_api_key"),
        "auth",
    ),
    ("vLLM with --api-key, a wrong key", 401, {"error": "Unauthorized"}, "auth"),
    (
        "OpenAI, rate limited",
        429,
        openai_error(
            "Rate limit reached for gpt-4o on requests per min (RPM): Limit 500.",
            code="rate_limit_exceeded",
            kind="requests",
        ),
        "rate_limited",
    ),
    (
        "OpenAI, a spent quota",
        429,
        openai_error(
            "You exceeded your current quota, please check your plan and billing details.",
            code="insufficient_quota",
            kind="insufficient_quota",
        ),
        "quota",
    ),
    (
        "llama.cpp, still loading its model",
        503,
        {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
        "server",
    ),
    (
        "OpenAI, a bad parameter",
        400,
        openai_error("Invalid value for 'temperature': must be at most 2."),
        "refused",
    ),
]

# What the provider raises for each kind, and whether it asks again first.
RAISED = {
    "context": LLMContextOverflow,
    "images": LLMImagesUnsupported,
    "auth": LLMAuthError,
    "tools": LLMRequestError,
    "quota": LLMRequestError,
    "refused": LLMRequestError,
    "rate_limited": LLMTransientError,
    "server": LLMTransientError,
}


def said(body: dict) -> tuple[Any, Any, str]:
    """(code, type, message) of a body, as the SDK exposes them."""
    error = body.get("error", body)
    if not isinstance(error, dict):
        return None, None, str(body)
    code = error.get("code")
    return (None if code is None else str(code)), error.get("type"), str(error.get("message"))


@pytest.mark.parametrize(("server", "status", "body", "kind"), REAL_ERRORS, ids=lambda v: v)
def test_real_error_bodies_are_classified_by_what_they_say(server, status, body, kind):
    code, error_type, message = said(body)
    assert classify_error(status, code=code, error_type=error_type, message=message) == kind


@pytest.mark.parametrize(
    ("server", "status", "body", "kind"),
    [case for case in REAL_ERRORS if case[3] != "rate_limited"],
    ids=lambda v: v,
)
async def test_the_provider_raises_the_matching_error_and_retries_only_what_may_pass(
    fake_openai: FakeOpenAIServer, server, status, body, kind
):
    fake_openai.push(Reply(status=status, body=body), times=3)
    llm = OpenAICompatibleLLM(
        fake_openai.base_url,
        "sk-test",
        "test-model",
        max_retries=2,
        backoff_base=0.001,
        backoff_max=0.001,
        http_client=httpx2.AsyncClient(),
    )
    try:
        with pytest.raises(RAISED[kind]) as caught:
            await llm.chat([Message.user("hello")])
    finally:
        await llm.aclose()
    assert len(fake_openai.requests) == (3 if kind in RETRIED else 1)
    if kind in ("context", "images", "tools", "auth", "quota", "refused"):
        assert type(caught.value) is RAISED[kind]  # not a subclass meaning another fallback
        assert caught.value.status_code == status


# -- properties --------------------------------------------------------------------------------

CONTEXT_PHRASES = [
    "exceeds the available context size",
    "This model's maximum context length is 4096 tokens",
    "longer than the maximum model length of 8192",
]
IMAGE_PHRASES = [
    "image input is not supported",
    "image_url is only supported by certain models",
    "This model does not support image input",
    "is not a multimodal model",
]
PLAIN = st.text(alphabet=string.ascii_letters + string.digits + " .,:'", max_size=80)
NOT_SPECIAL = st.sampled_from([400, 404, 409, 413, 422, 500, 502, 503, None])


@given(st.sampled_from([401, 403]), PLAIN, st.sampled_from(CONTEXT_PHRASES + IMAGE_PHRASES))
def test_a_refused_key_is_auth_whatever_the_body_says(status, text, phrase):
    assert classify_error(status, message=f"{text} {phrase}") == "auth"


@given(NOT_SPECIAL, PLAIN, st.sampled_from(CONTEXT_PHRASES), st.sampled_from(IMAGE_PHRASES))
def test_a_prompt_too_long_is_never_taken_for_refused_images(status, text, context, image):
    # Even a context error that mentions images (vLLM's does) is a context error.
    assert classify_error(status, message=f"{text} {image}: {context}") == "context"
    assert classify_error(status, message=f"{context}. {image} {text}") == "context"


@given(NOT_SPECIAL, PLAIN, st.sampled_from(IMAGE_PHRASES))
def test_image_refusals_are_read_in_any_case_and_at_any_status(status, text, phrase):
    # Text that is itself a context error ("CONTEXT WINDOW") rightly wins over images.
    assume(classify_error(status, message=text) != "context")
    for message in (f"{text} {phrase}", f"{text} {phrase}".upper()):
        assert classify_error(status, message=message) == "images"


@given(st.integers(min_value=400, max_value=599), PLAIN)
def test_without_telling_words_the_status_decides(status, text):
    kind = classify_error(status, message=text)
    if status in (401, 403):
        assert kind == "auth"
    elif status == 429:
        assert kind == "rate_limited"
    elif status == 408:
        assert kind == "timeout"
    elif status >= 500:
        assert kind == "server"
    else:
        assert kind == "refused"
