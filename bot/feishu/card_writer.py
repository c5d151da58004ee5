"""Writing one answer into the chat as live card(s), within Feishu's limits, losing nothing.

``LiveReply`` owns a ``LiveView`` that its caller changes (steps, answer text) and
calls ``touch()``; one pump task per reply sends the latest snapshot, at most one
request in flight, coalescing everything that changed meanwhile:

- CardKit first: the card entity is created when there is something to show, with
  that content already in it, and sent as a reply by ``card_id``; then the changed
  elements are PUT with their full text and a strictly increasing ``sequence``; at
  the end one card update writes the final text and footer and turns streaming off.
- At once (``open_now``): the card is posted before anything else is known, with a
  status line ("Thinking…") in the answer's place, so the person sees at once that the
  bot is on it, however long the model takes. The first text then replaces the status
  (one content update more than a card created with that text: creating and sending it
  cost the same either way); the first tool call or plan adds the steps element above
  it with one card update (in streaming mode still), which the steps would have cost.
- Pacing: a first answer token is shown at once (after the per-card minimum gap),
  later snapshots every ``cadence`` seconds (about one a second: each update is an API
  call, and a tenant's free tier has 10,000 a month), never more than 10 operations a
  second on one card. A 230020 skips the frame and slows the cadence down.
- The client types each update's new text out (``Typewriter``): the card is created
  paced for a typical rate, and once the answer's own rate is measured (after a
  second), re-paced with one settings call if it is far off, so the text keeps moving
  between updates instead of jumping once a second.
- Long answers continue in further cards before the element limit; a card that
  cannot be edited any more (streaming closed, edit window over) is left showing what
  it had, and the rest continues in a new card. Nothing is recalled.
- An answer complete before anything was shown goes out as one finished card.
- Economy (the caller's choice, e.g. near the month's API budget): ``streaming=False``
  shows nothing until the end and then sends the answer as one finished card;
  ``text_only`` sends it as a plain text reply; ``note`` is added to the footer.
- Fallbacks: when CardKit is unavailable, a normal card is sent and PATCHed at most
  every 1.5 s; when that fails too, the answer goes out as plain reply cards.

Every API call is counted in ``calls``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .client import FeishuClient
from .errors import (
    FeishuCardInvalid,
    FeishuEditWindowClosed,
    FeishuError,
    FeishuMessageGone,
    FeishuRateLimited,
    FeishuSequenceError,
    FeishuStreamingClosed,
    FeishuTooLarge,
    FeishuTransportError,
)
from .live_card import (
    THINKING,
    WORKING,
    LiveView,
    Typewriter,
    display_answer,
    final_card,
    progress_markdown,
    streaming_card,
    summary_of,
)
from .render import answer_cards

_OPEN_ID = re.compile(r"ou_[A-Za-z0-9_-]{1,64}")
logger = logging.getLogger(__name__)

Mode = Literal["cardkit", "single", "patch", "plain", "gone"]

MIN_GAP = 0.1  # 10 operations a second on one card, Feishu's limit
DEFAULT_CADENCE = 1.0
RATE_AFTER = 1.0  # seconds of answer before its rate counts as measured
RETUNE_BEYOND = 0.35  # re-pace the typewriter when it is off by more than this share
MAX_RETUNES = 2  # settings calls a card may spend on its typewriter
FIRST_GAP = 0.25  # after the first text, updates come 0.25, 0.5, 1 s apart: the client
# has only a token or two to type at first, and a full second's wait would show as a stall
# Characters of the answer one live card holds before the next card continues it: a
# 4,000-character answer fits in one (each further card costs three calls), and the
# final card stays under Feishu's 30 KB even in CJK (3 bytes a character).
LIVE_ELEMENT_CHARS = 6000
TEXT_CHARS = 20_000  # of a plain text reply (Feishu allows 150 KB a message)
PATCH_GAP = 1.5
MAX_CADENCE = 1.0
OPS_PER_SECOND = 10
# The second Feishu counts ops in, with slack: requests sent 1.0 s apart can arrive closer.
RATE_WINDOW = 1.05
PLAIN_RETRY_DELAYS = (0.5, 2.0, 5.0)
MAX_FINAL_ROUNDS = 8


@dataclass(slots=True)
class _Card:
    """One card (or patched message) of the reply and what it shows."""

    index: int
    offset: int  # where this card's part of the answer starts
    card_id: str = ""
    message_id: str = ""
    sequence: int = 0
    shown_steps: str | None = None
    shown_answer: str = ""
    shown_raw: int = 0  # characters of the answer this card shows
    with_steps: bool = False
    typewriter: Typewriter | None = None
    retunes: int = 0
    last_op: float = -1e9
    recent_ops: deque[float] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class CardAnchor:
    """Where a live card stands, for a process that goes on with it (``LiveReply.adopt``):
    a run that waited for a person and is resumed elsewhere answers on the card it began."""

    card_id: str
    message_id: str
    sequence: int
    with_steps: bool


# Operations the card may have had after its anchor was taken (the waiting mark, a frame
# in flight): a resumed writer starts above them, as Feishu wants each sequence higher.
ADOPTED_SEQUENCE_MARGIN = 100


@dataclass(slots=True)
class ReplyOutcome:
    mode: Mode
    message_ids: list[str] = field(default_factory=list)
    calls: int = 0


class LiveReply:
    """Streams one answer as a reply to ``message_id`` (see the module docstring)."""

    def __init__(
        self,
        client: FeishuClient,
        *,
        message_id: str,
        in_thread: bool,
        uuid_seed: str,
        cadence: float = DEFAULT_CADENCE,
        patch_gap: float = PATCH_GAP,
        element_chars: int = LIVE_ELEMENT_CHARS,
        streaming: bool = True,
        text_only: bool = False,
        note: str = "",
        mention: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.view = LiveView()
        self.mode: Mode = "cardkit"
        self.calls = 0
        self._client = client
        self._message_id = message_id
        self._in_thread = in_thread
        self._seed = uuid_seed
        self._cadence = max(cadence, MIN_GAP)
        self._patch_gap = patch_gap
        self._element_chars = element_chars
        self._streaming = streaming and not text_only
        self._text_only = text_only
        # An open_id the text answer mentions at its start: another bot that asked is
        # notified only of a mention in a message as it is created (not in a card's update).
        self._mention = mention if _OPEN_ID.fullmatch(mention) else ""
        self._note = note
        self._clock = clock
        self._sleep = sleep
        self._cards: list[_Card] = []
        self._dirty = asyncio.Event()
        self._urgent = asyncio.Event()
        self._finishing = False
        self._open_now = False  # post the card before there is anything to show
        self._degraded = False
        self._pump: asyncio.Task[None] | None = None
        self._answer_began: tuple[float, int] | None = None  # (time, length) first seen
        self._answer_updates = 0  # answer texts sent (the ramp of the cadence counts them)

    # -- what the owner calls ----------------------------------------------------------

    def touch(self, *, urgent: bool = False) -> None:
        """The view changed; ``urgent`` (e.g. the first answer token) skips the cadence."""
        self._dirty.set()
        if urgent:
            self._urgent.set()
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run(), name="live-reply")

    def open_now(self) -> None:
        """Post the card now, its status line saying the bot is on it (see the module
        docstring). Nothing when no live card is shown (economy delivery)."""
        if not self._streaming:
            return
        self._open_now = True
        self.touch(urgent=True)

    def anchor(self) -> CardAnchor | None:
        """The first card, once it is a CardKit card in the chat and the only one (None
        otherwise: a resumed run then answers in a card of its own)."""
        if self.mode != "cardkit" or len(self._cards) != 1 or not self._cards[0].message_id:
            return None
        card = self._cards[0]
        return CardAnchor(card.card_id, card.message_id, card.sequence, card.with_steps)

    def adopt(self, anchor: CardAnchor) -> None:
        """Go on with a card an earlier process posted for this message (see ``anchor``).
        Feishu refusing it later (streaming closed, the edit window over) makes the writer
        continue in a new card, as for any card."""
        if self._cards:
            raise RuntimeError("adopt() is for a writer that has shown nothing yet")
        self._cards.append(
            _Card(
                0,
                0,
                card_id=anchor.card_id,
                message_id=anchor.message_id,
                sequence=anchor.sequence + ADOPTED_SEQUENCE_MARGIN,
                with_steps=anchor.with_steps,
            )
        )
        self._open_now = True

    def leave(self) -> None:
        """Stop writing, leaving the card as it is (another process goes on with it)."""
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()

    @property
    def opened(self) -> bool:
        """Whether a card is posted or on its way (at once, or for something to show)."""
        return self._open_now or bool(self._cards)

    async def finish(self, footer: str = "") -> ReplyOutcome:
        """Write the final state (always closing streaming) and wait until it is out."""
        self.view.footer = " · ".join(part for part in (footer, self._note) if part)
        self._finishing = True
        self.touch(urgent=True)
        assert self._pump is not None
        await self._pump
        return ReplyOutcome(
            self.mode, [c.message_id for c in self._cards if c.message_id], self.calls
        )

    # -- the pump ----------------------------------------------------------------------

    async def _run(self) -> None:
        final_rounds = 0
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self._urgent.clear()  # this sync serves it; a later one sets it again
            final = self._finishing
            if final:
                final_rounds += 1
                if final_rounds > MAX_FINAL_ROUNDS and self.mode in ("cardkit", "patch"):
                    logger.warning(
                        "the answer card for %s keeps failing; sending plain", self._message_id
                    )
                    self.mode = "plain"
            try:
                await self._sync(final=final)
            except Exception:  # a bug here must not lose the answer: fall back to plain
                logger.exception("live reply to %s failed; falling back", self._message_id)
                if self.mode != "gone":
                    self.mode = "plain"
                    self._dirty.set()
            if final and (not self._dirty.is_set() or self.mode == "gone"):
                return
            await self._pause()

    async def _pause(self) -> None:
        """Wait out the cadence since the last operation; an urgent change waits less."""
        if not self._cards:
            return
        gap = self._patch_gap if self.mode == "patch" else self._ramped_cadence()
        while True:
            if self._urgent.is_set():
                self._urgent.clear()
                if self.mode != "patch":  # patches keep their gap, even the last one
                    gap = min(gap, MIN_GAP)
            delay = gap - (self._clock() - self._cards[-1].last_op)
            if delay <= 0:
                return
            try:
                await asyncio.wait_for(self._urgent.wait(), timeout=delay)
            except TimeoutError:
                return

    def _ramped_cadence(self) -> float:
        if not self._answer_updates:
            return self._cadence
        return max(MIN_GAP, min(self._cadence, FIRST_GAP * 2.0 ** (self._answer_updates - 1)))

    async def _sync(self, *, final: bool) -> None:
        if self.mode == "gone":
            return
        if self.mode in ("plain", "single"):
            if final and self.mode == "plain":
                await self._send_plain()
            return
        if not self._streaming and not self._cards:
            if final:  # economy: one finished card, or one text reply, and nothing before
                self.mode = "single"
                await (self._send_text() if self._text_only else self._send_plain())
            return
        if final and not self._cards and not self.view.has_progress:
            # The whole answer arrived before anything was shown: one reply with a
            # finished card costs one API call instead of create, send and update.
            self.mode = "single"
            await self._send_plain()
            return
        while True:
            card = self._current_card()
            if card is None:
                return  # nothing to show yet
            part = self.view.answer[card.offset :]
            if len(part) > self._element_chars:
                cut = split_point(part, self._element_chars)
                if not await self._close_card(card, part[:cut], footer=""):
                    return
                self._cards.append(_Card(len(self._cards), card.offset + cut))
                continue
            if self.mode == "patch":
                await self._patch(card, part, final=final)
            else:
                await self._stream(card, part, final=final)
            return

    def _current_card(self) -> _Card | None:
        if self._cards:
            return self._cards[-1]
        idle = not self.view.has_progress and not self.view.answer
        if idle and not self._finishing and not self._open_now:
            return None
        card = _Card(0, 0, with_steps=self.view.has_progress)
        self._cards.append(card)
        return card

    # -- CardKit -----------------------------------------------------------------------

    async def _stream(self, card: _Card, part: str, *, final: bool) -> None:
        if not card.message_id and (not await self._open(card, part, final=final) or not final):
            return  # opened with the current content, or to be retried
        if final:
            await self._close_card(card, part, footer=self.view.footer)
            return
        if not card.with_steps and card.index == 0 and self.view.has_progress:
            await self._add_steps(card, part)
            return
        steps = progress_markdown(self.view) if card.with_steps else None
        if steps is not None and steps != card.shown_steps:
            if not await self._op(card, self._put(card, "steps", steps)):
                return  # skip the rest of this frame; the next one carries it
            card.shown_steps = steps
        # No text (none yet, or what was shown was taken back): the status line again.
        placeholder = WORKING if steps is not None else THINKING
        shown = display_answer(part, final=False) if part else placeholder
        if shown != card.shown_answer and await self._op(card, self._put(card, "answer", shown)):
            card.shown_answer, card.shown_raw = shown, len(part)
            if part:
                self._answer_updates += 1
                await self._retune(card)

    def _shows_steps(self, card: _Card) -> bool:
        """Whether ``card`` has the steps element: the first card once there is work to
        show (a card posted at once gets it with its first update or its last)."""
        return card.with_steps or (card.index == 0 and self.view.has_progress)

    async def _add_steps(self, card: _Card, part: str) -> None:
        """The first card went up with no work to show (its status line, or the answer's
        first text): one card update puts the steps above the answer, streaming still on."""
        steps = progress_markdown(self.view)
        shown = display_answer(part, final=False) if part else WORKING
        body = streaming_card(
            steps=steps, answer=shown, summary=summary_of(part or shown), typewriter=card.typewriter
        )

        def update(sequence: int) -> Awaitable[None]:
            return self._client.update_card(card.card_id, body, sequence=sequence)

        if await self._op(card, update):
            card.with_steps = True
            card.shown_steps, card.shown_answer, card.shown_raw = steps, shown, len(part)

    def _answer_rate(self) -> float | None:
        """Characters a second the answer has been growing at; None until measured."""
        now, length = self._clock(), len(self.view.answer)
        if self._answer_began is None:
            if length:
                self._answer_began = (now, length)
            return None
        began, first = self._answer_began
        if now - began < RATE_AFTER or length <= first:
            return None
        return (length - first) / (now - began)

    def _typewriter(self) -> Typewriter:
        rate = self._answer_rate()
        return Typewriter.for_rate(rate if rate is not None else Typewriter.DEFAULT_RATE)

    async def _retune(self, card: _Card) -> None:
        """Re-pace the card's typewriter to the measured rate, when it is far off."""
        rate = self._answer_rate()
        if rate is None or card.typewriter is None or card.retunes >= MAX_RETUNES:
            return
        wanted = Typewriter.for_rate(rate)
        if abs(card.typewriter.chars_per_second / wanted.chars_per_second - 1) <= RETUNE_BEYOND:
            return
        settings = {"config": {"streaming_config": wanted.config()}}

        def call(sequence: int) -> Awaitable[None]:
            return self._client.update_card_settings(card.card_id, settings, sequence=sequence)

        card.retunes += 1
        if await self._op(card, call):
            card.typewriter = wanted

    async def _open(self, card: _Card, part: str, *, final: bool) -> bool:
        """Create the card entity with what there is to show, and send it. True when sent."""
        if not card.card_id:
            steps = progress_markdown(self.view) if card.with_steps else None
            # Nothing to show yet: the status line, "Working on it…" below the steps.
            shown = display_answer(part, final=final) if part else WORKING if steps else THINKING
            summary = "(continued)" if card.index else summary_of(part or self.view.notice or shown)
            self._answer_rate()  # starts measuring with the first text
            typewriter = self._typewriter()
            body = streaming_card(steps=steps, answer=shown, summary=summary, typewriter=typewriter)
            try:
                card.card_id = await self._count(self._client.create_card(body))
            except (FeishuRateLimited, FeishuTransportError):
                self._dirty.set()
                return False
            except FeishuError as exc:
                logger.warning("CardKit unavailable (%s); falling back to card patches", exc)
                self.mode = "patch"
                self._dirty.set()
                return False
            card.shown_steps, card.shown_answer, card.shown_raw = steps, shown, len(part)
            card.typewriter = typewriter
            self._answer_updates += bool(part)
            card.last_op = self._clock()
        return await self._send_entity(card)

    async def _send_entity(self, card: _Card) -> bool:
        try:
            sent = await self._count(
                self._client.reply_card_entity(
                    self._message_id,
                    card.card_id,
                    # A resend of this card shows once; a card of a later attempt at the
                    # message (a takeover after a crash) is a new card and must show too.
                    uuid=self._uuid(f"card:{card.card_id}", card.index),
                    reply_in_thread=self._in_thread,
                )
            )
        except (FeishuRateLimited, FeishuTransportError):
            self._dirty.set()
            return False
        except FeishuMessageGone:
            logger.info("message %s is gone; not answering it", self._message_id)
            self.mode = "gone"
            return False
        except FeishuError as exc:
            logger.warning("sending card %s failed (%s); falling back", card.card_id, exc)
            card.card_id = ""
            self.mode = "patch"
            self._dirty.set()
            return False
        card.message_id = sent.message_id
        return True

    def _put(self, card: _Card, element: str, text: str) -> Callable[[int], Awaitable[None]]:
        def call(sequence: int) -> Awaitable[None]:
            return self._client.stream_element_content(
                card.card_id, element, text, sequence=sequence
            )

        return call

    async def _close_card(self, card: _Card, part: str, *, footer: str) -> bool:
        """Write ``part`` as the card's final text and turn streaming off."""
        if self.mode == "patch":
            return await self._patch(card, part, final=True, footer=footer)
        if not card.message_id and not await self._open(card, part, final=True):
            return False
        steps = progress_markdown(self.view) if self._shows_steps(card) else None
        text = self.view.notice if not self.view.answer and self.view.notice else part
        body = final_card(
            steps=steps,
            answer=display_answer(text, final=True) if text else " ",
            footer=footer,
            summary=summary_of(text) if card.index == 0 else "(continued)",
        )

        def update(sequence: int) -> Awaitable[None]:
            return self._client.update_card(card.card_id, body, sequence=sequence)

        if await self._op(card, update, closing=True):
            card.shown_answer, card.shown_raw = text, len(part)
            return True
        return False

    async def _op(
        self,
        card: _Card,
        call: Callable[[int], Awaitable[None]],
        *,
        closing: bool = False,
    ) -> bool:
        """One card operation with the next sequence; handles Feishu's answers by code."""
        for _ in range(2):
            await self._respect_rate(card)
            card.sequence += 1
            card.last_op = self._clock()
            card.recent_ops.append(card.last_op)
            try:
                await self._count(call(card.sequence))
                return True
            except FeishuSequenceError:
                # A retried request that had landed after all: jump ahead and resend.
                card.sequence += 10
                continue
            except FeishuRateLimited:
                self._cadence = min(self._cadence * 1.5, MAX_CADENCE)
                self._dirty.set()  # skip this frame; the next one carries the latest text
                return False
            except FeishuTransportError:
                self._dirty.set()
                return False
            except (FeishuStreamingClosed, FeishuEditWindowClosed) as exc:
                return self._continue_elsewhere(card, exc, closing)
            except (FeishuCardInvalid, FeishuTooLarge) as exc:
                return self._degrade(card, exc)
            except FeishuMessageGone:
                logger.info("the answer card for %s is gone; stopping", self._message_id)
                self.mode = "gone"
                return False
            except FeishuError as exc:
                logger.warning("card %s refused an update: %s", card.card_id, exc)
                self.mode = "plain"
                self._dirty.set()
                return False
        return False

    def _continue_elsewhere(self, card: _Card, exc: FeishuError, closing: bool) -> bool:
        """This card can no longer be edited: it keeps what it shows, a new card continues."""
        logger.info("card %s can no longer be edited (%s); continuing", card.card_id, exc.code)
        next_offset = card.offset + card.shown_raw
        if closing and card.shown_raw == len(self.view.answer) - card.offset:
            return True  # everything was already shown; only the footer is missing
        self._cards.append(_Card(len(self._cards), next_offset))
        self._dirty.set()
        return False

    def _degrade(self, card: _Card, exc: FeishuError) -> bool:
        if self._element_chars <= 500:
            logger.warning("card %s still refused (%s); sending plain messages", card.card_id, exc)
            self.mode = "plain"
        else:
            logger.info("card %s refused (%s); splitting smaller", card.card_id, exc.code)
            self._element_chars //= 2
        self._dirty.set()
        return False

    async def _respect_rate(self, card: _Card) -> None:
        """Never more than OPS_PER_SECOND operations on one card in any one second."""
        ops = card.recent_ops
        while True:
            now = self._clock()
            while ops and ops[0] <= now - RATE_WINDOW:
                ops.popleft()
            if len(ops) < OPS_PER_SECOND:
                return
            await self._sleep(ops[0] + RATE_WINDOW - now)

    # -- fallback: one interactive card, patched ---------------------------------------

    async def _patch(
        self, card: _Card, part: str, *, final: bool, footer: str | None = None
    ) -> bool:
        footer = self.view.footer if footer is None and final else (footer or "")
        steps = progress_markdown(self.view) if self._shows_steps(card) else None
        text = part or (self.view.notice if final else "")
        body = final_card(
            steps=steps,
            answer=display_answer(text, final=final) if text else WORKING,
            footer=footer if final else "",
            summary=summary_of(text) if card.index == 0 else "(continued)",
        )
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        card.last_op = self._clock()
        try:
            if not card.message_id:
                sent = await self._count(
                    self._client.reply_message(
                        self._message_id,
                        msg_type="interactive",
                        content=content,
                        uuid=self._uuid("patch", card.index),
                        reply_in_thread=self._in_thread,
                    )
                )
                card.message_id = sent.message_id
            else:
                await self._count(self._client.patch_message(card.message_id, content))
        except (FeishuRateLimited, FeishuTransportError):
            self._dirty.set()
            return False
        except FeishuMessageGone:
            self.mode = "gone"
            return False
        except FeishuError as exc:
            logger.warning("patching the answer card failed (%s); sending plain messages", exc)
            self.mode = "plain"
            self._dirty.set()
            return False
        card.shown_answer, card.shown_raw = text, len(part)
        return True

    # -- last resort: plain reply cards ------------------------------------------------

    async def _send_plain(self) -> None:
        """Send what no card shows yet as finished reply cards (retried; text if refused)."""
        start = self._cards[-1].offset + self._cards[-1].shown_raw if self._cards else 0
        rest = self.view.answer[start:] or (self.view.notice if not self.view.answer else "")
        if not rest and not self.view.footer:
            return
        for index, card in enumerate(answer_cards(rest or " ", footer=self.view.footer or None)):
            message_id = await self._reply_card(card, index, rest)
            if message_id is None:
                self.mode = "gone"
                return
            self._cards.append(_Card(len(self._cards), start, message_id=message_id))

    async def _send_text(self) -> None:
        """The whole answer (and the footer) as plain text replies: one, unless it is
        longer than a text message holds (then cut where ``split_point`` says)."""
        text = self.view.answer or self.view.notice or " "
        if self.view.footer:
            text += f"\n\n— {self.view.footer}"
        if self._mention:
            text = f'<at user_id="{self._mention}"></at> {text}'
        index = offset = 0
        while offset < len(text):
            part = text[offset:]
            cut = split_point(part, TEXT_CHARS) if len(part) > TEXT_CHARS else len(part)
            message_id = await self._reply_card({}, index, part[:cut], text_only=True)
            if message_id is None:
                self.mode = "gone"
                return
            self._cards.append(_Card(index, offset, message_id=message_id, shown_raw=cut))
            index, offset = index + 1, offset + cut

    async def _reply_card(
        self, card: dict[str, Any], index: int, text: str, *, text_only: bool = False
    ) -> str | None:
        msg_type, content = "interactive", json.dumps(card, ensure_ascii=False)
        uuid = self._uuid("plain", index)
        if text_only:
            msg_type, uuid = "text", self._uuid("text", index)
            content = json.dumps({"text": text[:TEXT_CHARS]}, ensure_ascii=False)
        for delay in (*PLAIN_RETRY_DELAYS, None):
            try:
                sent = await self._count(
                    self._client.reply_message(
                        self._message_id,
                        msg_type=msg_type,
                        content=content,
                        uuid=uuid,
                        reply_in_thread=self._in_thread,
                    )
                )
                message_id: str | None = sent.message_id
                return message_id
            except (FeishuRateLimited, FeishuTransportError) as exc:
                if delay is None:
                    logger.error("the answer to %s was not delivered: %s", self._message_id, exc)
                    return None
                wait = getattr(exc, "retry_after", None) or delay
                await self._sleep(min(wait, 10.0))
            except (FeishuCardInvalid, FeishuTooLarge):
                if msg_type == "text":
                    return None
                # The same text without card rendering, under its own uuid.
                msg_type = "text"
                content = json.dumps({"text": text[:TEXT_CHARS] if index == 0 else "…"})
                uuid = self._uuid("text", index)
            except FeishuError as exc:
                logger.error("the answer to %s was refused by Feishu: %s", self._message_id, exc)
                return None
        return None

    # -- helpers -----------------------------------------------------------------------

    async def _count(self, call: Awaitable[Any]) -> Any:
        self.calls += 1
        return await call

    def _uuid(self, kind: str, index: int) -> str:
        digest = hashlib.sha256(f"{self._seed}:{kind}:{index}".encode()).hexdigest()
        return f"lg-{digest[:40]}"


def split_point(text: str, limit: int) -> int:
    """Where to end a card's part: the last paragraph or line break before ``limit``,
    preferring one outside a code block; a hard cut when there is none."""
    window = text[:limit]
    best_line = window.rfind("\n")
    fence_open = False
    best_outside = -1
    position = 0
    for line in window.split("\n")[:-1]:
        position += len(line) + 1
        if line.lstrip().startswith(("```", "~~~")):
            fence_open = not fence_open
        if not fence_open:
            best_outside = position
    if best_outside > 0:
        return best_outside
    if best_line > 0:
        return best_line + 1
    return limit
