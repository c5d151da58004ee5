"""A turn's question as the model gets it: the text, what joined it, and its media.

The message's text (and messages that arrived while the turn waited) is the question;
what the reader found in its images, files, forwarded messages and the message it
replies to goes beside it: images on the question, documents as attachments, the rest
as context lines. What the conversation remembers of the message is its text and its
documents, so a follow-up about "the file" works without downloading it again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.engine import ImagePart, Message
from bot.feishu.content import Attachment
from bot.feishu.events import InboundMessage
from bot.runtime.turn.media import MediaReader, TurnMedia
from bot.store import LoadedConversation

# What the text of a message holds for its media ("[image]", "[file: q3.pdf]"): not words.
_PLACEHOLDERS = re.compile(r"\[(?:image|video|sticker|audio|file)(?::[^\]]*)?\]")
# Message types that are only an attachment: no words of the user's beside it.
ATTACHMENT_ONLY = ("image", "file", "audio", "media", "sticker")
FILE_ALONE = (
    "The user sent this file without a question. Acknowledge it in one or two sentences: "
    "say what it is and what it contains, and offer to answer questions about it."
)
IMAGE_ALONE = "The user sent this image without a question. Describe what it shows, briefly."


@dataclass(frozen=True, slots=True)
class Question:
    query: str
    history: list[Message]
    images: tuple[ImagePart, ...] = ()
    # What could not be read, said to the user before the answer.
    problems: tuple[str, ...] = ()
    # The user's entry in the conversation's history: the text and the documents.
    remembered: str = ""
    # False when there is nothing to ask the model: only attachments it could not read.
    answerable: bool = True


async def build_question(
    message: InboundMessage,
    early: Sequence[str],
    loaded: LoadedConversation,
    reader: MediaReader | None,
    *,
    earlier: Sequence[tuple[str, Attachment]] = (),
) -> Question:
    """``earlier``: files the sender posted before the question (message id, attachment)."""
    history = [Message(h.role, h.content, kind="history") for h in loaded.history]
    text = "\n".join([message.text, *early])
    if reader is None or not (has_media(message) or earlier):
        return Question(text, history, remembered=message.text)
    known = [h.message_id for h in loaded.history if h.message_id]
    media = await reader.read(message, known_ids=known, earlier=earlier)
    return _with_media(message, text, early, history, media)


def has_media(message: InboundMessage) -> bool:
    return bool(message.attachments or message.parent_id or message.message_type == "merge_forward")


def problems_text(problems: Sequence[str]) -> str:
    return "\n".join(f"⚠️ {problem}" for problem in problems)


def _with_media(
    message: InboundMessage,
    text: str,
    early: Sequence[str],
    history: list[Message],
    media: TurnMedia,
) -> Question:
    # Only an attachment, or a post of nothing but images (and the bot's mention).
    wordless = (
        message.message_type in ATTACHMENT_ONLY or not _PLACEHOLDERS.sub("", message.text).strip()
    )
    alone = wordless and not early
    readable = bool(media.images or media.documents or media.context or media.spoken)
    query = text
    spoken = "\n".join(media.spoken)
    if spoken:  # a voice message is the user speaking: its words are the question
        query = spoken if alone else f"{text}\n\n{spoken}"
    elif alone and readable:
        # The placeholder ("[file: q3.pdf]") is not a question: say what is wanted.
        ask = FILE_ALONE if message.message_type == "file" else IMAGE_ALONE
        query = f"{text}\n\n{ask}"
    if media.context:
        query = "\n\n".join([*media.context, query])
    attachments = [Message.user(block, kind="attachment") for block in media.documents]
    said = [f"(said in a voice message) {spoken}"] if spoken else []
    remembered = "\n\n".join([message.text, *said, *media.documents])
    return Question(
        query,
        [*history, *attachments],
        images=media.images,
        problems=media.problems,
        remembered=remembered,
        answerable=readable or not alone,
    )
