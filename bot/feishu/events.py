"""Inbound Feishu events, parsed once at the edge into frozen, typed objects.

``parse_message_event`` turns a decrypted schema-2.0 ``im.message.receive_v1`` envelope into
an ``InboundMessage``; ``parse_card_action`` turns a ``card.action.trigger`` callback into a
``CardAction``. Neither raises: input they cannot use comes back as ``Rejected`` with a
reason that is safe to log (field names and types only, never content or tokens).

Decisions worth knowing:

- **The bot is matched by open_id only**, never by name, and only when ``bot_open_id`` is
  given (with ``None`` or ``""`` nothing counts as the bot). Its own mention is removed from
  ``text``; other mentions are rendered ``@Name``.
- **@all does not count as mentioning the bot.** ``@_all`` is rendered ``@<name>`` (the
  mention's name, e.g. "所有人", or "all") and always appears in ``mentions`` with key
  ``"@_all"``, even when Feishu left it out of the ``mentions`` array; callers that want to
  answer @all look for that key.
- **Bot senders still parse** (``sender_type`` as sent, e.g. "app"); dropping them is the
  caller's policy. Only a ``"user"`` sender must carry an open_id.
- Missing fields and ``""`` are the same thing; ids of the wrong type count as missing.
- ``text`` keeps what the user wrote: mentions rendered, posts flattened (see ``post.py``),
  other message types described (``[image]``, ``[file: report.pdf]``, ``[card]`` + its text…).
  Only the outer whitespace and the gap left by the removed bot mention are tidied.
- Mentions found only as post ``at`` tags (no ``mentions`` entry) are added with key ``""``.
- ``attachments``: the file of an image, file, audio, media or sticker message (with its
  name, duration and size when given) and every ``img``/``media`` of a post, in order
  (:mod:`bot.feishu.content`). A merge_forward carries none: the messages it forwards come
  from ``FeishuClient.get_message``, read by ``message_content`` the same way.
- ``tenant_key`` is the event's tenant (``header.tenant_key``), else the sender's.
- Also accepted, for other SDKs' layouts: an envelope whose ``event`` fields sit at the top
  level (node-sdk), and card callbacks with ``open_message_id``/``open_chat_id`` outside
  ``context`` (legacy).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .content import Attachment, decode_content, describe, non_negative_int
from .post import REMOVED, Inline, flatten_card, flatten_post, join_inline
from .untrusted_json import JSON_OBJECT

__all__ = [
    "ALL_MENTION_KEY",
    "CARD_ACTION_EVENT",
    "MESSAGE_EVENT",
    "Attachment",
    "CardAction",
    "InboundMessage",
    "Mention",
    "Rejected",
    "event_type",
    "message_content",
    "parse_card_action",
    "parse_message_event",
]

MESSAGE_EVENT = "im.message.receive_v1"
CARD_ACTION_EVENT = "card.action.trigger"
ALL_MENTION_KEY = "@_all"

# Mention placeholders in text ("@_user_1", "@_all"); longer keys are not Feishu's.
_PLACEHOLDER = re.compile(r"@_[A-Za-z0-9_]{1,62}")
_EVENT_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,80}")


@dataclass(frozen=True, slots=True)
class Mention:
    key: str  # "@_user_1", "@_all"; "" for a post `at` tag with no mentions entry
    name: str
    open_id: str = ""
    union_id: str = ""
    user_id: str = ""


@dataclass(frozen=True, slots=True)
class InboundMessage:
    event_id: str
    message_id: str
    chat_id: str
    chat_type: str  # as sent: "p2p", "group", "topic_group"…
    message_type: str  # "text", "post", "image", …
    text: str
    sender_open_id: str
    sender_union_id: str = ""
    sender_user_id: str = ""
    sender_type: str = "user"
    tenant_key: str = ""
    root_id: str = ""
    parent_id: str = ""
    thread_id: str = ""
    create_time_ms: int = 0
    mentions: tuple[Mention, ...] = ()
    mentions_bot: bool = False  # the bot's open_id is mentioned; @all does not count
    attachments: tuple[Attachment, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; ``from_dict`` is its exact inverse."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["mentions"] = [_plain(m) for m in self.mentions]
        data["attachments"] = [_plain(a) for a in self.attachments]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InboundMessage:
        """Rebuild from ``to_dict()`` output. Raises TypeError on anything else."""
        values = dict(data)
        values["mentions"] = tuple(Mention(**m) for m in values.get("mentions", ()))
        values["attachments"] = tuple(Attachment(**a) for a in values.get("attachments", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class CardAction:
    event_id: str
    operator_open_id: str
    operator_union_id: str = ""
    operator_user_id: str = ""
    tag: str = ""  # "button", "select_static", …
    name: str = ""
    value: Mapping[str, Any] = field(default_factory=dict)  # always an object
    form_value: Mapping[str, Any] = field(default_factory=dict)
    input_value: str = ""
    option: str = ""  # the chosen option of a select / picker
    options: tuple[str, ...] = ()  # the chosen options of a multi-select
    open_message_id: str = ""
    open_chat_id: str = ""
    update_token: str = field(default="", repr=False)  # event.token ("c-…"), kept out of logs
    create_time_us: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["value"] = dict(self.value)
        data["form_value"] = dict(self.form_value)
        data["options"] = list(self.options)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CardAction:
        values = dict(data)
        values["options"] = tuple(values.get("options", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str  # safe for a log line: no content, no tokens


def event_type(envelope: Any) -> str:
    """``header.event_type`` of a schema-2.0 envelope ("" if absent).

    Without a header, a top-level ``event_type`` (node-sdk's flattened layout) is used.
    """
    if not isinstance(envelope, JSON_OBJECT):
        return ""
    header = envelope.get("header")
    if isinstance(header, JSON_OBJECT):
        return _s(header.get("event_type"))
    return _s(envelope.get("event_type")) if header is None else ""


# -- messages ---------------------------------------------------------------------------------


def parse_message_event(
    envelope: Mapping[str, Any], *, bot_open_id: str | None
) -> InboundMessage | Rejected:
    """Normalise an ``im.message.receive_v1`` envelope (already decrypted)."""
    event = _event_object(envelope, MESSAGE_EVENT, "message", marker="message")
    if isinstance(event, Rejected):
        return event
    message = event.get("message")
    if not isinstance(message, JSON_OBJECT):
        return Rejected("message event has no message object")
    message_id = _s(message.get("message_id"))
    chat_id = _s(message.get("chat_id"))
    sender = event.get("sender")
    if not message_id:
        return Rejected("message has no message_id")
    if not chat_id:
        return Rejected("message has no chat_id")
    if not isinstance(sender, JSON_OBJECT):
        return Rejected("message event has no sender")
    sender_ids = _m(sender.get("sender_id"))
    sender_type = _s(sender.get("sender_type")) or "user"
    sender_open_id = _s(sender_ids.get("open_id"))
    if not sender_open_id and sender_type == "user":
        return Rejected("message sender has no open_id")

    message_type = _s(message.get("message_type"))
    book = _MentionBook(message.get("mentions"), bot_open_id)
    body = _message_body(message_type, message.get("content"), book)
    if isinstance(body, Rejected):
        return body
    text, attachments = body
    header = _m(envelope.get("header"))
    return InboundMessage(
        event_id=_s(header.get("event_id")),
        message_id=message_id,
        chat_id=chat_id,
        chat_type=_s(message.get("chat_type")),
        message_type=message_type,
        text=text,
        sender_open_id=sender_open_id,
        sender_union_id=_s(sender_ids.get("union_id")),
        sender_user_id=_s(sender_ids.get("user_id")),
        sender_type=sender_type,
        tenant_key=_s(header.get("tenant_key")) or _s(sender.get("tenant_key")),
        root_id=_s(message.get("root_id")),
        parent_id=_s(message.get("parent_id")),
        thread_id=_s(message.get("thread_id")),
        create_time_ms=non_negative_int(message.get("create_time")),
        mentions=tuple(book.mentions),
        mentions_bot=any(book.is_bot(m) for m in book.mentions),
        attachments=attachments,
    )


def _message_body(
    message_type: str, raw: Any, book: _MentionBook
) -> tuple[str, tuple[Attachment, ...]] | Rejected:
    content, problem = decode_content(raw)
    if message_type == "text":
        if content is None:
            return Rejected(f"text message content {problem}")
        return book.render_text(_s(content.get("text"))), ()
    if message_type == "post":
        if content is None:
            return Rejected(f"post message content {problem}")
        flat = flatten_post(content, book.render_at)
        if flat is None:
            return Rejected("post message content has no post body")
        return flat.text, tuple(Attachment(kind, key) for kind, key in flat.attachments)
    if message_type == "interactive":
        card_text = flatten_card(content or {})
        return ("[card]\n" + card_text if card_text else "[card]"), ()
    # Other types are described; their content may be absent or not JSON (merge_forward).
    return describe(message_type, content or {})


def message_content(
    message_type: str, content: Any, mentions: Any, *, bot_open_id: str | None = None
) -> tuple[str, tuple[Attachment, ...], tuple[Mention, ...]]:
    """A message's text, attachments and mentions, read as an event's are, from any
    layout (``mentions`` as events or the message APIs send them). Never raises: content
    that cannot be read gives ``""`` and no attachments."""
    book = _MentionBook(mentions, bot_open_id)
    body = _message_body(message_type, content, book)
    if isinstance(body, Rejected):
        return "", (), tuple(book.mentions)
    return body[0], body[1], tuple(book.mentions)


class _MentionBook:
    """The message's mentions, and how each one renders in the text."""

    def __init__(self, raw: Any, bot_open_id: str | None) -> None:
        self._bot = bot_open_id if isinstance(bot_open_id, str) and bot_open_id else None
        self.mentions: list[Mention] = []
        self._index: dict[str, Mention] = {}  # key / open_id / user_id -> first mention
        for item in raw if isinstance(raw, list) else ():
            mention = _mention(item)
            if mention is not None:
                self._add(mention)

    def _add(self, mention: Mention) -> Mention:
        self.mentions.append(mention)
        for ident in (mention.key, mention.open_id, mention.user_id):
            if ident:
                self._index.setdefault(ident, mention)
        return mention

    def is_bot(self, mention: Mention) -> bool:
        return self._bot is not None and mention.open_id == self._bot

    def render_text(self, text: str) -> str:
        """Replace ``@_user_N`` / ``@_all`` placeholders; drop the bot's own."""
        keys = {m.key for m in self.mentions if _PLACEHOLDER.fullmatch(m.key)} | {ALL_MENTION_KEY}
        longest = max(map(len, keys))
        pieces: list[Inline] = []
        position = 0
        for match in _PLACEHOLDER.finditer(text):
            token = match.group()
            # The longest known key the token starts with: "@_user_12" is not "@_user_1"
            # and "2" when both exist; with only "@_user_1" it is.
            key = next(
                (token[:n] for n in range(min(len(token), longest), 1, -1) if token[:n] in keys),
                None,
            )
            if key is None:
                continue
            pieces.append(text[position : match.start()])
            pieces.append(self._render_key(key))
            position = match.start() + len(key)
        pieces.append(text[position:])
        return join_inline(pieces).strip()

    def render_at(self, element: Mapping[str, Any]) -> Inline:
        """Render a post ``at`` tag (``user_id`` / ``open_id`` / ``key`` attribute)."""
        user_name = _s(element.get("user_name")).strip()
        idents = [_s(element.get(k)) for k in ("user_id", "open_id", "key")]
        if "all" in idents or ALL_MENTION_KEY in idents:
            return "@" + self._all(user_name).name
        mention = self._find(i for i in idents if i)
        if mention is None:
            mention = self._from_at_tag(element, user_name)
            if mention is None:  # a placeholder without an entry, or nothing at all
                return "@" + user_name if user_name else next((i for i in idents if i), "")
        if self.is_bot(mention):
            return REMOVED
        name = mention.name or user_name
        return "@" + name if name else "@" + (mention.open_id or mention.user_id)

    def _render_key(self, key: str) -> Inline:
        mention = self._find([key])
        if mention is None:  # only @_all can match without an entry
            mention = self._all("")
        if self.is_bot(mention):
            return REMOVED
        return "@" + mention.name if mention.name else key

    def _find(self, idents: Iterable[str]) -> Mention | None:
        for ident in idents:
            mention = self._index.get(ident)
            if mention is not None:
                return mention
        return None

    def _all(self, name: str) -> Mention:
        mention = self._index.get(ALL_MENTION_KEY)
        if mention is not None and mention.key == ALL_MENTION_KEY:
            return mention
        return self._add(Mention(ALL_MENTION_KEY, name or "all"))

    def _from_at_tag(self, element: Mapping[str, Any], user_name: str) -> Mention | None:
        user_id = _s(element.get("user_id"))
        open_id = _s(element.get("open_id")) or (user_id if user_id.startswith("ou_") else "")
        if user_id.startswith(("ou_", "@_")):
            user_id = ""
        if not (open_id or user_id):
            return None
        return self._add(Mention("", user_name, open_id=open_id, user_id=user_id))


def _mention(item: Any) -> Mention | None:
    if not isinstance(item, JSON_OBJECT):
        return None
    key = _s(item.get("key"))
    ident = item.get("id")
    if isinstance(ident, JSON_OBJECT):
        ids = {k: _s(ident.get(k)) for k in ("open_id", "union_id", "user_id")}
    elif isinstance(ident, str):  # the REST layout: "id" plus "id_type"
        ids = {_s(item.get("id_type")) or "open_id": ident}
    else:
        ids = {}
    open_id = ids.get("open_id", "")
    if not key and not open_id:
        return None
    return Mention(
        key,
        _s(item.get("name")),
        open_id=open_id,
        union_id=ids.get("union_id", ""),
        user_id=ids.get("user_id", ""),
    )


# -- card actions ------------------------------------------------------------------------------


def parse_card_action(envelope: Mapping[str, Any]) -> CardAction | Rejected:
    """Normalise a ``card.action.trigger`` callback (already decrypted)."""
    event = _event_object(envelope, CARD_ACTION_EVENT, "card action", marker="action")
    if isinstance(event, Rejected):
        return event
    operator = _m(event.get("operator"))
    operator_open_id = _s(operator.get("open_id"))
    if not operator_open_id:
        return Rejected("card action has no operator open_id")
    action = event.get("action")
    if not isinstance(action, JSON_OBJECT):
        return Rejected("card action has no action object")
    value = _object_field(action.get("value"), "value", decode_string=True)
    if isinstance(value, Rejected):
        return value
    form_value = _object_field(action.get("form_value"), "form_value", decode_string=False)
    if isinstance(form_value, Rejected):
        return form_value
    context = _m(event.get("context"))
    header = _m(envelope.get("header"))

    def context_id(name: str) -> str:
        # Feishu puts these under context; older layouts put them beside it.
        return _s(context.get(name)) or _s(event.get(name)) or _s(envelope.get(name))

    return CardAction(
        event_id=_s(header.get("event_id")),
        operator_open_id=operator_open_id,
        operator_union_id=_s(operator.get("union_id")),
        operator_user_id=_s(operator.get("user_id")),
        tag=_s(action.get("tag")),
        name=_s(action.get("name")),
        value=value,
        form_value=form_value,
        input_value=_s(action.get("input_value")),
        option=_s(action.get("option")),
        options=_strings(action.get("options")),
        open_message_id=context_id("open_message_id"),
        open_chat_id=context_id("open_chat_id"),
        update_token=_s(event.get("token")),
        create_time_us=non_negative_int(header.get("create_time")),
    )


def _object_field(raw: Any, name: str, *, decode_string: bool) -> dict[str, Any] | Rejected:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, JSON_OBJECT):
        return dict(raw)
    if isinstance(raw, str) and decode_string:
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, JSON_OBJECT):
            return dict(decoded)
        return Rejected(f"card action {name} is a string that is not a JSON object")
    return Rejected(f"card action {name} is {_type_name(raw)}, not an object")


# -- shared ------------------------------------------------------------------------------------


def _event_object(
    envelope: Any, expected_type: str, what: str, *, marker: str
) -> Mapping[str, Any] | Rejected:
    if not isinstance(envelope, JSON_OBJECT):
        return Rejected(f"envelope is {_type_name(envelope)}, not a JSON object")
    if "encrypt" in envelope:
        return Rejected("envelope is still encrypted; decrypt it first")
    if envelope.get("type") == "url_verification" and "event" not in envelope:
        return Rejected("a url_verification request, not an event")
    schema = envelope.get("schema")
    if schema is not None and schema != "2.0":
        return Rejected("envelope schema is not 2.0")
    kind = event_type(envelope)
    if kind and kind != expected_type:
        return Rejected(f"not a {what} event: {_loggable_event_type(kind)}")
    event = envelope.get("event")
    if isinstance(event, JSON_OBJECT):
        return event
    if event is None and "header" not in envelope and isinstance(envelope.get(marker), JSON_OBJECT):
        return envelope  # node-sdk's layout: the event's fields at the top level
    return Rejected("envelope has no event object")


def _loggable_event_type(kind: str) -> str:
    return repr(kind) if _EVENT_TYPE.fullmatch(kind) else "unrecognised event_type"


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, JSON_OBJECT) else {}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return "a " + type(value).__name__


def _plain(obj: Mention | Attachment) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
