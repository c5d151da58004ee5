"""The plan's checklist on the live answer card: golden card JSON, every state, and what
a model-written task cannot do to the card.

Each ``tests/fixtures/live_cards/<name>.json`` is exactly the card built for the view of
the same name in ``GOLDEN``. To (re)write them after a deliberate change, run with
``LARKGATE_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.feishu.live_card import (
    WITHOUT_PLAN,
    WORKING,
    LiveView,
    StepLine,
    final_card,
    progress_markdown,
    steps_markdown,
    streaming_card,
    summary_of,
)
from bot.feishu.live_plan import (
    LINES_SHOWN,
    REASON_CHARS,
    TASK_CHARS,
    PlanLine,
    PlanView,
    plan_markdown,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "live_cards"
UPDATE = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"
ANSWER = "**Paris** is sunny (21 °C), **London** rainy (14 °C), **Tokyo** clear (25 °C)."


def running_view() -> LiveView:
    """Four steps: two lookups running (one of them waiting for an approval), one done,
    the combination pending; tool calls filed under their steps."""
    plan = PlanView(
        phase="executing",
        steps=[
            PlanLine("s1", "Weather in Paris", "completed", duration=1.24),
            PlanLine("s2", "Weather in London", "running"),
            PlanLine("s3", "Post the forecast to #ops", "running"),
            PlanLine("s4", "Compare the three", "pending"),
        ],
    )
    steps = [
        StepLine("c1", "weather", '{"city": "Paris"}', "ok", "sunny", plan_step="s1"),
        StepLine("c2", "weather", '{"city": "London"}', plan_step="s2"),
        StepLine("c3", "send_message", '{"chat": "ops"}', "waiting", plan_step="s3"),
    ]
    return LiveView(steps=steps, plan=plan)


def finished_view() -> LiveView:
    """A second plan after a follow-up: one step done, one failed, one skipped because of it."""
    plan = PlanView(
        phase="done",
        round=1,
        earlier=["plan 1: 2 of 3 done"],
        steps=[
            PlanLine("t1", "Weather in Tokyo", "completed", duration=0.82),
            PlanLine("t2", "Deploy the dashboard", "failed", "timed out after 120 s", 120.0),
            PlanLine(
                "t3", "Link the dashboard", "skipped", "depends on t2, which did not complete"
            ),
        ],
    )
    steps = [
        StepLine("d1", "deploy", '{"service": "dash"}', "blocked", "read-only", plan_step="t2"),
    ]
    return LiveView(steps=steps, plan=plan, answer=ANSWER, footer="9 steps · 1234 tokens · 3.2 s")


GOLDEN: dict[str, Callable[[], dict[str, Any]]] = {
    "plan_running": lambda: streaming_card(
        steps=progress_markdown(running_view()), answer=WORKING, summary=summary_of("")
    ),
    "plan_finished": lambda: final_card(
        steps=progress_markdown(finished_view()),
        answer=ANSWER,
        footer="9 steps · 1234 tokens · 3.2 s",
        summary=summary_of(ANSWER),
    ),
}


def test_every_fixture_has_a_view_and_every_view_a_fixture():
    on_disk = {path.stem for path in FIXTURES.glob("*.json")}
    assert on_disk == set(GOLDEN) or UPDATE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_card(name: str):
    card = GOLDEN[name]()
    path = FIXTURES / f"{name}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n")
    assert card == json.loads(path.read_text())


def test_the_running_checklist_spelled_out():
    text = progress_markdown(running_view())
    assert text.splitlines() == [
        "🗂️ **Plan** · 1/4 done",
        "✅ 1. Weather in Paris · done · 1.2 s",
        '⏳ 2. Weather in London · running — `weather` {"city": "London"}',
        '⏸️ 3. Post the forecast to #ops · waiting for approval — `send_message` {"chat": "ops"}',
        "⬜ 4. Compare the three · pending",
    ]


def test_the_finished_checklist_says_why_steps_did_not_complete():
    lines = progress_markdown(finished_view()).splitlines()
    assert lines[0] == "🗂️ **Plan 2** · 1/3 done"
    assert lines[1] == "_Re-planned (plan 1: 2 of 3 done)._"
    assert lines[3] == (
        "❌ 2. Deploy the dashboard · failed — timed out after 120 s · ⛔ `deploy` blocked"
    )
    assert lines[4] == "⏭️ 3. Link the dashboard · skipped — depends on t2, which did not complete"


@pytest.mark.parametrize(
    ("phase", "detail", "head"),
    [
        ("executing", "", "🗂️ **Plan** · 0/1 done"),
        ("analysing", "", "🗂️ **Plan** · 0/1 done · _checking the results…_"),
        (
            "replanning",
            "follow_up",
            "🗂️ **Plan** · 0/1 done · _re-planning: a follow-up message came in…_",
        ),
        (
            "replanning",
            "low_confidence",
            "🗂️ **Plan** · 0/1 done · _re-planning: the results did not answer it yet…_",
        ),
        ("done", "", "🗂️ **Plan** · 0/1 done"),
    ],
)
def test_the_head_line_says_what_the_plan_is_doing(phase, detail, head):
    plan = PlanView(phase=phase, detail=detail, steps=[PlanLine("a", "Look it up")])
    assert plan_markdown(plan, []).splitlines()[0] == head


def test_before_the_plan_comes_the_card_says_it_is_planning():
    assert plan_markdown(PlanView(), []) == "🗂️ _Planning…_"


def test_a_replan_before_its_steps_arrive_says_it_is_replanning():
    plan = PlanView(phase="replanning", detail="follow_up", steps=[PlanLine("a", "x", "completed")])
    plan.next_round(1)
    assert plan.earlier == ["plan 1: 1 of 1 done"] and plan.steps == []
    assert plan_markdown(plan, []).startswith(
        "🗂️ **Plan 2** · _re-planning: a follow-up message came in…_"
    )


def test_a_long_plan_shows_its_first_steps_and_how_many_more():
    plan = PlanView(steps=[PlanLine(str(i), f"Step {i}") for i in range(LINES_SHOWN + 3)])
    lines = plan_markdown(plan, []).splitlines()
    assert len(lines) == 1 + LINES_SHOWN + 1 and lines[-1] == "_… and 3 more steps_"


def test_stopping_settles_the_steps_that_were_running_or_pending():
    plan = PlanView(
        steps=[PlanLine("a", "x", "running"), PlanLine("b", "y"), PlanLine("c", "z", "completed")]
    )
    plan.settle_stopped()
    assert [line.state for line in plan.steps] == ["cancelled", "skipped", "completed"]


def test_without_a_plan_the_card_says_so_and_lists_the_tool_calls():
    view = LiveView(
        steps=[StepLine("c1", "weather", '{"city": "Paris"}', "ok", "sunny")],
        plan=PlanView(without_plan=True),
    )
    assert progress_markdown(view) == WITHOUT_PLAN + "\n" + steps_markdown(view.steps)
    assert progress_markdown(LiveView(plan=PlanView(without_plan=True))) == WITHOUT_PLAN
    assert progress_markdown(LiveView(steps=view.steps)) == steps_markdown(view.steps)
    assert LiveView(plan=PlanView()).has_progress and not LiveView().has_progress


def test_a_tool_argument_cannot_mention_anyone_in_a_step_line():
    line = StepLine("c1", "send", '{"text": "<at id=all></at> hi"}')
    assert "<at" not in steps_markdown([line])


@given(st.text(max_size=400), st.text(max_size=200), st.sampled_from(["failed", "skipped"]))
def test_a_model_written_task_or_reason_cannot_format_link_or_mention(task, reason, state):
    plan = PlanView(steps=[PlanLine("x", task, state, reason)])
    text = plan_markdown(plan, [])
    step_line = text.split("\n", 1)[1]
    assert "\n" not in step_line  # one line a step, whatever the task holds
    for dangerous in ("<", ">", "[", "]", "*", "_", "`", "~", "|"):
        shown = step_line.replace("🗂️", "").replace("⏭️", "").replace("❌", "")
        # The only markup in the line is ours: the number and the separators.
        assert dangerous not in shown.replace(" — ", " ").replace(" · ", " ")
    # Escaping makes a character up to six (&#126;), never more: a line stays bounded.
    assert len(step_line) <= 40 + 6 * (TASK_CHARS + REASON_CHARS)


def test_a_long_task_is_cut_on_its_line():
    plan = PlanView(steps=[PlanLine("a", "word " * 100)])
    line = plan_markdown(plan, []).splitlines()[1]
    task = line.removeprefix("⬜ 1. ").removesuffix(" · pending")
    assert task.endswith("…") and len(task) == TASK_CHARS
