"""A chat's profile decides which tools may run there, whatever the model names.

The profile's tools are the only ones its model is offered, but a model can name any tool
(in JSON mode it writes the name as text; a plan's step names its own): so every call is
checked here, first of governance's PreToolUse hooks, before anyone is asked to approve
it. A call outside the profile (or a write in a read-only profile) is refused and never
runs; the model is told why.
"""

from __future__ import annotations

import logging

from bot.engine import HookResult
from bot.engine.hooks import ToolUse
from bot.turn_context import turn_of

logger = logging.getLogger(__name__)


class ProfileGuard:
    """A PreToolUse hook: refuses a call the run's profile does not allow."""

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        turn = turn_of(call.run)
        profile = turn.profile if turn is not None else None
        if profile is None or profile.allows(call.name, call.side_effect):
            return HookResult()
        logger.warning(
            "run %s: %s refused: not allowed by profile %s",
            turn.run_id if turn is not None else "-",
            call.name,
            profile.name,
        )
        return HookResult(False, profile.refusal(call.name))
