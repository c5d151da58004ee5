"""Messages people send with files in them, in Feishu's real shapes, seeded with their files
so the bot can download them; and the ``im.message.receive_v1`` envelope for each.

Content shapes (Feishu's documentation; ``../shared/fixtures/feishu-real``):

- image ``{"image_key"}``; file ``{"file_key", "file_name"}``; audio ``{"file_key",
  "duration"}`` (ms); sticker ``{"file_key"}`` (its file is never served);
- post, as received (no locale wrapper): ``{"title", "content": [[{"tag": "text", ...}],
  [{"tag": "img", "image_key", "width", "height"}], ...]}``;
- merge_forward: the body is the plain string "Merged and Forwarded Message"; the
  forwarded messages are seeded messages with ``upper_message_id`` set, read back through
  ``GET /im/v1/messages/{id}`` (their files through the forward's id).

Each helper takes ``add_message``'s keywords (``chat_type``, ``sender_open_id``,
``root_id``, ``parent_id``, ``thread_id``, ``create_time_ms``) and returns the
:class:`FakeMessage`; keys are made up (``img_v3_fake_...``) unless given::

    image = fake.add_image_message("om_1", chat_id="oc_1", data=png)
    envelope = fake.message_event(image)          # push it to the bot's webhook
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..push import message_event as receive_envelope
from .messages import MERGE_FORWARD_BODY, FakeMessage
from .resources import ResourcesApi


class InboundApi(ResourcesApi):
    def add_image_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        data: bytes,
        image_key: str | None = None,
        content_type: str = "image/png",
        **fields: Any,
    ) -> FakeMessage:
        key = image_key or self._fake_key("img")
        message = self.add_message(
            message_id, chat_id=chat_id, msg_type="image", content={"image_key": key}, **fields
        )
        self.add_resource(message_id, key, data, kind="image", content_type=content_type)
        return message

    def add_file_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        data: bytes,
        file_name: str,
        file_key: str | None = None,
        content_type: str = "application/octet-stream",
        **fields: Any,
    ) -> FakeMessage:
        key = file_key or self._fake_key("file")
        content = {"file_key": key, "file_name": file_name}
        message = self.add_message(
            message_id, chat_id=chat_id, msg_type="file", content=content, **fields
        )
        self.add_resource(
            message_id, key, data, kind="file", content_type=content_type, file_name=file_name
        )
        return message

    def add_audio_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        data: bytes,
        duration_ms: int,
        file_key: str | None = None,
        content_type: str = "audio/opus",
        **fields: Any,
    ) -> FakeMessage:
        key = file_key or self._fake_key("file")
        content = {"file_key": key, "duration": duration_ms}
        message = self.add_message(
            message_id, chat_id=chat_id, msg_type="audio", content=content, **fields
        )
        self.add_resource(message_id, key, data, kind="file", content_type=content_type)
        return message

    def add_post_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        text: str = "",
        title: str = "",
        images: Sequence[bytes] = (),
        **fields: Any,
    ) -> FakeMessage:
        """A post: ``text`` as the first paragraph, then one paragraph per image."""
        paragraphs: list[list[dict[str, Any]]] = []
        if text:
            paragraphs.append([{"tag": "text", "text": text}])
        keys = [self._fake_key("img") for _ in images]
        for key in keys:
            paragraphs.append([{"tag": "img", "image_key": key, "width": 640, "height": 480}])
        content = {"title": title, "content": paragraphs}
        message = self.add_message(
            message_id, chat_id=chat_id, msg_type="post", content=content, **fields
        )
        for key, data in zip(keys, images, strict=True):
            self.add_resource(message_id, key, data, kind="image")
        return message

    def add_sticker_message(
        self, message_id: str, *, chat_id: str, file_key: str | None = None, **fields: Any
    ) -> FakeMessage:
        content = {"file_key": file_key or self._fake_key("file")}
        return self.add_message(
            message_id, chat_id=chat_id, msg_type="sticker", content=content, **fields
        )

    def add_merge_forward(
        self, message_id: str, *, chat_id: str, messages: Sequence[FakeMessage], **fields: Any
    ) -> FakeMessage:
        """A merge_forward of ``messages`` (seeded before, e.g. with the helpers above;
        they keep their chat and time, as forwarded messages do)."""
        forward = self.add_message(
            message_id,
            chat_id=chat_id,
            msg_type="merge_forward",
            content=MERGE_FORWARD_BODY,
            **fields,
        )
        for message in messages:
            message.upper_message_id = message_id
        return forward

    def message_event(
        self, message: FakeMessage, *, verification_token: str = "vt", event_id: str | None = None
    ) -> dict[str, Any]:
        """The ``im.message.receive_v1`` envelope of a seeded message (content as the API
        carries it), to push to the bot's webhook."""
        return receive_envelope(
            message_id=message.message_id,
            chat_id=message.chat_id,
            verification_token=verification_token,
            chat_type=message.chat_type,
            content=message.wire_content(),
            message_type=message.msg_type,
            sender_open_id=message.sender_id,
            root_id=message.root_id,
            parent_id=message.parent_id,
            thread_id=message.thread_id,
            create_time_ms=message.create_time_ms,
            event_id=event_id,
            app_id=self.app_id,
            sender_type=message.sender_type,
        )

    def _fake_key(self, prefix: str) -> str:
        return f"{prefix}_v3_fake_{next(self._ids):04d}"
