"""What a turn says of itself (``bot/runtime/turn/records.py``): its footer and its error
line, as pure functions of the run's result."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.engine import AgentResult, Usage
from bot.runtime import texts
from bot.runtime.turn.records import answer_footer, error_text, preview


def result(**fields) -> AgentResult:
    values = {"answer": "", "messages": [], "iterations": 1, "steps": [], "usage": Usage()}
    values.update(fields)
    values.setdefault("elapsed", 0.0)
    return AgentResult(**values)


def test_the_footer_counts_steps_tokens_time_and_names_the_model():
    done = result(iterations=2, usage=Usage(10, 5, 15))
    assert answer_footer(done, 1.26, "gpt") == (
        "2 steps · 15 tokens (10 prompt, 5 completion) · 1.3 s · gpt"
    )
    assert answer_footer(result(), 0.0, "") == "1 step · 0 tokens (0 prompt, 0 completion) · 0.0 s"


def test_an_error_is_said_by_what_failed():
    said = {
        "LLMDeadlineExceeded: too long": texts.model_deadline_passed(120.0),
        "LLMContextOverflow: full": texts.MODEL_CONTEXT_FULL,
        "LLMAuthError: key": texts.MODEL_REFUSED_KEY,
        "model failed: 502": texts.MODEL_UNAVAILABLE,
        "ValueError: something": texts.MODEL_FAILED,
    }
    for error, lead in said.items():
        assert error_text(result(status="failed", error=error), 120.0) == lead


@given(st.text(max_size=400), st.integers(min_value=2, max_value=200))
def test_a_preview_is_one_line_within_its_limit(text, limit):
    shown = preview(text, limit)
    assert "\n" not in shown and len(shown) <= limit
    flat = " ".join(text.split())
    assert shown == flat or (shown.endswith("…") and flat.startswith(shown[:-1]))
