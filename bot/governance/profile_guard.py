"""A chat's profile decides which tools may run there, whatever the model names.

The profile's tools are the only ones its run is given (``bot.runtime.turn.agents``), so a
model naming another one, in native or JSON mode, in a plan's step, a scheduled or a
resumed run, is told by the engine that no such tool exists. This guard is the second
layer, where every call is checked: whatever registry a run was built with (a path that
did not narrow it, a test, a future one), a call outside the run's profile (or a write in a
read-only profile) is refused here, first of governance's PreToolUse hooks, before anyone
is asked to approve it, and never runs; the model is told why.
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
