"""LiveAnswer: how run events become the live card's view, plan mode included (the card
writer is in economy mode here, so nothing is sent: only the view is looked at)."""

from __future__ import annotations

from bot.engine import PhaseEvent, PlanStepEvent, StepEvent
from bot.feishu.card_writer import LiveReply
from bot.feishu.live_card import progress_markdown
from bot.runtime.turn.live import LiveAnswer


def live() -> LiveAnswer:
    # Economy mode sends nothing before ``finish``, which these tests never call.
    reply = LiveReply(None, message_id="om_q", in_thread=False, uuid_seed="om_q", streaming=False)  # type: ignore[arg-type]
    return LiveAnswer(reply)


def step(step_id: str, state: str, round_: int = 0, **extra: object) -> PlanStepEvent:
    return PlanStepEvent(step_id, f"Task {step_id}", state, round_, **extra)  # type: ignore[arg-type]


async def test_plan_events_build_the_checklist_and_tool_calls_are_filed_under_steps():
    answer = live()
    answer.on_event(PhaseEvent("planning"))
    assert progress_markdown(answer.reply.view) == "🗂️ _Planning…_"
    assert answer.started
    for step_id in ("a", "b"):
        answer.on_event(step(step_id, "pending"))
    answer.on_event(PhaseEvent("executing"))
    answer.on_event(step("a", "running"))
    answer.on_event(StepEvent("started", 0, 1, "c1", "lookup", {"q": "x"}, plan_step="a"))
    answer.on_event(step("b", "skipped", reason="depends on a"))
    view = answer.reply.view
    assert view.steps[0].plan_step == "a"
    assert progress_markdown(view).splitlines() == [
        "🗂️ **Plan** · 0/2 done",
        '⏳ 1. Task a · running — `lookup` {"q": "x"}',
        "⏭️ 2. Task b · skipped — depends on a",
    ]
    answer.waiting("c1")
    assert "⏸️ 1. Task a · waiting for approval" in progress_markdown(view)
    answer.stopped("_Stopped._")
    assert progress_markdown(view).splitlines()[1].startswith("⏹️ 1. Task a · stopped")


async def test_a_replan_replaces_the_steps_and_late_events_of_the_old_plan_change_nothing():
    answer = live()
    answer.on_event(step("a", "pending"))  # no planning phase seen: the plan starts here
    answer.on_event(step("a", "completed", duration=0.5))
    answer.on_event(PhaseEvent("replanning", 1, "follow_up"))
    answer.on_event(step("x", "pending", 1))
    answer.on_event(step("a", "failed", 0, reason="late"))  # from the replaced plan
    plan = answer.reply.view.plan
    assert plan is not None and plan.round == 1
    assert [(line.step_id, line.state) for line in plan.steps] == [("x", "pending")]
    assert plan.earlier == ["plan 1: 1 of 1 done"]


async def test_without_a_planning_phase_other_phases_show_nothing():
    answer = live()
    answer.on_event(PhaseEvent("done", 0, "answered without a plan"))
    assert answer.reply.view.plan is None and not answer.started


async def test_no_usable_plan_says_so_and_shows_the_react_calls():
    answer = live()
    answer.on_event(PhaseEvent("planning"))
    answer.on_event(PhaseEvent("executing", 0, "no usable plan: answering without one"))
    answer.on_event(StepEvent("started", 0, 1, "c1", "lookup", {"q": "x"}))
    text = progress_markdown(answer.reply.view)
    assert text.startswith("_No usable plan came: answering directly._\n")
    assert "`lookup`" in text
