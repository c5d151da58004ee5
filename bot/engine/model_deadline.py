"""One deadline per turn for a model that fails: how long the turn keeps trying it.

The provider (``OpenAICompatibleLLM``) retries a call that failed for a reason that
may pass: a timeout, a connection error, 429, 5xx. Per call that is bounded (its
``max_retries``), but the bounds multiplied: a hung model cost 60 s a timeout × 4
attempts a call × every call of the turn, over twelve minutes of silence before the
person heard anything. A ``ModelDeadline`` puts one bound on all of them:

- It is armed when an attempt fails after the model last answered, at that attempt's
  start (the silence that ended in a timeout counts), and ends ``seconds`` later.
- While it is armed, every attempt (a retry, or the first of a later call of the turn)
  gets at most the time left as its timeout, and a backoff that would outlast it is not
  waited out. Once it passed, the failing call raises ``LLMDeadlineExceeded``, and so
  does every later call of the turn, at once: the turn ends and says so.
- An answer from the model disarms it (the model is back): a late failure in a long
  turn gets the whole window again. A model that is slow but answers never arms it, so
  a long streamed reply or a slow local model is never cut by it.

The bot opens one per turn (``with model_deadline(seconds):`` around the turn, from
``LARKGATE_TURN_DEADLINE_SECONDS``); the context variable carries it into every task
the turn starts (tool calls, plan steps, sub-agents), so they share it. With no
deadline open, the provider behaves as before: its own retries only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .llm import LLMDeadlineExceeded

Clock = Callable[[], float]

_current: ContextVar[ModelDeadline | None] = ContextVar("model_deadline", default=None)


class ModelDeadline:
    """See the module docstring. ``clock`` is monotonic seconds (injected in tests)."""

    def __init__(self, seconds: float, *, clock: Clock = time.monotonic) -> None:
        if seconds <= 0:
            raise ValueError("a model deadline must be positive")
        self.seconds = seconds
        self._clock = clock
        self._ends: float | None = None  # armed: when the window closes

    def now(self) -> float:
        return self._clock()

    @property
    def armed(self) -> bool:
        return self._ends is not None

    def attempt_timeout(self, timeout: float, model: str) -> float:
        """The timeout of an attempt that starts now: ``timeout``, or what is left of
        an armed window; raises ``LLMDeadlineExceeded`` when nothing is left."""
        if self._ends is None:
            return timeout
        left = self._ends - self._clock()
        if left <= 0:
            raise self.exceeded(model)
        return min(timeout, left)

    def answered(self) -> None:
        """The model answered: it is not failing any more."""
        self._ends = None

    def failed(self, started: float) -> None:
        """An attempt that began at ``started`` failed for a reason that may pass."""
        if self._ends is None:
            self._ends = started + self.seconds

    def allows_wait(self, delay: float) -> bool:
        """Whether a backoff of ``delay`` seconds still ends inside the window."""
        return self._ends is None or self._clock() + delay < self._ends

    def exceeded(self, model: str) -> LLMDeadlineExceeded:
        self._ends = self._clock() - 1.0  # stays passed: every later call fails at once
        return LLMDeadlineExceeded(
            f"{model}: no answer within the turn's model deadline of {self.seconds:g} s",
            seconds=self.seconds,
        )


def current_model_deadline() -> ModelDeadline | None:
    """The deadline of the turn this code runs in, if one is open."""
    return _current.get()


@contextmanager
def model_deadline(
    seconds: float | None, *, clock: Clock = time.monotonic
) -> Iterator[ModelDeadline | None]:
    """Open the turn's deadline for the code inside (None: no deadline). A turn has one:
    inside another, the outer one stays in force."""
    outer = _current.get()
    if seconds is None or outer is not None:
        yield outer
        return
    deadline = ModelDeadline(seconds, clock=clock)
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)
