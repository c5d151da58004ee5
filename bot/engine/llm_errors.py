"""What an OpenAI-compatible endpoint's error means, read from what it says.

Servers disagree on statuses. llama.cpp answers "image input is not supported" and
"tools param requires --jinja flag" with a 500, which a reading by status alone takes
for a passing server failure and retries; OpenAI says ``context_length_exceeded`` in the
error's ``code``, llama.cpp says ``exceed_context_size_error`` in its ``type``, vLLM
only in words. So :func:`classify_error` reads the words (and the code and type) first
and the status second, and each kind gets its own treatment, never another kind's:

==================  ================================================  =========================
kind                recognised by                                     what follows
``context``         OpenAI's code, llama.cpp's type, the wording of   not retried; the context
                    OpenAI, vLLM, llama.cpp, DeepSeek, OpenRouter     guard cuts and asks again
``images``          the wording of llama.cpp, OpenAI, vLLM, Ollama,   not retried; that request
                    OpenRouter, DeepSeek                              goes again without images
``tools``           the wording of Ollama, llama.cpp without          not retried; the start-up
                    ``--jinja``, vLLM without auto tool choice        probe picks JSON mode
``auth``            401, 403                                          not retried
``quota``           429 with ``insufficient_quota`` (a spent quota)   not retried
``rate_limited``    429                                               retried after Retry-After
``timeout``         408                                               retried
``server``          5xx, or no status, saying none of the above       retried
``refused``         any other 4xx                                     not retried
==================  ================================================  =========================

Ollama has no context error to read: it cuts a prompt that does not fit, silently.
"""

from __future__ import annotations

import re
from typing import Literal

ErrorKind = Literal[
    "context", "images", "tools", "auth", "quota", "rate_limited", "timeout", "server", "refused"
]

# Worth asking again: the same request may succeed a moment later.
RETRIED: frozenset[ErrorKind] = frozenset({"rate_limited", "timeout", "server"})

# Machine-readable names of "the prompt does not fit": OpenAI's ``code``, llama.cpp's ``type``.
_CONTEXT_NAMES = frozenset({"context_length_exceeded", "exceed_context_size_error"})

_CONTEXT_WORDS = re.compile(
    "|".join(
        (
            r"exceeds (the available )?context size",  # llama.cpp
            r"larger than the max context size",  # older llama.cpp
            r"maximum context length",  # OpenAI, vLLM, DeepSeek, OpenRouter
            r"maximum model length",  # vLLM: "... is longer than the maximum model length of N"
            r"context_length_exceeded",
            r"context window",
            r"prompt is too long",
        )
    )
)

_IMAGE_WORDS = re.compile(
    "|".join(
        (
            # llama.cpp without a projector (a 500): "image input is not supported - hint: ...";
            # also "image_url is not supported", "images are not supported", ...
            r"\b(image|images|image_url|vision|multimodal)( input| inputs| content)?"
            r" (is|are) not supported",
            r"image_url is only supported by certain models",  # OpenAI
            r"does not support (image|images|vision|multimodal)",
            r"no endpoints found that support image input",  # OpenRouter
            r"is not a multimodal model",  # vLLM
            r"missing data required for image input",  # Ollama
            r"unknown variant `image_url`",  # DeepSeek
        )
    )
)

_TOOL_WORDS = re.compile(
    "|".join(
        (
            r"does not support tools",  # Ollama: "<model> does not support tools"
            r"tools param requires --jinja",  # llama.cpp without --jinja (a 500)
            r"unsupported param: tool_choice",  # the same llama.cpp, given tool_choice
            r"tool choice requires --enable-auto-tool-choice",  # vLLM without auto tool choice
            r"no endpoints found that support tool use",  # OpenRouter
        )
    )
)


def classify_error(
    status: int | None,
    *,
    code: str | None = None,
    error_type: str | None = None,
    message: str = "",
) -> ErrorKind:
    """The kind of a failed request, from its HTTP ``status`` (None: an error inside a
    stream) and the error body's ``code``, ``type`` and ``message``."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        # A spent quota comes as a 429 too, and waiting does not refill it.
        return "quota" if code == "insufficient_quota" else "rate_limited"
    said = message.lower()
    if code in _CONTEXT_NAMES or error_type in _CONTEXT_NAMES or _CONTEXT_WORDS.search(said):
        return "context"
    if _IMAGE_WORDS.search(said):
        return "images"
    if _TOOL_WORDS.search(said):
        return "tools"
    if status == 408:
        return "timeout"
    if status is None or status >= 500:
        return "server"
    return "refused"
