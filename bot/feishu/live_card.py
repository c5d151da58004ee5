"""The live answer card: what it shows, as pure functions of a small view model.

The card has up to three markdown elements: ``steps`` (one line per tool call, with
its state and a short preview; in plan mode the plan's checklist, see ``live_plan``),
``answer`` (the answer as it streams) and, at the end, ``footer`` (iterations, tokens,
time, model). While streaming, partial markdown
is made presentable (an open code block is closed for display, tables past the
per-card limit become preformatted text); the stored text stays exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .card_elements import markdown as _markdown
from .live_plan import PlanView, plan_markdown
from .render import TABLES_PER_CARD, limit_tables

StepState = Literal["running", "waiting", "ok", "error", "blocked", "cancelled"]

STEPS_SHOWN = 8
PREVIEW_CHARS = 80
WORKING = "_Working on it…_"
# The status line of a card posted before anything else is known (``LiveReply.open_now``):
# the answer's first text replaces it.
THINKING = "_Thinking…_"

_ICONS: dict[str, str] = {
    "running": "⏳",
    "waiting": "⏸️",
    "ok": "✅",
    "error": "❌",
    "blocked": "⛔",
    "cancelled": "⏹️",
}
_LABELS: dict[str, str] = {
    "running": "running",
    "waiting": "waiting for approval",
    "ok": "done",
    "error": "failed",
    "blocked": "blocked",
    "cancelled": "cancelled",
}
_FENCE_LINE = re.compile(r"^\s*(```+|~~~+)", re.MULTILINE)
_AT_TAG = re.compile(r"<(?=/?at\b)", re.IGNORECASE)
WITHOUT_PLAN = "_No usable plan came: answering directly._"


@dataclass(slots=True)
class StepLine:
    call_id: str
    tool: str
    arguments: str
    state: StepState = "running"
    result: str = ""
    plan_step: str | None = None  # in plan mode: the step whose agent made the call


@dataclass(slots=True)
class LiveView:
    """Everything the card shows. Mutated by the writer's owner, read by the writer."""

    steps: list[StepLine] = field(default_factory=list)
    answer: str = ""
    footer: str = ""
    notice: str = ""  # e.g. "Stopped." shown instead of an answer
    plan: PlanView | None = None  # plan mode: the plan, shown as a checklist

    @property
    def has_progress(self) -> bool:
        """Whether there is work to show above the answer (tool calls or a plan)."""
        return bool(self.steps) or self.plan is not None

    def step(self, call_id: str) -> StepLine | None:
        for line in reversed(self.steps):
            if line.call_id == call_id:
                return line
        return None


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def progress_markdown(view: LiveView) -> str:
    """The ``steps`` element: the plan's checklist in plan mode, else the tool calls."""
    plan = view.plan
    if plan is None:
        return steps_markdown(view.steps)
    if plan.without_plan:
        return "\n".join(filter(None, (WITHOUT_PLAN, steps_markdown(view.steps))))
    return plan_markdown(plan, view.steps)


def steps_markdown(steps: list[StepLine]) -> str:
    shown = steps[-STEPS_SHOWN:]
    lines = []
    if len(steps) > len(shown):
        lines.append(f"_… {len(steps) - len(shown)} earlier steps_")
    for step in shown:
        line = f"{_ICONS[step.state]} `{step.tool}` {_escape(step.arguments)}"
        line += f" · {_LABELS[step.state]}"
        if step.result and step.state != "running":
            line += f" — {_escape(step.result)}"
        lines.append(line)
    return "\n".join(lines)


def display_answer(text: str, *, final: bool) -> str:
    """``text`` as the answer element shows it: presentable even when cut mid-stream."""
    shown = limit_tables(text, TABLES_PER_CARD)
    if not final and len(_FENCE_LINE.findall(shown)) % 2 == 1:
        shown += "\n```"  # close the open code block for display only
    return shown


@dataclass(frozen=True, slots=True)
class Typewriter:
    """How the Feishu client types out streamed text between two updates: ``step``
    characters every ``frequency_ms`` (the card's ``streaming_config``).

    Paced a little faster than the text arrives (``LEAD``), the client finishes typing
    one update's new text just before the next update brings more, so a card updated
    about once a second still reads as a steady stream. The strategy is "fast": text
    still being typed when an update arrives is shown at once, so the display never
    falls behind the model.
    """

    frequency_ms: int
    step: int

    FRAME_MS = 25  # 40 frames a second: smooth, and steps stay a few characters
    LEAD = 1.25
    DEFAULT_RATE = 200.0  # characters a second (50 tokens/s of English), until measured

    @classmethod
    def for_rate(cls, chars_per_second: float) -> Typewriter:
        step = round(max(chars_per_second, 1.0) * cls.LEAD * cls.FRAME_MS / 1000)
        return cls(cls.FRAME_MS, max(1, step))

    @property
    def chars_per_second(self) -> float:
        return self.step * 1000 / self.frequency_ms

    def config(self) -> dict[str, Any]:
        return {
            "print_frequency_ms": {"default": self.frequency_ms},
            "print_step": {"default": self.step},
            "print_strategy": "fast",
        }


def streaming_card(
    *, steps: str | None, answer: str, summary: str, typewriter: Typewriter | None = None
) -> dict[str, Any]:
    """The card entity created for streaming (CardKit, JSON 2.0, streaming mode on)."""
    typewriter = typewriter or Typewriter.for_rate(Typewriter.DEFAULT_RATE)
    elements = []
    if steps is not None:
        elements.append(_markdown("steps", steps, size="notation"))
    elements.append(_markdown("answer", answer))
    return {
        "schema": "2.0",
        "config": {
            "update_multi": True,
            "streaming_mode": True,
            "summary": {"content": summary},
            "streaming_config": typewriter.config(),
        },
        "body": {"direction": "vertical", "elements": elements},
    }


def final_card(*, steps: str | None, answer: str, footer: str, summary: str) -> dict[str, Any]:
    """The same card at rest: streaming off, footer added, summary set for the chat list."""
    elements = []
    if steps is not None:
        elements.append(_markdown("steps", steps, size="notation"))
    elements.append(_markdown("answer", answer or " "))
    if footer:
        elements.append(_markdown("footer", footer, size="notation"))
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "streaming_mode": False, "summary": {"content": summary}},
        "body": {"direction": "vertical", "elements": elements},
    }


def summary_of(text: str) -> str:
    plain = " ".join(re.sub(r"[#*`>|_\[\]]", "", text).split())
    return plain[:60] + ("…" if len(plain) > 60 else "") if plain else "larkgate"


def _escape(text: str) -> str:
    # Previews are data, not markdown: keep them from opening code spans or links, or
    # mentioning anyone (an argument may carry "<at id=all></at>").
    return _AT_TAG.sub("<\u200b", text.replace("`", "ʼ").replace("[", "［").replace("]", "］"))
