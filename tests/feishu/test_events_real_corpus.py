"""The event parsers against payloads other projects wrote, and against garbage.

The corpus is read-only and lives outside the repository: ``$LARKGATE_FEISHU_REAL_FIXTURES``,
by default ``../shared/fixtures/feishu-real`` relative to the repository root (a relative
value is taken relative to the repository root too). Without it those tests are skipped;
our own golden fixtures (``tests/fixtures/inbound``) cover the same shapes.

The corpus README says which layer each file holds: ``env-`` a full envelope, ``body-`` the
``event`` object only, ``content-`` the decoded ``message.content`` only, ``api-`` a REST
response, ``node-sdk-merged`` node-sdk's flattened object. Files are wrapped into a full
envelope here as needed. Every ``event__*`` and ``callback__*`` file must either normalise
or be rejected with a reason; files in ``EXPECTED`` must also meet their expectations.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.feishu.events import (
    CardAction,
    InboundMessage,
    Rejected,
    event_type,
    parse_card_action,
    parse_message_event,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_ENV = "LARKGATE_FEISHU_REAL_FIXTURES"
CORPUS = (REPO_ROOT / os.environ.get(CORPUS_ENV, "../shared/fixtures/feishu-real")).resolve()
GOLDEN = REPO_ROOT / "tests" / "fixtures"
SKIP_REASON = f"Feishu payload corpus not found at {CORPUS} (set {CORPUS_ENV} to its directory)"

# Per-file expectations. "bot" is the bot open_id to parse with (default None);
# "contains" are substrings of text; "attachments" are (kind, key) pairs; "mention_keys" must
# all be among the mentions; "rejected" is a substring of the reason; any other key is an
# attribute compared for equality. A list holds one dict per payload (api- files).
EXPECTED: dict[str, Any] = {
    # full envelopes
    "event__env-p2p-text__hermes.json": {
        "text": "hello", "chat_type": "p2p", "chat_id": "p2p_alice",
        "event_id": "evt_text_simple_001", "sender_union_id": "on_alice", "tenant_key": "tk_test",
        "create_time_ms": 1714203600000,
    },
    "event__env-p2p-post-title-text-img__hermes.json": {
        "contains": ["Update", "See:", "[image]"], "attachments": [("image", "img_v2_test_key")],
    },
    "event__env-p2p-audio__hermes.json": {
        "text": "[audio: 3s]", "attachments": [("audio", "audio_test_key")],
    },
    "event__env-p2p-file__hermes.json": {
        "text": "[file: report.pdf]", "attachments": [("file", "file_test_key")],
    },
    "event__env-p2p-media-video__hermes.json": {
        "text": "[video: clip.mp4]", "attachments": [("media", "video_test_key")],
    },
    "event__env-p2p-interactive-card-v1__hermes.json": {
        "contains": ["[card]", "Confirm", "Click below", "OK"],
    },
    "event__env-p2p-share-chat__hermes.json": {"text": "[shared group: Other Group]"},
    # Suspect inline shape (see the README): only the description survives.
    "event__env-p2p-merge-forward-unverified-shape__hermes.json": {"text": "[forwarded messages]"},
    "event__env-group-text-at-bot__hermes.json": {
        "bot": "ou_hermes_bot", "text": "what is the status?", "mentions_bot": True,
        "chat_type": "group",
    },
    # No sender and no chat: nothing to answer.
    "event__env-interactive-template-content__larksuite-cli.json": {"rejected": "chat_id"},
    # event bodies
    "event__body-group-at-all-empty-ids__openclaw-lark.json": {
        "bot": "ou_bot", "text": "@所有人 hello everyone", "mentions_bot": False,
        "mention_keys": ["@_all"],
    },
    "event__body-group-at-all-no-mentions-array__channel-sdk-node.json": {
        "bot": "ou_bot", "contains": ["@all", "hello everyone"], "mentions_bot": False,
        "mention_keys": ["@_all"], "create_time_ms": 1700000000000,
    },
    "event__body-group-image__channel-sdk-node.json": {
        "text": "[image]", "attachments": [("image", "img_v3_xyz")],
    },
    "event__body-group-text-root-parent-thread__channel-sdk-node.json": {
        "text": "hello", "root_id": "om_root", "parent_id": "om_parent", "thread_id": "omt_1",
    },
    "event__body-group-post-zh-cn-at-img-mentions__channel-sdk-node.json": {
        "bot": "ou_bot", "text": "Greeting\nhi @Bob\n[image]", "mentions_bot": False,
        "attachments": [("image", "img_1")],
    },
    "event__body-group-reply-root-parent-two-mentions__clawdbot.json": {
        "bot": "ou_bot", "text": "@Alice hello there", "mentions_bot": True,
        "root_id": "om_root", "parent_id": "om_parent",
    },
    "event__body-group-post-at-tag-open-id-no-mentions__clawdbot.json": {
        "bot": "ou_bot", "text": "Daily\nhello\nworld", "mentions_bot": True,
    },
    "event__body-group-topic-quote-reply-root-and-thread__openclaw.json": {
        "root_id": "om_mid_topic_message", "thread_id": "omt_topic_quote", "parent_id": "",
    },
    "event__body-group-topic-starter-thread-id-only__openclaw.json": {
        "text": "topic starter", "thread_id": "omt_topic_fallback", "root_id": "",
    },
    "event__body-topic-group-reply-to-bot-root-with-mention__openclaw.json": {
        "bot": "ou-bot", "text": "hello", "mentions_bot": True, "chat_type": "topic_group",
    },
    # decoded contents
    "event__content-post-content-v2-md-with-images__openclaw-lark.json": {
        "contains": ["https://x/y.png", "[image]"], "attachments": [("image", "img_v3_abc")],
        "absent": ["base64"],
    },
    "event__content-post-content-and-content-v2__openclaw-lark.json": {"text": "FROM_V2"},
    "event__content-post-locale-wrapped-content-v2__openclaw-lark.json": {"text": "LOCALE_V2"},
    "event__content-post-locale-wrapped-zh-cn__cc-connect.json": {"text": "标题\n内容"},
    "event__content-post-at-all-user-id-all__cc-connect.json": {
        "bot": "ou_bot", "text": "@all", "mentions_bot": False, "mention_keys": ["@_all"],
    },
    "event__content-post-code-block__cc-connect.json": {"text": "see:\n```go\nfmt.Println()\n```"},
    "event__content-post-outer-post-wrapper__nanobot.json": {
        "text": "日报\n完成 [image]", "attachments": [("image", "img_1")],
    },
    "event__content-post-null-fields__nanobot.json": {"text": "ok"},
    "event__content-sticker__channel-sdk-node.json": {
        "text": "[sticker]", "attachments": [("sticker", "s1")],
    },
    "event__content-interactive-json-card-wrapper-card2__cc-connect.json": {
        "contains": ["[card]", "渠道不足", "查看详情"], "absent": ["example.test", "alert-1"],
    },
    "event__content-interactive-user-dsl-card2__nanobot.json": {"contains": ["hello"]},
    "event__content-interactive-nested-elements__nanobot.json": {"text": "[card]\nhello"},
    "event__content-interactive-table-element__nanobot.json": {
        "contains": ["Name | Score", "Alice | 98"],
    },
    # REST response: one payload per item; the parent's content is not JSON.
    "event__api-merge-forward-children-via-message-get__channel-sdk-node.json": [
        {"text": "[forwarded messages]", "message_type": "merge_forward"},
        {"text": "first child", "sender_open_id": "ou_alice"},
        {"text": "second child", "sender_open_id": "ou_bob"},
    ],
    # card callbacks
    "callback__node-sdk-merged-button-context-ids__channel-sdk-node.json": {
        "operator_open_id": "ou_alice", "tag": "button", "value": {"cmd": "A"},
        "open_message_id": "om_card1", "open_chat_id": "oc_test",
    },
    "callback__body-legacy-toplevel-message-chat-ids__channel-sdk-node.json": {
        "operator_open_id": "ou_alice", "operator_user_id": "u_a", "name": "approve",
        "value": {"foo": 1}, "open_message_id": "om_1", "open_chat_id": "oc_1",
    },
    "callback__body-form-submit-checker-booleans__openclaw-lark.json": {
        "operator_open_id": "ou_sender1", "open_chat_id": "oc_test123", "value": {},
        "form_value": {
            "selection_0_0": False, "selection_0_1": True, "selection_0_2": True,
            "selection_0_3": False, "selection_0_4": False, "selection_0_5": False,
        },
    },
    "callback__body-form-submit-text-input__cc-connect.json": {
        "name": "submit", "form_value": {"answer": "先出码后置完成，但要加对账补偿"},
        "open_message_id": "om_test_message", "open_chat_id": "oc_test_chat",
    },
    "callback__event-only-value-as-json-string__chatccc.json": {
        "operator_open_id": "ou-test", "value": {"cmd": "new ccc"}, "open_chat_id": "oc-test",
    },
    # openclaw's own context layout (chat_id/open_id) carries no Feishu ids.
    "callback__body-structured-envelope-value-token__openclaw.json": {
        "operator_union_id": "union_1", "update_token": "tok-card-once", "open_chat_id": "",
        "value": {
            "oc": "ocf1", "k": "quick", "a": "feishu.quick_actions.help", "q": "/help",
            "c": {"u": "ou_user1", "h": "p2p:ou_user1", "t": "p2p", "e": 1700000060000},
        },
    },
    # What a bot answers to a callback, not a callback.
    "callback__response-toast-success__channel-sdk-node.json": {"rejected": "event"},
}  # fmt: skip

_MESSAGE_HEADER = {"event_id": "evt_corpus", "event_type": "im.message.receive_v1"}
_CARD_HEADER = {"event_id": "evt_corpus", "event_type": "card.action.trigger"}


def _corpus_files(pattern: str) -> list[Any]:
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON), id="no-corpus")]
    return [pytest.param(path, id=path.name) for path in sorted(CORPUS.glob(pattern))]


def _layer(path: Path) -> str:
    return path.name.split("__")[1]


def _message_envelope(message: dict[str, Any], sender_open_id: str = "ou_corpus_user") -> Any:
    message = {"message_id": "om_corpus", "chat_id": "oc_corpus", "chat_type": "group", **message}
    sender = {"sender_id": {"open_id": sender_open_id}, "sender_type": "user"}
    return {
        "schema": "2.0",
        "header": _MESSAGE_HEADER,
        "event": {"sender": sender, "message": message},
    }


def _message_envelopes(path: Path, data: Any) -> list[Any]:
    layer = _layer(path)
    if layer.startswith("body-"):
        return [{"schema": "2.0", "header": _MESSAGE_HEADER, "event": data}]
    if layer.startswith("content-"):
        message_type = layer.split("-")[1]  # content-post-…, content-interactive-…, content-sticker
        content = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return [_message_envelope({"message_type": message_type, "content": content})]
    if layer.startswith("api-"):
        return [
            _message_envelope(
                {
                    "message_id": item.get("message_id", ""),
                    "message_type": item.get("msg_type", ""),
                    "content": item.get("body", {}).get("content"),
                    "create_time": item.get("create_time"),
                },
                sender_open_id=item.get("sender", {}).get("id", ""),
            )
            for item in data.get("items", [])
        ]
    return [data]  # env- (and anything unknown) as it stands


def _card_envelope(path: Path, data: Any) -> Any:
    if _layer(path).startswith("body-"):
        return {"schema": "2.0", "header": _CARD_HEADER, "event": data}
    return data  # node-sdk-merged, event-only ({"event": …}), response-: as they stand


def _check(result: InboundMessage | CardAction | Rejected, expected: dict[str, Any]) -> None:
    if "rejected" in expected:
        assert isinstance(result, Rejected), f"expected a rejection, got {result!r}"
        assert expected["rejected"] in result.reason
        return
    assert not isinstance(result, Rejected), f"rejected: {result.reason}"
    for key, want in expected.items():
        if key == "bot":
            continue
        if key == "contains":
            for part in want:
                assert part in result.text, f"{part!r} not in {result.text!r}"
        elif key == "absent":
            for part in want:
                assert part not in result.text, f"{part!r} in {result.text!r}"
        elif key == "attachments":
            assert [(a.kind, a.key) for a in result.attachments] == want
        elif key == "mention_keys":
            assert set(want) <= {m.key for m in result.mentions}
        else:
            assert getattr(result, key) == want, key


def _check_sensible(result: InboundMessage | CardAction | Rejected) -> None:
    if isinstance(result, Rejected):
        assert result.reason.strip()
    elif isinstance(result, InboundMessage):
        assert result.message_id and result.chat_id
        assert result.text or result.attachments
        assert InboundMessage.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    else:
        assert result.operator_open_id
        assert isinstance(result.value, dict)
        json.dumps(result.to_dict())


@pytest.mark.parametrize("path", _corpus_files("event__*.json"))
def test_corpus_event(path: Path):
    data = json.loads(path.read_text())
    expected = EXPECTED.get(path.name)
    envelopes = _message_envelopes(path, data)
    assert envelopes
    expectations = expected if isinstance(expected, list) else [expected] * len(envelopes)
    assert len(expectations) == len(envelopes)
    for envelope, want in zip(envelopes, expectations, strict=True):
        bot = (want or {}).get("bot")
        result = parse_message_event(envelope, bot_open_id=bot)
        _check_sensible(result)
        if want is not None:
            _check(result, want)


@pytest.mark.parametrize("path", _corpus_files("callback__*.json"))
def test_corpus_callback(path: Path):
    result = parse_card_action(_card_envelope(path, json.loads(path.read_text())))
    _check_sensible(result)
    if path.name in EXPECTED:
        _check(result, EXPECTED[path.name])


@pytest.mark.parametrize("path", _corpus_files("verification__*.json"))
def test_corpus_verification_bodies_are_not_events_we_handle(path: Path):
    data = json.loads(path.read_text())
    kind = event_type(data)
    assert isinstance(kind, str)
    message = parse_message_event(data, bot_open_id="ou_bot")
    card = parse_card_action(data)
    assert isinstance(message, Rejected)
    assert isinstance(card, Rejected)
    if "encrypt" in data:
        assert kind == ""
        assert "encrypted" in message.reason
        assert "encrypted" in card.reason
    else:
        # The hybrid body is a contact event that also carries a challenge.
        assert kind == "contact.user.created_v3"
        assert "not a message event" in message.reason


def test_every_expectation_names_a_corpus_file():
    if not CORPUS.is_dir():
        pytest.skip(SKIP_REASON)
    missing = sorted(name for name in EXPECTED if not (CORPUS / name).is_file())
    assert not missing, f"EXPECTED names files the corpus lacks: {missing}"


# -- robustness: garbage at every level never raises ----------------------------------------

ITERATIONS = 1500


def _garbage(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(18 if depth < 3 else 13)
    simple: list[Any] = [
        None, True, False, 0, -1, 1.5, float("nan"), float("inf"), 10**30, "", "x",
        "@_user_1 @_all " * rng.randrange(1, 50), "{",
    ]  # fmt: skip
    if choice < len(simple):
        return simple[choice]
    if choice == 13:
        return rng.choice(["a" * 200_000, "[" * 5000 + "]" * 5000, "ü\u200b\x00" * 1000])
    if choice == 14:
        return [_garbage(rng, depth + 1) for _ in range(rng.randrange(4))]
    if choice == 15:
        keys = ["tag", "text", "content", "key", "id", "open_id", "user_id", "value", "title"]
        return {rng.choice(keys): _garbage(rng, depth + 1) for _ in range(rng.randrange(4))}
    if choice == 16:
        return json.dumps(_garbage(rng, depth + 1))
    return [[{"tag": rng.choice(["text", "a", "at", "img", "md", "code_block", "x"])}]]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


def _mutate(envelope: Any, rng: random.Random) -> Any:
    envelope = json.loads(json.dumps(envelope))
    # Fuzz inside message.content too: decode it, mutate, encode it again.
    event = envelope.get("event") if isinstance(envelope, dict) else None
    message = event.get("message") if isinstance(event, dict) else None
    if isinstance(message, dict) and isinstance(message.get("content"), str) and rng.random() < 0.5:
        with contextlib.suppress(ValueError):  # content that is not JSON stays as it is
            message["content"] = json.dumps(_mutate(json.loads(message["content"]), rng))
        return envelope
    path = rng.choice(list(_paths(envelope)))
    if not path:
        return _garbage(rng)
    parent = envelope
    for step in path[:-1]:
        parent = parent[step]
    if rng.random() < 0.2 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = _garbage(rng)
    return envelope


def _seeds(folder: str) -> list[Any]:
    return [json.loads(p.read_text()) for p in sorted((GOLDEN / folder).glob("*.event.json"))]


def _check_safe(result: Any, *, kind: type) -> None:
    assert isinstance(result, kind | Rejected), type(result)
    if isinstance(result, Rejected):
        assert isinstance(result.reason, str) and 0 < len(result.reason) < 200
        for secret in ("vt_fixture", "c-update-token"):
            assert secret not in result.reason
    elif isinstance(result, InboundMessage):
        assert isinstance(result.text, str)
        assert InboundMessage.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    else:
        assert isinstance(result.value, dict) and isinstance(result.form_value, dict)
        json.dumps(result.to_dict())


def test_mutated_message_envelopes_never_raise():
    rng = random.Random(20240601)
    seeds = _seeds("inbound")
    for _ in range(ITERATIONS):
        envelope = _mutate(rng.choice(seeds), rng)
        for _ in range(rng.randrange(3)):
            envelope = _mutate(envelope, rng) if isinstance(envelope, dict) else envelope
        bot = rng.choice([None, "", "ou_bot", "ou_carol"])
        _check_safe(parse_message_event(envelope, bot_open_id=bot), kind=InboundMessage)
        assert isinstance(event_type(envelope), str)


def test_mutated_card_callbacks_never_raise():
    rng = random.Random(20240602)
    seeds = _seeds("callbacks")
    for _ in range(ITERATIONS):
        envelope = _mutate(rng.choice(seeds), rng)
        _check_safe(parse_card_action(envelope), kind=CardAction)
        assert isinstance(event_type(envelope), str)


@pytest.mark.parametrize(
    "envelope",
    [None, 0, 1.5, "text", b"bytes", [], [{}], {}, {"event": None}, {"event": []},
     {"event": {"message": []}}, {"header": [], "event": {}}, {"schema": 2, "event": {}}],
)  # fmt: skip
def test_wrong_types_at_the_top_are_rejected(envelope: Any):
    assert isinstance(parse_message_event(envelope, bot_open_id="ou_bot"), Rejected)
    assert isinstance(parse_card_action(envelope), Rejected)
    assert event_type(envelope) == ""


def test_huge_and_deep_contents_do_not_raise():
    deep_json = "[" * 100_000 + "]" * 100_000
    deep_card: Any = {"text": "bottom"}
    for _ in range(5000):
        deep_card = {"elements": [deep_card]}
    contents: list[tuple[str, Any]] = [
        ("text", json.dumps({"text": "@_user_1 " * 50_000 + "x" * 500_000})),
        ("post", json.dumps({"content": [[{"tag": "text", "text": "y"}]] * 20_000})),
        ("interactive", deep_json),
        ("interactive", deep_card),
        ("post", deep_json),
        ("text", deep_json),
    ]
    for message_type, content in contents:
        envelope = {
            "schema": "2.0",
            "header": {"event_type": "im.message.receive_v1"},
            "event": {
                "sender": {"sender_id": {"open_id": "ou_user"}},
                "message": {
                    "message_id": "om_1",
                    "chat_id": "oc_1",
                    "message_type": message_type,
                    "content": content,
                },
            },
        }
        _check_safe(parse_message_event(envelope, bot_open_id="ou_bot"), kind=InboundMessage)
