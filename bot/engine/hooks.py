"""PreToolUse / PostToolUse hooks: policy that runs outside the model's control.

A hook is any object with ``async pre_tool_use(call)`` and/or
``async post_tool_use(call, observation)``, each returning a :class:`HookResult`.
Hooks run in the order given. A pre hook may block the call (the model sees the
reason), rewrite its arguments (later hooks see the rewrite) or just observe; a post
hook may rewrite the observation.

Hooks fail closed: a pre hook that raises, or returns anything but a ``HookResult``,
blocks the call; a post hook that does withholds the observation. A hook may await as
long as it needs (an approval waits for a human); cancelling the run cancels the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol

if TYPE_CHECKING:
    from .checkpoint import RunCheckpoint
    from .tools import SideEffect, Tool

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HookResult:
    """What a hook decided. A non-None ``arguments`` / ``observation`` replaces the original."""

    allow: bool = True
    reason: str | None = None
    arguments: Mapping[str, Any] | None = None
    observation: str | None = None


if TYPE_CHECKING:
    # A run's deps default to Any where the engine does not care which they are: a bare
    # ``RunContext`` is ``RunContext[Any]``. typing_extensions for the checker only (its
    # stubs come with mypy; Python 3.11's TypeVar takes no default, nor needs one to run).
    from typing_extensions import TypeVar

    DepsT = TypeVar("DepsT", default=Any)
else:
    from typing import TypeVar

    DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """Who and what a run is for; ``deps`` is whatever the caller passed to ``run()``.

    Generic over the deps, as pydantic-ai's RunContext is: the engine passes them through
    untouched (``RunContext[Any]``); whoever gave them reads them back typed, through one
    accessor that checks their class (the bot's is ``bot.turn_context.turn_of``).
    """

    run_id: str
    query: str
    deps: DepsT = None  # type: ignore[assignment]  # None: a run given no deps


# The run a tool is serving, while its handler runs: a tool that acts in the conversation
# (posts a file into it) reads where through the run's deps (the bot's ``current_turn()``),
# instead of taking a chat id the model could get wrong (or point elsewhere).
_CURRENT_RUN: ContextVar[RunContext[Any] | None] = ContextVar("larkgate_current_run", default=None)


def current_run() -> RunContext[Any] | None:
    """The :class:`RunContext` of the tool call in progress, or None outside one."""
    return _CURRENT_RUN.get()


# The call a tool's handler serves, while it runs: a tool that waits for a person
# (``ask_user``) finds its call id and the run's checkpoint through it, as hooks do.
_CURRENT_USE: ContextVar[ToolUse | None] = ContextVar("larkgate_current_use", default=None)


def current_tool_use() -> ToolUse | None:
    """The :class:`ToolUse` whose handler is running, or None outside one."""
    return _CURRENT_USE.get()


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call as hooks see it."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str
    side_effect: SideEffect
    tool: Tool
    iteration: int
    run: RunContext[Any]
    # The model's stated reasoning for this call, when it gave one.
    reason: str | None = None
    # For post hooks: why the tool failed, or None when it succeeded.
    error: str | None = None
    # For pre hooks: a snapshot of the run as it is when called, for a hook that waits
    # long (an approval) to store and resume elsewhere (``checkpoint.py``); None for post
    # hooks and where the run cannot be resumed from one (plan mode's step agents).
    checkpoint: Callable[[], RunCheckpoint] | None = None


class PreToolUseHook(Protocol):
    async def pre_tool_use(self, call: ToolUse) -> HookResult: ...


class PostToolUseHook(Protocol):
    async def post_tool_use(self, call: ToolUse, observation: str) -> HookResult: ...


# What ``ReActAgent(hooks=...)`` takes: an object with either method, or both.
Hook = PreToolUseHook | PostToolUseHook

PreFn = Callable[[ToolUse], Awaitable[HookResult]]
PostFn = Callable[[ToolUse, str], Awaitable[HookResult]]


@dataclass(frozen=True, slots=True)
class PreDecision:
    """The outcome of all pre hooks: the (possibly rewritten) call, or why it is blocked."""

    call: ToolUse
    blocked_reason: str | None = None


class HookChain:
    """Runs a list of hooks in order with fail-closed semantics."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self.hooks = tuple(hooks)
        self._pre: list[tuple[str, PreFn]] = []
        self._post: list[tuple[str, PostFn]] = []
        for hook in self.hooks:
            label = type(hook).__name__
            pre = getattr(hook, "pre_tool_use", None)
            post = getattr(hook, "post_tool_use", None)
            if pre is None and post is None:
                raise TypeError(f"{label} has neither pre_tool_use nor post_tool_use")
            if pre is not None:
                self._pre.append((label, pre))
            if post is not None:
                self._post.append((label, post))

    def __bool__(self) -> bool:
        return bool(self._pre or self._post)

    async def pre(self, call: ToolUse) -> PreDecision:
        for label, hook in self._pre:
            try:
                result = await hook(call)
            except Exception as exc:  # any hook failure blocks the call
                logger.exception("pre_tool_use hook %s failed for %s", label, call.name)
                return PreDecision(call, f"policy check {label} failed ({type(exc).__name__})")
            if not isinstance(result, HookResult):
                logger.error("pre_tool_use hook %s returned %r", label, type(result).__name__)
                return PreDecision(call, f"policy check {label} gave no decision")
            if not result.allow:
                return PreDecision(call, result.reason or f"blocked by {label}")
            if result.arguments is not None:
                call = replace(call, arguments=dict(result.arguments))
        return PreDecision(call)

    async def post(self, call: ToolUse, observation: str) -> str:
        for label, hook in self._post:
            try:
                result = await hook(call, observation)
            except Exception as exc:  # fail closed: withhold the observation
                logger.exception("post_tool_use hook %s failed for %s", label, call.name)
                return f"[observation withheld: policy check {label} failed ({type(exc).__name__})]"
            if not isinstance(result, HookResult):
                logger.error("post_tool_use hook %s returned %r", label, type(result).__name__)
                return f"[observation withheld: policy check {label} gave no decision]"
            if not result.allow:
                return f"[observation withheld: {result.reason or f'blocked by {label}'}]"
            if result.observation is not None:
                observation = result.observation
        return observation
