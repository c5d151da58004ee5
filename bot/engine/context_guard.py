"""ContextGuard: keeps a run's working context under the model's token budget.

Tokens are estimated without any tokenizer download: ASCII text at about four
characters a token and CJK (any multi-byte) text at about one character a token,
computed from the UTF-8 length in C. When the model reports more ``prompt_tokens``
than estimated, the estimate is raised to match (never lowered). Accounting is
incremental: each message is counted once, when it is first seen, so a check costs the
same at iteration 200 as at 2.

Compaction summarises the oldest turns with one LLM call (a mechanical summary if
that call fails) and keeps, in their original order: the system prompt, every pinned
message verbatim, and the most recent turns. An assistant message that requested
tools is never separated from its results.

``fit`` is the last check before a request is sent: pinned text is bounded where it
is made (``interrupts.InterruptLimits``), but when pinned messages alone are over the
budget (a small budget, a calibrated estimate), compaction cannot help, and an
oversize request would only fail at the provider. ``fit`` then cuts text, with no model
call, so the request is under the budget: unpinned results first, then the oldest
pinned interrupts, then the question, each with a note of how much was cut.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from .llm import LLM
from .messages import Message, Usage

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD_TOKENS = 4
# Each message in the summarisation prompt is cut to this, so the prompt stays small.
SUMMARY_INPUT_CHARS_PER_MESSAGE = 1500
TRUNCATION_NOTE = "\n[... cut to fit the context budget]"
# What ``fit`` leaves of a message it cuts; says how much went, so the model knows.
FIT_NOTE = "\n[... {cut:,} characters cut to fit the context budget]"
# The least ``fit`` leaves of a message, so the model still sees what it was about.
FIT_MIN_KEPT_CHARS = 200

_SUMMARY_SYSTEM = (
    "You compress the working history of an AI assistant that is using tools to answer a "
    "user. Write a concise summary that keeps every fact, number, identifier, tool result "
    "and decision the assistant still needs, and what remains to be done. Write it in the "
    "language of the conversation. Output only the summary."
)


def estimate_tokens(text: str) -> int:
    """Approximate token count: ~4 ASCII chars a token, ~1 CJK char a token."""
    if not text:
        return 0
    n_chars = len(text)
    if text.isascii():
        return (n_chars + 3) // 4
    # A CJK character is 3 bytes in UTF-8, so (bytes - chars) / 2 counts them closely.
    wide = (len(text.encode("utf-8")) - n_chars) // 2
    return wide + (n_chars - wide + 3) // 4


_NOTE_TOKENS = estimate_tokens(TRUNCATION_NOTE) + 1


# What an image costs in the prompt: OpenAI's count for a ~1,000 px image at "high" detail
# (85 + 170 per 512 px tile); other providers are in the same range.
IMAGE_TOKENS = 765


def message_tokens(message: Message) -> int:
    tokens = MESSAGE_OVERHEAD_TOKENS + estimate_tokens(message.content)
    tokens += IMAGE_TOKENS * len(message.images)
    for call in message.tool_calls:
        tokens += estimate_tokens(call.name) + estimate_tokens(
            call.raw_arguments or json.dumps(dict(call.arguments), ensure_ascii=False)
        )
    return tokens


@dataclass(frozen=True, slots=True)
class Compaction:
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    messages_summarized: int
    summarized_by_model: bool
    usage: Usage


class ContextGuard:
    """Tracks the size of one run's context and compacts it when it nears the budget."""

    def __init__(
        self,
        budget: int,
        *,
        compact_at: float = 0.85,
        keep_recent: float = 0.35,
    ) -> None:
        if budget < 256:
            raise ValueError("context budget must be at least 256 tokens")
        self.budget = budget
        self.compact_at = compact_at
        self.keep_recent = keep_recent
        self._tracked: list[Message] | None = None
        self._counts: list[int] = []
        self._total = 0
        self._calibration = 0

    @property
    def _trim_target(self) -> int:
        # Comfortably below the compaction threshold, or the next turn compacts again.
        return int(self.budget * self.compact_at * 0.9)

    def tokens(self, messages: list[Message]) -> int:
        """Estimated tokens of ``messages``; counts only messages not seen before."""
        if messages is not self._tracked or len(messages) < len(self._counts):
            self._tracked = messages
            self._counts = []
            self._total = 0
            self._calibration = 0
        counts = self._counts
        for index in range(len(counts), len(messages)):
            n = message_tokens(messages[index])
            counts.append(n)
            self._total += n
        return self._total + self._calibration

    def calibrate(self, messages: list[Message], sent: int, prompt_tokens: int) -> None:
        """Record that the first ``sent`` messages really cost ``prompt_tokens``."""
        if prompt_tokens <= 0 or messages is not self._tracked or sent > len(self._counts):
            return
        estimated_sent = self._total - sum(self._counts[sent:])
        # Only ever raise the estimate: some proxies report zero or made-up prompt
        # tokens, and underestimating is what overflows a context window.
        self._calibration = max(0, prompt_tokens - estimated_sent)

    def needs_compaction(self, messages: list[Message]) -> bool:
        return self.tokens(messages) > self.budget * self.compact_at

    def fit(self, messages: list[Message]) -> Compaction | None:
        """``messages`` cut to the budget with no model call; None when they fit already.

        In order, until the estimate is under the budget: the largest unpinned tool
        results and user texts, the oldest pinned interrupts, the question, then any
        other message, longest first. The system prompt and tool-call arguments are
        never cut, and no message is removed, so tool calls keep their results. The
        result is tracked with the same calibration (what the model reported beyond
        the estimate still applies to the smaller request).
        """
        before = self.tokens(messages)
        if before <= self.budget:
            return None
        raised = self._calibration
        # Comfortably below the compaction threshold, as compaction aims, or the next
        # iteration cuts again; the calibration is part of every request's cost.
        target = max(0, self._trim_target - raised)
        fitted = list(messages)
        _trim_to_budget(fitted, target)
        for order in (_pinned_interrupts(fitted), _questions(fitted), _longest_first(fitted)):
            if _cut_in_order(fitted, order, target):
                break
        if fitted == messages:
            return None
        counts = [message_tokens(m) for m in fitted]
        after = sum(counts)
        self._tracked, self._counts, self._total = fitted, counts, after
        self._calibration = raised
        if after + raised > self.budget:
            logger.warning(
                "context still over budget after cutting: ~%d of %d tokens (system prompt "
                "and tool calls are never cut)",
                after + raised,
                self.budget,
            )
        return Compaction(fitted, before, after + raised, 0, False, Usage())

    async def compact(
        self, messages: list[Message], llm: LLM, *, aggressive: bool = False
    ) -> Compaction | None:
        """A smaller context, or None when there is nothing that may be summarised.

        ``aggressive`` (the model itself said the prompt is too long, so the estimate
        is off) keeps only the latest turn besides the system prompt and pinned messages.
        """
        before = self.tokens(messages)
        keep = 0 if aggressive else int(self.budget * self.keep_recent)
        plan = _plan(messages, self._counts, keep)
        if plan is None:
            trimmed = _trim_to_budget(list(messages), self._trim_target)
            if trimmed is None:
                return None
            after = sum(message_tokens(m) for m in trimmed)
            return Compaction(trimmed, before, after, 0, False, Usage())
        head, middle, tail = plan
        to_summarise = [m for m in middle if not m.pinned]
        summary, by_model, usage = await _summarise(to_summarise, llm)
        kept_pinned = [m for m in middle if m.pinned]
        summary_message = Message.user(f"[Summary of earlier work]\n{summary}", kind="summary")
        compacted = [*head, *kept_pinned, summary_message, *tail]
        compacted = _trim_to_budget(compacted, self._trim_target) or compacted
        after = sum(message_tokens(m) for m in compacted)
        return Compaction(compacted, before, after, len(to_summarise), by_model, usage)


def _units(messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
    """Index ranges that must stay together: a tool-calling turn and its results."""
    units: list[tuple[int, int]] = []
    i, n = start, len(messages)
    while i < n:
        j = i + 1
        message = messages[i]
        if message.role == "assistant":
            if message.tool_calls:
                while j < n and messages[j].role == "tool":
                    j += 1
            elif j < n and messages[j].kind == "observation":  # JSON mode: result as user text
                j += 1
        units.append((i, j))
        i = j
    return units


def _plan(
    messages: Sequence[Message], counts: Sequence[int], keep_tokens: int
) -> tuple[list[Message], list[Message], list[Message]] | None:
    head_end = 0
    while head_end < len(messages) and messages[head_end].role == "system":
        head_end += 1
    units = _units(messages, head_end)
    if len(units) < 2:
        return None
    tail_start_unit = len(units) - 1
    tail_tokens = sum(counts[units[-1][0] : units[-1][1]])
    while tail_start_unit > 1:
        start, end = units[tail_start_unit - 1]
        unit_tokens = sum(counts[start:end])
        if tail_tokens + unit_tokens > keep_tokens:
            break
        tail_tokens += unit_tokens
        tail_start_unit -= 1
    middle_end = units[tail_start_unit][0]
    middle = list(messages[head_end:middle_end])
    if not any(not m.pinned for m in middle):
        return None
    return list(messages[:head_end]), middle, list(messages[middle_end:])


async def _summarise(messages: list[Message], llm: LLM) -> tuple[str, bool, Usage]:
    transcript = "\n".join(_render(m) for m in messages)
    try:
        response = await llm.chat([Message.system(_SUMMARY_SYSTEM), Message.user(transcript)])
    except Exception as exc:  # any failure: a mechanical summary still frees the space
        logger.warning("context summary failed, using a mechanical one: %s", exc)
        return _mechanical_summary(messages), False, Usage()
    summary = (response.content or "").strip()
    if not summary:
        return _mechanical_summary(messages), False, response.usage
    return summary, True, response.usage


def _render(message: Message) -> str:
    text = message.content
    if len(text) > SUMMARY_INPUT_CHARS_PER_MESSAGE:
        text = text[:SUMMARY_INPUT_CHARS_PER_MESSAGE] + " …"
    calls = ", ".join(
        f"{c.name}({c.raw_arguments or json.dumps(dict(c.arguments), ensure_ascii=False)})"
        for c in message.tool_calls
    )
    label = message.role.upper() if message.role != "tool" else f"TOOL {message.name}"
    return f"{label}: {text}" + (f" [called {calls}]" if calls else "")


def _mechanical_summary(messages: list[Message]) -> str:
    tools = [c.name for m in messages for c in m.tool_calls]
    lines = [f"{len(messages)} earlier messages were removed to save space."]
    if tools:
        lines.append("Tools called meanwhile: " + ", ".join(tools) + ".")
    last_results = [m for m in messages if m.role == "tool" or m.kind == "observation"][-3:]
    lines += [f"- {_render(m)[:300]}" for m in last_results]
    return "\n".join(lines)


def _trim_to_budget(messages: list[Message], budget: int) -> list[Message] | None:
    """Cut the largest unpinned tool results until the context fits; None if nothing changed."""
    counts = [message_tokens(m) for m in messages]
    excess = sum(counts) - budget
    if excess <= 0:
        return None
    candidates = sorted(
        (i for i, m in enumerate(messages) if not m.pinned and m.role in ("tool", "user")),
        key=lambda i: counts[i],
        reverse=True,
    )
    changed = False
    for i in candidates:
        if excess <= 0:
            break
        message = messages[i]
        # ~4 ASCII characters a token; the note we append costs tokens too.
        keep_chars = max(400, len(message.content) - (excess + _NOTE_TOKENS) * 4)
        if keep_chars >= len(message.content):
            continue
        cut = message.content[:keep_chars] + TRUNCATION_NOTE
        messages[i] = replace(message, content=cut)
        excess -= counts[i] - message_tokens(messages[i])
        changed = True
    return messages if changed else None


def _pinned_interrupts(messages: Sequence[Message]) -> list[int]:
    """The user's interrupts, oldest first: the newest says most about what they want now."""
    return [i for i, m in enumerate(messages) if m.pinned and m.kind == "interrupt"]


def _questions(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.kind == "query"]


def _longest_first(messages: Sequence[Message]) -> list[int]:
    candidates = (i for i, m in enumerate(messages) if m.role != "system")
    return sorted(candidates, key=lambda i: len(messages[i].content), reverse=True)


def _cut_in_order(messages: list[Message], order: Iterable[int], target: int) -> bool:
    """Cut the messages at ``order`` one after another until the total fits ``target``."""
    total = sum(message_tokens(m) for m in messages)
    for i in order:
        if total <= target:
            return True
        before = message_tokens(messages[i])
        messages[i] = _cut_message(messages[i], before - (total - target))
        total -= before - message_tokens(messages[i])
    return total <= target


def _cut_message(message: Message, tokens: int) -> Message:
    """``message`` with its text cut (beginning kept) to cost at most ``tokens``, or as
    close to that as ``FIT_MIN_KEPT_CHARS`` allows; the message itself when it cannot shrink."""
    text = message.content
    if len(text) <= FIT_MIN_KEPT_CHARS or message_tokens(message) <= tokens:
        return message

    def cut(keep: int) -> Message:
        return replace(message, content=text[:keep] + FIT_NOTE.format(cut=len(text) - keep))

    # The longest beginning that fits: the estimate is monotonic in the kept length.
    low, high = FIT_MIN_KEPT_CHARS, len(text) - 1
    if message_tokens(cut(low)) > tokens:
        return cut(low)
    while low < high:
        middle = (low + high + 1) // 2
        if message_tokens(cut(middle)) <= tokens:
            low = middle
        else:
            high = middle - 1
    return cut(low)
