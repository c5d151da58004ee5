"""How images reach a main model that may not see them.

Three ways, decided by the settings and by the endpoint itself:

- the main model sees images (``LLM_VISION=true``): they go as ``image_url`` parts;
- it does not, and a vision model is configured (``LLM_VISION_MODEL``): that model
  describes each image once (cached by the image's key) and the description goes as text;
- neither: the main model is told an image was sent that it cannot see.

An endpoint that says it takes no images (``LLMImagesUnsupported``: llama.cpp without a
projector, a text model on OpenAI, vLLM, Ollama... see ``bot.engine.llm_errors``) is
treated as the second or third case from then on: :class:`ImageFallbackLLM` retries that
request without the images and says so in the log once. A request with images refused
without a reason (a bare 400) goes again without them too, that once. Any other failure is
not about the images and is not taken for it: a prompt too long for the model
(``LLMContextOverflow``) goes to the context guard, with its images.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from bot.engine import LLM, ImagePart, LLMRequestError, LLMResponse, Message, StreamDelta
from bot.engine.llm import LLMImagesUnsupported
from bot.engine.messages import as_messages

logger = logging.getLogger(__name__)

DESCRIBE_PROMPT = (
    "Describe this image for someone who cannot see it and must answer questions about "
    "it: what it shows, its layout, and every piece of text in it, transcribed exactly "
    "(tables as Markdown tables). Be complete and factual; do not guess at what is unclear."
)
CACHED_DESCRIPTIONS = 256


def unseen_note(label: str) -> str:
    return (
        f"[The user sent an image ({label}) that you cannot see. If the question depends on "
        "it, say that you cannot see images and ask them to describe it or paste its text.]"
    )


def described_note(label: str, description: str) -> str:
    return f"[The user sent an image ({label}). A vision model describes it:]\n{description}"


class ImageDescriber:
    """Describes images with a vision model, each image once (by key), one call at a time
    per image however many turns ask."""

    def __init__(self, llm: LLM, *, cache_size: int = CACHED_DESCRIPTIONS) -> None:
        self._llm = llm
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[str]] = {}
        self._cache_size = cache_size

    async def describe(self, image: ImagePart) -> str:
        key = image_key(image)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._ask(image))
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        # shield: a turn that is stopped must not cancel what other turns wait for.
        description = await asyncio.shield(task)
        self._cache[key] = description
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return description

    async def _ask(self, image: ImagePart) -> str:
        response = await self._llm.chat([Message.user(DESCRIBE_PROMPT, images=(image,))])
        return response.content.strip() or "(the vision model gave no description)"


def image_key(image: ImagePart) -> str:
    return hashlib.sha256(image.url.encode()).hexdigest()


class ImageText:
    """Turns images into text for a model that cannot see them."""

    def __init__(self, describer: ImageDescriber | None) -> None:
        self._describer = describer

    async def note(self, image: ImagePart) -> str:
        label = image.label or "an image"
        if self._describer is None:
            return unseen_note(label)
        try:
            return described_note(label, await self._describer.describe(image))
        except Exception as exc:  # the vision model failing must not fail the turn
            logger.warning("could not describe %s: %s", label, type(exc).__name__)
            return unseen_note(label)

    async def without_images(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with every image replaced by its text."""
        out = []
        for message in messages:
            if not message.images:
                out.append(message)
                continue
            notes = [await self.note(image) for image in message.images]
            content = (
                "\n\n".join([message.content, *notes]) if message.content else "\n\n".join(notes)
            )
            out.append(replace(message, content=content, images=()))
        return out


class ImageFallbackLLM:
    """The main model, falling back to text when its endpoint refuses images.

    The first "images are not supported" marks the endpoint as blind (logged once); that
    request and every later one go without images, as descriptions or notes.
    """

    def __init__(self, llm: LLM, images: ImageText) -> None:
        self.wrapped = llm
        self._images = images
        self.refuses_images = False

    @property
    def model(self) -> str:
        return self.wrapped.model

    @property
    def abilities(self) -> Mapping[str, bool]:
        return self.wrapped.abilities

    async def chat(self, messages: Sequence[Any], **options: Any) -> LLMResponse:
        typed = as_messages(messages)
        if self.refuses_images and _has_images(typed):
            typed = await self._images.without_images(typed)
        try:
            return await self.wrapped.chat(typed, **options)
        except LLMRequestError as exc:
            if not self._refused(exc, typed):
                raise
        return await self.wrapped.chat(await self._images.without_images(typed), **options)

    async def stream_chat(
        self, messages: Sequence[Any], **options: Any
    ) -> AsyncIterator[StreamDelta]:
        typed = as_messages(messages)
        if self.refuses_images and _has_images(typed):
            typed = await self._images.without_images(typed)
        delivered = False
        try:
            async for delta in self.wrapped.stream_chat(typed, **options):
                delivered = delivered or bool(delta.content)
                yield delta
            return
        except LLMRequestError as exc:
            if delivered or not self._refused(exc, typed):
                raise
        async for delta in self.wrapped.stream_chat(
            await self._images.without_images(typed), **options
        ):
            yield delta

    def _refused(self, error: LLMRequestError, messages: Sequence[Message]) -> bool:
        """Was this a refusal of the images, so the request goes again without them?"""
        if not _has_images(messages):
            return False
        if isinstance(error, LLMImagesUnsupported):
            if not self.refuses_images:
                self.refuses_images = True
                logger.warning(
                    "the model %s does not take images (%s); images go to it as text from "
                    "now on (set LLM_VISION=false, and LLM_VISION_MODEL to describe them)",
                    self.model,
                    str(error)[:200],
                )
            return True
        # Refused without a reason: the images may be why (an unknown wording, an image the
        # server cannot decode), so this request goes once more without them. Nothing is
        # remembered, and a reason that is not the images (context, key) never gets here.
        if type(error) is LLMRequestError and error.status_code in _UNEXPLAINED:
            logger.warning(
                "the model %s refused a request with images without saying why (%s); it "
                "goes again with the images as text",
                self.model,
                str(error)[:200],
            )
            return True
        return False


# A request refused as malformed, which a part it cannot take (an image) would explain.
_UNEXPLAINED = frozenset({400, 422})


def _has_images(messages: Sequence[Message]) -> bool:
    return any(message.images for message in messages)
