"""What a turn reads of the images, files and forwarded messages people send.

For one inbound message, :class:`MediaReader` gathers the attachments of the message, of
the message it replies to (fetched by id: its text too, unless history has it) and of the
messages a merge_forward carries; downloads each within the size limit; and turns them
into what the model takes: images (checked and shrunk, then as ``image_url`` parts or as
text for a model without vision) and documents (their text, cut to a budget, with a note
of what was cut). What cannot be read is said to the user in words that name the reason
and the limit; nothing here raises for bad input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from bot.config import MediaConfig
from bot.engine import ImagePart
from bot.feishu.content import Attachment
from bot.feishu.errors import FeishuError, FeishuResourceTooLarge, FeishuResourceUnavailable
from bot.feishu.events import InboundMessage
from bot.feishu.fetched import FetchedMessage
from bot.feishu.resources import Resource
from bot.media import MediaError, format_size
from bot.media.reader_pool import ReaderPool
from bot.runtime.turn.vision import ImageText

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# A message may carry many images (a post, a forwarded thread): the model gets the first.
MAX_IMAGES = 8
MAX_DOCUMENTS = 5
# Forwarded threads can be long: their text is cut, like any document.
FORWARDED_CHARS = 8_000
_DOWNLOADS_AT_ONCE = 3


# Turns a recording into text (``OpenAICompatibleLLM.transcribe`` with the configured model).
Transcribe = Callable[[bytes, str], Awaitable[str]]

VOICE_UNSUPPORTED = (
    "I can't listen to voice messages here (no transcription model is configured); "
    "please type your message."
)


class MediaSource(Protocol):
    """The Feishu calls the reader makes (``FeishuClient`` has them)."""

    async def download_resource(
        self, message_id: str, key: str, *, kind: str, max_bytes: int
    ) -> Resource: ...

    async def get_message(self, message_id: str) -> list[FetchedMessage]: ...


@dataclass(frozen=True, slots=True)
class TurnMedia:
    """What a turn adds to its question: images, document texts, context, problems."""

    images: tuple[ImagePart, ...] = ()
    # Each a block the model reads, e.g. "[File: q3.pdf (PDF)]\n...", kept in history too.
    documents: tuple[str, ...] = ()
    # Text about the turn for the model: the replied-to message, image notes.
    context: tuple[str, ...] = ()
    # What could not be read, in the user's words ("q3.pdf is 24.3 MiB; the limit is 20 MiB").
    problems: tuple[str, ...] = ()
    # The names of what was read, for an acknowledgement ("q3.pdf").
    read: tuple[str, ...] = ()
    # What voice messages said, transcribed: the user's own words.
    spoken: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.images or self.documents or self.context or self.problems)


@dataclass(frozen=True, slots=True)
class _Unread:
    """Why an attachment could not be read, in the user's words."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Document:
    block: str
    name: str


@dataclass(frozen=True, slots=True)
class _Spoken:
    text: str


@dataclass(slots=True)
class _Gathered:
    """Attachments to read: (message id to download with, attachment), in order."""

    attachments: list[tuple[str, Attachment]] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class MediaReader:
    def __init__(
        self,
        source: MediaSource,
        config: MediaConfig,
        images: ImageText,
        readers: ReaderPool,
        *,
        transcribe: Transcribe | None = None,
    ) -> None:
        self._source = source
        # Parses what was downloaded, in reader processes (never in the bot's own).
        self._readers = readers
        # Files held here, downloaded for a reader or in one, for every turn at once: what a
        # flood of 20 MiB files costs this process is bounded, not one download per file.
        self._held = asyncio.Semaphore(readers.limits.processes + 1)
        self._config = config
        self._image_text = images
        self._transcribe = transcribe

    async def read(
        self,
        message: InboundMessage,
        *,
        known_ids: Sequence[str] = (),
        earlier: Sequence[tuple[str, Attachment]] = (),
    ) -> TurnMedia:
        """The media of ``message`` and of ``earlier`` (files its sender posted for it
        before: message id, attachment); ``known_ids`` are message ids already in history
        (a replied-to message among them is not repeated as text)."""
        own = [(message.message_id, a) for a in message.attachments]
        gathered = _Gathered([*earlier, *own])
        if message.message_type == "merge_forward":
            await self._forwarded(message.message_id, gathered)
        if message.parent_id:
            await self._parent(message.parent_id, message.parent_id in known_ids, gathered)
        if not gathered.attachments:
            return TurnMedia(context=tuple(gathered.context), problems=tuple(gathered.problems))
        return await self._download_all(gathered)

    async def _forwarded(self, message_id: str, gathered: _Gathered) -> None:
        fetched = await self._fetch(message_id, "the forwarded messages", gathered)
        children = [m for m in fetched if m.upper_message_id == message_id]
        if not children:
            return
        lines = [f"{_sender(m)}: {m.text}" for m in children if m.text]
        text = "\n".join(lines)
        if len(text) > FORWARDED_CHARS:
            text = text[:FORWARDED_CHARS] + f"\n[cut: {len(lines)} forwarded messages in all]"
        gathered.context.append(f"[Forwarded messages]\n{text}")
        for child in children:
            for attachment in child.attachments:
                gathered.attachments.append((child.resource_message_id or message_id, attachment))

    async def _parent(self, parent_id: str, in_history: bool, gathered: _Gathered) -> None:
        fetched = await self._fetch(parent_id, "the message this replies to", gathered)
        if not fetched:
            return
        parent = fetched[0]
        if not in_history and parent.text:
            heading = f"[The message this replies to, from {_sender(parent)}]"
            gathered.context.append(f"{heading}\n{parent.text}")
        for attachment in parent.attachments:
            gathered.attachments.append((parent.resource_message_id or parent_id, attachment))

    async def _fetch(self, message_id: str, what: str, gathered: _Gathered) -> list[FetchedMessage]:
        try:
            return await self._source.get_message(message_id)
        except FeishuError as exc:
            logger.warning("could not fetch %s (%s): %s", message_id, what, exc)
            gathered.problems.append(f"I could not read {what} ({_reason(exc)}).")
            return []

    async def _download_all(self, gathered: _Gathered) -> TurnMedia:
        wanted = _dedupe(gathered.attachments)
        images_wanted = [item for item in wanted if item[1].kind == "image"][:MAX_IMAGES]
        files_wanted = [item for item in wanted if item[1].kind == "file"][:MAX_DOCUMENTS]
        voice_wanted = [item for item in wanted if item[1].kind == "audio"][:MAX_DOCUMENTS]
        problems = list(gathered.problems)
        problems += [_unreadable(a) for _, a in wanted if a.kind not in _READABLE]
        gate = asyncio.Semaphore(_DOWNLOADS_AT_ONCE)
        results = await asyncio.gather(
            *(self._image(mid, a, gate) for mid, a in images_wanted),
            *(self._document(mid, a, gate) for mid, a in files_wanted),
            *(self._voice(mid, a, gate) for mid, a in voice_wanted),
        )
        images: list[ImagePart] = []
        documents: list[str] = []
        read: list[str] = []
        spoken: list[str] = []
        for outcome in results:
            if isinstance(outcome, _Unread):
                problems.append(outcome.reason)
            elif isinstance(outcome, ImagePart):
                images.append(outcome)
                read.append(outcome.label)
            elif isinstance(outcome, _Spoken):
                spoken.append(outcome.text)
            else:
                documents.append(outcome.block)
                read.append(outcome.name)
        context = list(gathered.context)
        if images and not self._config.main_sees_images:
            context += [await self._image_text.note(image) for image in images]
            images = []
        return TurnMedia(
            tuple(images),
            tuple(documents),
            tuple(context),
            tuple(problems),
            tuple(read),
            tuple(spoken),
        )

    async def _voice(
        self, message_id: str, attachment: Attachment, gate: asyncio.Semaphore
    ) -> _Spoken | _Unread:
        if self._transcribe is None:
            return _Unread(VOICE_UNSUPPORTED)
        resource = await self._download(message_id, attachment, "file", "the voice message", gate)
        if isinstance(resource, _Unread):
            return resource
        try:
            text = await self._transcribe(resource.data, attachment.name or "voice.opus")
        except Exception as exc:  # the endpoint failing must still leave a reply
            logger.warning("transcribing %s failed: %s", message_id, type(exc).__name__)
            return _Unread("I could not transcribe the voice message; please type it.")
        if not text:
            return _Unread("The voice message had no words I could make out.")
        return _Spoken(text)

    async def _image(
        self, message_id: str, attachment: Attachment, gate: asyncio.Semaphore
    ) -> ImagePart | _Unread:
        label = attachment.name or "an image"
        async with self._held:
            resource = await self._download(message_id, attachment, "image", label, gate)
            if isinstance(resource, _Unread):
                return resource
            try:
                prepared = await self._readers.prepare_image(
                    resource.data,
                    max_side=self._config.image_max_side,
                    max_bytes=self._config.image_max_bytes,
                )
            except MediaError as exc:
                return _Unread(f"{label}: {exc.reason}")
        name = attachment.name or f"image {attachment.key[-6:]}"
        return ImagePart(prepared.data_url(), label=name)

    async def _document(
        self, message_id: str, attachment: Attachment, gate: asyncio.Semaphore
    ) -> _Document | _Unread:
        name = attachment.name or "the file"
        async with self._held:
            resource = await self._download(message_id, attachment, "file", name, gate)
            if isinstance(resource, _Unread):
                return resource
            try:
                extracted = await self._readers.extract_text(
                    resource.data,
                    file_name=attachment.name or resource.file_name,
                    max_chars=self._config.file_text_chars,
                )
            except MediaError as exc:
                return _Unread(f"{name}: {exc.reason}")
        block = f"[File: {name} ({extracted.kind})]\n{extracted.text}"
        return _Document(f"{block}\n{extracted.note}" if extracted.note else block, name)

    async def _download(
        self,
        message_id: str,
        attachment: Attachment,
        kind: str,
        label: str,
        gate: asyncio.Semaphore,
    ) -> Resource | _Unread:
        limit = self._config.max_download_bytes
        if attachment.size and attachment.size > limit:
            return _too_large(label, attachment.size, limit)
        try:
            async with gate:
                return await self._source.download_resource(
                    message_id, attachment.key, kind=kind, max_bytes=limit
                )
        except FeishuResourceTooLarge as exc:
            return _too_large(label, exc.size, exc.limit or limit)
        except FeishuError as exc:
            logger.warning("could not download %s of %s: %s", kind, message_id, exc)
            return _Unread(f"I could not download {label} ({_reason(exc)}).")


def _too_large(label: str, size: int | None, limit: int) -> _Unread:
    said = format_size(size) if size else f"over {format_size(limit)}"
    return _Unread(f"{label} is {said}; the limit is {format_size(limit)}.")


def _dedupe(items: list[tuple[str, Attachment]]) -> list[tuple[str, Attachment]]:
    seen: set[str] = set()
    out = []
    for message_id, attachment in items:
        if attachment.key and attachment.key not in seen:
            seen.add(attachment.key)
            out.append((message_id, attachment))
    return out


_READABLE = ("image", "file", "audio")


def _unreadable(attachment: Attachment) -> str:
    if attachment.kind == "sticker":
        return "Stickers cannot be downloaded by bots, so I cannot see this one."
    if attachment.kind == "media":
        return f"I cannot watch videos ({attachment.name or 'a video'})."
    return f"I cannot read {attachment.kind} messages."


def _reason(error: FeishuError) -> str:
    if isinstance(error, FeishuResourceUnavailable):
        return "Feishu does not let bots download it: it may have been recalled or expired"
    return f"Feishu said: {error.msg}" if getattr(error, "msg", "") else "Feishu did not answer"


def _sender(message: FetchedMessage) -> str:
    return "a bot" if message.sender_type == "app" else (message.sender_id or "someone")
