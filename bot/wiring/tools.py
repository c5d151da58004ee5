"""The tools a run may call and the hooks around every call: the connectors', the schedule
tools, ask_user, and governance (approvals, read-only mode, budgets, per-user
authorisation)."""

from __future__ import annotations

import asyncio

from bot.config import Settings
from bot.engine import (
    Hook,
    ToolRegistry,
    ToolUse,
)
from bot.feishu.memory_card import MEMORY_ACTION
from bot.governance.names import UserNames
from bot.governance.person_wait import PersonWaits
from bot.governance.questions import Questions
from bot.governance.seal import ButtonSeal
from bot.governance.service import build_governance
from bot.governance.user_auth.service import UserAuth, build_user_auth
from bot.runtime.schedules.tools import ScheduleTools
from bot.runtime.tasks import TaskTracker
from bot.store import (
    CallLogStore,
)
from bot.store.questions import QuestionStore
from bot.store.replays import ReplayGuard
from bot.store.schedules import ScheduleStore
from bot.turn_context import turn_of
from connectors.call_log import CallLogHook

from .connectors import build_connectors, scopes_by_tool
from .memory import build_memory
from .parts import Foundation, GovernedTools, Overrides
from .schedules import scheduler_config


async def governed_tools(
    settings: Settings,
    overrides: Overrides,
    base: Foundation,
    tasks: TaskTracker,
) -> GovernedTools:
    runtime = settings.runtime()
    # One people directory: approval cards name people, schedules default to their zone.
    names = UserNames(base.feishu)
    user_auth = _user_auth(settings, base, names)
    hub = await build_connectors(
        settings, overrides, base.feishu, user_auth.source if user_auth else None
    )
    user_scopes = scopes_by_tool(hub)
    schedules = ScheduleStore(base.database, clock=base.clock, app=base.app)
    schedule_config = scheduler_config(settings, base.owner)
    wake = asyncio.Event()
    schedule_tools = ScheduleTools(
        schedules,
        schedule_config,
        default_timezone=settings.larkgate_timezone,
        is_admin=settings.governance().is_admin,
        wake=wake.set,
        time_zone_of=names.time_zone,
        clock=base.clock,
    )
    # The tools that act as the asker stay offered without per-user authorisation: each
    # then says what an admin must set, where otherwise the model would answer "my
    # calendar" from the bot's own calendar as if it were the asker's.
    question_store = QuestionStore(base.database, clock=base.clock, app=base.app)
    questions = Questions(
        store=question_store,
        waits=PersonWaits(question_store, kind="question"),
        feishu=base.feishu,
        seal=ButtonSeal(settings.governance().button_key),
        owner=base.owner,
        ttl_seconds=float(settings.larkgate_question_ttl_seconds),
        name_of=names.name,
        timezone=settings.larkgate_timezone,
        clock=base.clock,
    )
    memory = build_memory(settings, base)
    registry = ToolRegistry(
        [
            *hub.registry,
            *schedule_tools.tools(),
            questions.tool(),
            *(memory.tools if memory is not None else ()),
            *overrides.tools,
        ]
    )
    governance = build_governance(
        settings.governance(),
        database=base.database,
        feishu=base.feishu,
        tools=registry,
        connector_of=hub.connector_of,
        owner=base.owner,
        spawn=tasks.spawn,
        sweep_interval=max(1.0, runtime.claim_lease_seconds / 2),
        # A signed request is accepted up to max_event_age either side of its timestamp.
        replay_window_seconds=2 * runtime.max_event_age_seconds + 60,
        clock=base.clock,
        on_approval_outcome=base.metrics.approval_outcome,
        names=names,
        acts_as_user=hub.acts_as_user,
        user_auth_gate=user_auth.gate(user_scopes.get) if user_auth else None,
        app=base.app,
    )
    if memory is not None:
        governance.card_actions.register(MEMORY_ACTION, memory.cards.click)
    # Governance's hooks come last among those that may rewrite or hold a call: the
    # approver sees the arguments that will run, and read-only mode is checked again
    # right before the call runs (the call log only observes afterwards).
    call_log = CallLogStore(base.database)
    hooks: list[Hook] = [
        *overrides.hooks,
        schedule_tools.guard(),
        *governance.hooks,
        CallLogHook(call_log.record, hub.connector_of, clock=base.clock, run_of=turn_run_id),
    ]
    return GovernedTools(
        hub=hub,
        registry=registry,
        governance=governance,
        hooks=hooks,
        schedules=schedules,
        schedule_config=schedule_config,
        schedule_wake=wake,
        questions=questions,
        user_auth=user_auth,
        memory=memory,
        login_scopes=tuple(sorted({s for scopes in user_scopes.values() for s in scopes})),
    )


def _user_auth(settings: Settings, base: Foundation, names: UserNames) -> UserAuth | None:
    """Per-user authorisation, when LARKGATE_TOKEN_KEY turns it on."""
    config = settings.user_auth()
    if config is None:
        return None
    return build_user_auth(
        config,
        database=base.database,
        feishu=base.feishu,
        feishu_config=settings.feishu(),
        replays=ReplayGuard(base.database, clock=base.clock),
        timezone=settings.larkgate_timezone,
        owner=base.owner,
        name_of=names.name,
        clock=base.clock,
    )


def turn_run_id(call: ToolUse) -> str:
    """The run a tool call belongs to, as the bot records runs: the turn's (each step of a
    plan runs under an engine run id of its own)."""
    turn = turn_of(call.run)
    return turn.run_id if turn is not None else call.run.run_id
