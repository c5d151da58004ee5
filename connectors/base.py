"""What a connector is: a named backend whose actions become engine tools.

A connector subclasses ``Connector``, declares its typed settings (a pydantic model
in ``Settings``), and marks its async methods with ``@action``. Each action's JSON
schema comes from the method's signature and docstring; its side effect (``read`` or
``write``), timeout and result cap are declared on the decorator, so the hub (not a
prompt) decides what is a write. A failure an action can explain raises
``ToolError`` with a message the model can act on.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict

from bot.engine import Tool, ToolError, tool_from_function

if TYPE_CHECKING:  # lark-oapi is heavy: only the Feishu connector needs it loaded
    from bot.feishu.client import FeishuClient
    from bot.network import Network

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# Whose credentials an action uses: the app's own ("app", the tenant token), or those of
# the person whose turn it is ("user", their Feishu user token; issue 18).
ActsAs = Literal["app", "user"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RESULT_CHARS = 8000

_ACTION = "__larkgate_action__"


@dataclass(frozen=True, slots=True)
class ActionSpec:
    side_effect: Literal["read", "write"]
    timeout: float
    max_result_chars: int
    name: str | None
    acts_as: ActsAs = "app"
    # The user-token scopes the action needs (``acts_as="user"``): what the consent asks.
    scopes: tuple[str, ...] = ()


def action(
    *,
    side_effect: Literal["read", "write"],
    timeout: float = DEFAULT_TIMEOUT,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    name: str | None = None,
    acts_as: ActsAs = "app",
    scopes: Sequence[str] = (),
) -> Callable[[F], F]:
    """Mark a connector method as a tool. ``side_effect`` is required: no guessing.

    ``acts_as="user"``: the action calls Feishu as the person asking, with the ``scopes``
    they grant; approval cards then say so ("as <name>").
    """
    if acts_as == "user" and not scopes:
        raise ValueError("an action that acts as the user must name the scopes it needs")

    def mark(fn: F) -> F:
        spec = ActionSpec(side_effect, timeout, max_result_chars, name, acts_as, tuple(scopes))
        setattr(fn, _ACTION, spec)
        return fn

    return mark


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# A list setting that an environment variable may give as "a, b, c".
CommaList = Annotated[list[str], BeforeValidator(_split_commas)]


class ConnectorSettings(BaseModel):
    """Base for connector settings: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class ConnectorContext:
    """What the composition root lends connectors: shared clients, never settings."""

    # The bot's own Feishu client (its tenant token), for the Feishu workspace tools.
    feishu: FeishuClient | None = None
    # How outbound calls reach the outside (proxies, the CA): MCP over HTTP.
    network: Network | None = None
    # The asking person's Feishu user token, for actions that act as them (None: the
    # bot has no per-user authorisation configured, LARKGATE_TOKEN_KEY).
    user_tokens: UserTokenSource | None = None


class UserTokenSource(Protocol):
    """Runs a call with the user token of the person whose turn this is (issue 18).

    ``call(access_token)`` makes the Feishu request. The source finds who asked from the
    running turn, never from the model's arguments; when they have not authorised (or
    not for ``scopes``), it asks them and waits; an expired or refused token is refreshed
    or re-asked once and ``call`` retried. Anything it cannot do is a ToolError saying
    what the person should do (e.g. only the asker's own turns may act as them).
    """

    async def as_user(
        self, scopes: Sequence[str], purpose: str, call: Callable[[str], Awaitable[T]]
    ) -> T: ...


@dataclass(frozen=True, slots=True)
class ConnectorStatus:
    name: str
    ok: bool
    detail: str
    tools: int = 0


class Connector:
    """A backend and its actions. Subclasses set ``name`` and ``Settings``."""

    name: ClassVar[str]
    Settings: ClassVar[type[ConnectorSettings]] = ConnectorSettings

    def __init__(self, settings: ConnectorSettings, context: ConnectorContext) -> None:
        self.settings = settings
        self.context = context

    async def start(self) -> None:
        """Connect, or discover actions (MCP); a failure here disables only this connector."""

    def actions(self) -> dict[str, ActionSpec]:
        """Each action's tool name and what it declared."""
        specs = {}
        for attribute in dir(type(self)):
            spec = getattr(getattr(type(self), attribute), _ACTION, None)
            if isinstance(spec, ActionSpec):
                specs[spec.name or attribute] = spec
        return specs

    def tools(self) -> list[Tool]:
        """This connector's actions as engine tools, results capped to their limit."""
        tools = []
        for attribute in dir(type(self)):
            spec = getattr(getattr(type(self), attribute), _ACTION, None)
            if spec is None:
                continue
            method = getattr(self, attribute)
            tool = tool_from_function(
                _capped(method, spec.max_result_chars),
                name=spec.name or attribute,
                side_effect=spec.side_effect,
                timeout=spec.timeout,
            )
            tools.append(tool)
        return tools

    async def check(self) -> ConnectorStatus:
        """Whether the backend is reachable and configured; subclasses override."""
        return ConnectorStatus(self.name, True, "ready", len(self.tools()))

    async def aclose(self) -> None:
        """Release clients and connections."""


def _capped(method: Callable[..., Any], limit: int) -> Callable[..., Any]:
    """``method`` with its text result cut to ``limit`` characters, saying so."""

    async def call(**arguments: Any) -> Any:
        result = await method(**arguments)
        if isinstance(result, str) and len(result) > limit:
            omitted = len(result) - limit
            return result[:limit] + f"\n[... {omitted} more characters not shown]"
        return result

    # The schema comes from the original signature and docstring.
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]  # read by inspect
    call.__doc__ = method.__doc__
    call.__name__ = getattr(method, "__name__", "action")
    call.__annotations__ = dict(typing.get_type_hints(method, include_extras=True))
    return call


__all__ = [
    "ActionSpec",
    "ActsAs",
    "CommaList",
    "Connector",
    "ConnectorContext",
    "ConnectorSettings",
    "ConnectorStatus",
    "ToolError",
    "UserTokenSource",
    "action",
]
