"""Scheduled tasks: the scheduler's settings, the scheduler that fires tasks as turns, and the
/schedules card with its buttons."""

from __future__ import annotations

from bot.config import Settings
from bot.conversations import ConversationWorkers
from bot.feishu.question_card import QUESTION_ACTION
from bot.feishu.schedules_card import SCHEDULE_ACTION
from bot.governance.seal import ButtonSeal
from bot.runtime.intake.admission import Admission
from bot.runtime.schedules.cards import ScheduleCards
from bot.runtime.schedules.scheduler import ScheduledRuns, SchedulerConfig
from bot.runtime.turn import TurnRunner

from .parts import Foundation, GovernedTools


def scheduler_config(settings: Settings, owner: str) -> SchedulerConfig:
    return SchedulerConfig(
        owner=owner,
        lease_seconds=settings.runtime().claim_lease_seconds,
        grace_seconds=settings.larkgate_schedule_misfire_grace_seconds,
        max_per_creator=settings.larkgate_schedule_max_per_user,
        min_interval_seconds=settings.larkgate_schedule_min_interval_seconds,
    )


def scheduling(
    settings: Settings,
    base: Foundation,
    tools: GovernedTools,
    workers: ConversationWorkers,
    turns: TurnRunner,
) -> tuple[ScheduledRuns, ScheduleCards]:
    """The scheduler that fires tasks as turns, and the /schedules card with its buttons."""
    runs = ScheduledRuns(
        tools.schedules,
        tools.schedule_config,
        feishu=base.feishu,
        workers=workers,
        turns=turns,
        admission=admission(settings, base, tools),
        wake=tools.schedule_wake,
        clock=base.clock,
    )
    cards = ScheduleCards(
        tools.schedules,
        is_admin=settings.governance().is_admin,
        timezone=settings.larkgate_timezone,
        seal=ButtonSeal(settings.governance().button_key),
    )
    tools.governance.card_actions.register(SCHEDULE_ACTION, cards.click)
    tools.governance.card_actions.register(QUESTION_ACTION, tools.questions.on_click)
    return runs, cards


def admission(settings: Settings, base: Foundation, tools: GovernedTools) -> Admission:
    """What a message and a scheduled task's firing both pass to start a run."""
    return Admission(settings.policy(), tools.governance.budgets, base.feishu)
