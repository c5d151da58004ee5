"""The caller's ``on_event`` for a ReAct run made on plan mode's behalf.

When plan mode answers with ReAct (no usable plan, or auto mode chose it), the ReAct
run's ``done`` must count what plan mode spent before it (the planning, the mode
choice), and plan mode's own closing events go just before it, in the same order
the caller would see them from one run.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import replace

from ..events import DoneEvent, EventCallback, RunEvent
from ..messages import Usage

logger = logging.getLogger(__name__)


def relay(
    on_event: EventCallback | None, spent: Usage, before_done: Sequence[RunEvent]
) -> EventCallback | None:
    if on_event is None:
        return None
    if not before_done and spent == Usage():
        return on_event  # nothing to add: the ReAct run's events as they are

    async def forward(event: RunEvent) -> None:
        if isinstance(event, DoneEvent):
            for earlier in before_done:
                try:
                    await _deliver(on_event, earlier)
                except Exception:  # as EventSink does: a broken consumer still gets ``done``
                    logger.exception("on_event consumer failed on %s event", earlier.type)
            event = replace(event, usage=event.usage + spent)
        await _deliver(on_event, event)

    return forward


async def _deliver(on_event: EventCallback, event: RunEvent) -> None:
    outcome = on_event(event)
    if inspect.isawaitable(outcome):
        await outcome
