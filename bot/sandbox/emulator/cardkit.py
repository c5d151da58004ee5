"""CardKit card entities: create, stream element content, settings and update, with
Feishu's checks, ``uuid`` resends and the per-card rate limit."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .core import EmulatorCore
from .wire import FakeError, parse_json, request_body

CARD_ROUTE = "/open-apis/cardkit/v1/cards/{card_id}"
STREAMABLE_TAGS = ("markdown", "plain_text")
CARD_OPS = ("content", "settings", "update")  # the ops the per-card rate limit counts
MAX_CARD_COMPONENTS = 200
MAX_STREAM_CONTENT = 100_000


@dataclass
class CardOp:
    """One operation on a card entity, as the fake saw it."""

    time: float  # FakeFeishu.clock()
    op: str  # "create", "send", "content", "settings" or "update"
    sequence: int | None = None
    element_id: str | None = None
    text: str | None = None  # content: the element text; settings/update: the JSON sent
    code: int = 0  # 0 when applied, else the error code answered
    duplicate: bool = False  # a uuid resend, answered without effect


@dataclass
class FakeCard:
    card_id: str
    card: dict[str, Any]  # the current card JSON
    created_at: float
    last_sequence: int = 0
    streaming_mode: bool = False
    streaming_since: float | None = None
    message_id: str | None = None  # the message it was sent in
    timeline: list[CardOp] = field(default_factory=list)
    settings_history: list[dict[str, Any]] = field(default_factory=list)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)  # (op, uuid) -> body

    @property
    def summary(self) -> str | None:
        summary = (self.card.get("config") or {}).get("summary")
        return summary.get("content") if isinstance(summary, dict) else None

    def element(self, element_id: str) -> dict[str, Any] | None:
        return next((n for n in _walk(self.card) if n.get("element_id") == element_id), None)

    def set_streaming(self, on: bool, now: float) -> None:
        self.streaming_mode = on
        self.streaming_since = now if on else None


class CardKitApi(EmulatorCore):
    # -- inspection -----------------------------------------------------------------

    def card_text(self, card_id: str, element_id: str) -> str:
        """The current text of an element of a card entity (KeyError if there is none)."""
        element = self.cards[card_id].element(element_id)
        if element is None:
            raise KeyError(f"card {card_id} has no element {element_id!r}")
        return str(element.get("content", ""))

    def max_ops_per_second(self, card_id: str) -> int:
        """The most card ops on ``card_id`` that fell within one ``card_ops_window_s``."""
        times = sorted(op.time for op in self.cards[card_id].timeline if op.op in CARD_OPS)
        best, start = 0, 0
        for end, now in enumerate(times):
            while times[start] <= now - self.card_ops_window_s:
                start += 1
            best = max(best, end - start + 1)
        return best

    # -- handlers -------------------------------------------------------------------

    async def _create_card(self, request: web.Request) -> web.Response:
        body = request_body(request)
        if body.get("type") != "card_json":
            raise FakeError(99992402, "field validation failed: type (the fake knows card_json)")
        card = self._parse_card(body.get("data"))
        now = self.clock()
        entity = FakeCard(card_id=str(next(self._card_ids)), card=card, created_at=now)
        entity.set_streaming(_streaming_in(card), now)
        entity.timeline.append(CardOp(now, "create", text=body["data"]))
        self.cards[entity.card_id] = entity
        return self._ok({"card_id": entity.card_id})

    async def _card_content(self, request: web.Request) -> web.Response:
        element_id = request.match_info["element_id"]

        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            element = card.element(element_id)
            if element is None:
                raise FakeError(300313)
            if element.get("tag") not in STREAMABLE_TAGS:
                raise FakeError(300310)
            self._check_streaming(card, op.time)
            sequence = _next_sequence(card, body)
            content = body.get("content")
            if not isinstance(content, str) or not 1 <= len(content) <= MAX_STREAM_CONTENT:
                raise FakeError(99992402, "field validation failed: content")
            op.text = content
            element["content"] = content
            card.last_sequence = sequence

        return await self._card_op(request, "content", apply, element_id=element_id)

    async def _card_settings(self, request: web.Request) -> web.Response:
        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            raw = body.get("settings")
            settings = parse_json(raw.encode()) if isinstance(raw, str) else None
            if not isinstance(settings, dict):
                raise FakeError(99992402, "field validation failed: settings")
            config = settings.get("config")
            if config is not None and not isinstance(config, dict):
                raise FakeError(99992402, "field validation failed: settings.config")
            sequence = _next_sequence(card, body)
            op.text = raw
            if config and config.get("update_multi") is False:
                raise FakeError(300302)
            card.settings_history.append(settings)
            if config:
                card.card.setdefault("config", {}).update(config)
                if "streaming_mode" in config:
                    card.set_streaming(config["streaming_mode"] is True, op.time)
            if isinstance(settings.get("card_link"), dict):
                card.card["card_link"] = settings["card_link"]
            card.last_sequence = sequence

        return await self._card_op(request, "settings", apply)

    async def _update_card(self, request: web.Request) -> web.Response:
        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            wrapper = body.get("card")
            if not isinstance(wrapper, dict) or wrapper.get("type") != "card_json":
                raise FakeError(99992402, "field validation failed: card")
            sequence = _next_sequence(card, body)
            op.text = wrapper.get("data")
            card.card = self._parse_card(wrapper.get("data"))
            card.set_streaming(_streaming_in(card.card), op.time)
            card.last_sequence = sequence

        return await self._card_op(request, "update", apply)

    # -- the checks card ops share ----------------------------------------------------

    async def _card_op(
        self,
        request: web.Request,
        name: str,
        apply: Callable[[FakeCard, dict[str, Any], CardOp], None],
        *,
        element_id: str | None = None,
    ) -> web.Response:
        """The checks every card op shares; ``apply`` does the rest and records its text."""
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            raise FakeError(200740)
        op = CardOp(self.clock(), name, element_id=element_id)
        try:
            if self._admitted_ops(card, op.time) >= self.card_ops_limit:
                self.rate_limited.append(op)
                raise FakeError(230020)
            body = request_body(request)
            if isinstance(body.get("sequence"), int):
                op.sequence = body["sequence"]
            uuid = body.get("uuid")
            key = (name, uuid) if isinstance(uuid, str) and uuid else None
            fingerprint = json.dumps(body, sort_keys=True)
            if key is not None and key in card.uuids:
                if card.uuids[key] != fingerprint:
                    raise FakeError(200770)
                op.duplicate = True
                return self._ok({})
            apply(card, body, op)
            if key is not None:
                card.uuids[key] = fingerprint
        except FakeError as exc:
            op.code = exc.code
            raise
        finally:
            card.timeline.append(op)
        return self._ok({})

    def _admitted_ops(self, card: FakeCard, now: float) -> int:
        since = now - self.card_ops_window_s
        return sum(
            1
            for op in card.timeline
            if op.op in CARD_OPS and op.code != 230020 and since < op.time <= now
        )

    def _check_streaming(self, card: FakeCard, now: float) -> None:
        if not card.streaming_mode:
            raise FakeError(300309)
        since = card.streaming_since if card.streaming_since is not None else now
        if self.stream_timeout_s is not None and now - since >= self.stream_timeout_s:
            card.set_streaming(False, now)  # Feishu closes it; later updates get 300309
            raise FakeError(200850)

    def _parse_card(self, data: Any) -> dict[str, Any]:
        """A card JSON string checked as Feishu's create does (see the module doc)."""
        if not isinstance(data, str):
            raise FakeError(99992402, "field validation failed: data must be a string")
        if not data.strip():
            raise FakeError(300307)
        card = parse_json(data.encode())
        if not isinstance(card, dict):
            raise FakeError(200220)
        if not card:
            raise FakeError(300307)
        if len(data.encode()) > self.card_size_limit:
            raise FakeError(200860)
        if card.get("schema") != "2.0":
            raise FakeError(300303)
        if (card.get("config") or {}).get("update_multi") is False:
            raise FakeError(300302)
        if sum(1 for node in _walk(card.get("body")) if "tag" in node) > MAX_CARD_COMPONENTS:
            raise FakeError(300305)
        ids = [node["element_id"] for node in _walk(card) if "element_id" in node]
        if len(ids) != len(set(ids)):
            raise FakeError(300301)
        return card


def _next_sequence(card: FakeCard, body: Mapping[str, Any]) -> int:
    sequence = body.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise FakeError(99992402, "field validation failed: sequence")
    if sequence <= card.last_sequence:
        raise FakeError(300317)
    return sequence


def _streaming_in(card: Mapping[str, Any]) -> bool:
    config = card.get("config")
    return isinstance(config, dict) and config.get("streaming_mode") is True


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``node``, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
