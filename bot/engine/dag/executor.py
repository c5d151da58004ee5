"""DAGExecutor: runs a plan's steps as their dependencies complete, in parallel, capped.

Every step whose dependencies all completed starts at once, up to ``max_concurrency``
at a time; a step that did not complete skips its dependants. A step waiting in a hook
(an approval) holds only its own place: the others go on. A follow-up message from the
user (the run's ``InterruptQueue``) stops new steps from starting, lets the running ones
finish and leaves the rest pending, so the run can re-plan. A stop (the run's task
cancelled by ``InterruptQueue.stop``) stops the running steps through their own queues,
waits for their results and skips the rest, then lets the cancellation go on.
"""

from __future__ import annotations

import asyncio
import logging

from ..interrupts import InterruptQueue
from .board import RoundBoard
from .prompts import step_question
from .step_run import RunningStep, StepOutcome, StepRunContext, inputs_of

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 5
DEFAULT_DEPENDENCY_CHARS = 2_000
# How long stopped steps get to hand back their results before they are cancelled hard.
STOP_GRACE = 10.0
FOLLOW_UP_REASON = "a follow-up message came in: re-planning"


class DAGExecutor:
    def __init__(
        self,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        dependency_chars: int = DEFAULT_DEPENDENCY_CHARS,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency = max_concurrency
        self.dependency_chars = dependency_chars

    async def execute(
        self,
        board: RoundBoard,
        context: StepRunContext,
        interrupts: InterruptQueue | None = None,
    ) -> None:
        """Run ``board``'s plan to its end (or its interruption) and record every step."""
        running: dict[asyncio.Task[StepOutcome], RunningStep] = {}
        try:
            while True:
                board.skip_blocked()
                if interrupts is not None and not board.interrupted and interrupts.pending():
                    board.interrupted = True
                if not board.interrupted:
                    self._launch(board, context, running)
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    _settle(board, running.pop(task), "cancelled")
        except asyncio.CancelledError:
            reason = (interrupts.stop_reason if interrupts is not None else None) or "stopped"
            await _stop_all(board, running, reason)
            raise
        for step in board.pending():
            board.skip(step, FOLLOW_UP_REASON if board.interrupted else "not reached")

    def _launch(
        self,
        board: RoundBoard,
        context: StepRunContext,
        running: dict[asyncio.Task[StepOutcome], RunningStep],
    ) -> None:
        for step in board.ready()[: self.max_concurrency - len(running)]:
            inputs = inputs_of(step, board.completed())
            question = step_question(board.goal, step.task, inputs, self.dependency_chars)
            board.start(step)
            handle = RunningStep(step, question, context, board.round)
            running[handle.task] = handle


async def _stop_all(
    board: RoundBoard, running: dict[asyncio.Task[StepOutcome], RunningStep], reason: str
) -> None:
    for handle in running.values():
        handle.stop(reason)
    if running:
        _, late = await asyncio.wait(running, timeout=STOP_GRACE)
        for task in late:
            logger.warning("plan step %s did not stop in %g s", running[task].step.id, STOP_GRACE)
            task.cancel()
        if late:
            await asyncio.wait(late)
    for handle in running.values():
        _settle(board, handle, reason)
    for step in board.pending():
        board.skip(step, reason)


def _settle(board: RoundBoard, handle: RunningStep, reason: str) -> None:
    task = handle.task
    if task.cancelled():
        outcome = handle.cancelled_outcome(reason)
    elif task.exception() is not None:  # a bug of ours in the step's wrapper
        error = task.exception()
        logger.error("plan step %s crashed", handle.step.id, exc_info=error)
        outcome = handle.failed_outcome(f"internal error: {type(error).__name__}")
    else:
        outcome = task.result()
    board.end(outcome.report, outcome.tool_steps)
