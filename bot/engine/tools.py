"""Tools the agent may call, and the registry that offers them to the model.

A tool is a name, a description, a JSON schema for its arguments, an async handler
taking those arguments as keyword arguments, and a side effect (``read`` or ``write``)
that governance hooks rely on. Arguments are validated against the schema before the
handler runs; the schema is compiled once, when the tool is built.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import fastjsonschema

SideEffect = Literal["read", "write"]

# One line of the compact catalogue used by tool selection: enough to choose, no schemas.
CATALOGUE_LINE_CHARS = 80

ToolHandler = Callable[..., Awaitable[Any]]

# What OpenAI-compatible endpoints accept as a function name; one bad name fails every request.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolError(Exception):
    """Raised by a handler for an expected failure; the model sees the message as-is.

    Use it for failures the model can act on (a backend answered 404, a row was not
    found). Any other exception is reported to the model as an unexpected failure.
    """


class ToolArgumentsError(ValueError):
    """Arguments do not match the tool's schema."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """A document a tool produced (HTML report, markdown file) that the model need not read.

    The observation the model sees is a one-line summary; the content stays on the step
    for the caller to deliver.
    """

    name: str
    content: str
    media_type: str = "text/markdown"


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """A callable the agent may use.

    ``side_effect`` defaults to ``"write"``: a tool nobody classified is treated as one
    that changes something, so approval and read-only rules apply to it.
    ``timeout`` (seconds) overrides the agent's default for this tool.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: ToolHandler
    side_effect: SideEffect = "write"
    timeout: float | None = None
    _validate: Callable[[Any], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-64 ASCII letters, digits, '_' or '-'"
            )
        if self.side_effect not in ("read", "write"):
            raise ValueError(f"tool {self.name}: side_effect must be 'read' or 'write'")
        try:
            validate = fastjsonschema.compile(dict(self.parameters))
        except Exception as exc:  # malformed schemas fail in many ways
            raise ValueError(f"tool {self.name}: invalid parameters schema: {exc}") from exc
        object.__setattr__(self, "_validate", validate)

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Return the arguments (with schema defaults filled in) or raise ToolArgumentsError."""
        try:
            validated = self._validate(dict(arguments))
        except fastjsonschema.JsonSchemaValueException as exc:
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {exc.message}") from exc
        return validated if isinstance(validated, dict) else dict(arguments)

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def summary_line(self, width: int = CATALOGUE_LINE_CHARS) -> str:
        first_line = self.description.strip().splitlines()[0] if self.description.strip() else ""
        line = f"- {self.name}: {first_line}"
        return line if len(line) <= width else line[: width - 1] + "…"


class ToolRegistry:
    """An ordered set of tools with unique names, and the views the loop needs of it."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name: {tool.name}")
            self._tools[tool.name] = tool
        self._openai_schema: list[dict[str, Any]] | None = None
        self._json_prompt: str | None = None

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def filter(self, names: Iterable[str]) -> ToolRegistry:
        """The tools among ``names`` that exist here, in registry order."""
        wanted = set(names)
        return ToolRegistry(t for t in self._tools.values() if t.name in wanted)

    def by_side_effect(self, side_effect: SideEffect) -> ToolRegistry:
        return ToolRegistry(t for t in self._tools.values() if t.side_effect == side_effect)

    def openai_schema(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter of an OpenAI chat-completions request."""
        if self._openai_schema is None:
            self._openai_schema = [t.openai_schema() for t in self._tools.values()]
        return self._openai_schema

    def json_mode_prompt(self) -> str:
        """Tool descriptions with their argument schemas, for the JSON-mode system prompt."""
        if self._json_prompt is None:
            blocks = []
            for tool in self._tools.values():
                schema = json.dumps(tool.parameters, ensure_ascii=False, separators=(",", ":"))
                blocks.append(
                    f"### {tool.name}\n{tool.description.strip()}\nArguments schema: {schema}"
                )
            self._json_prompt = "\n\n".join(blocks) if blocks else "(no tools available)"
        return self._json_prompt

    def catalogue(self, width: int = CATALOGUE_LINE_CHARS) -> str:
        """One short line per tool (name and first line of its description), no schemas."""
        return "\n".join(t.summary_line(width) for t in self._tools.values())
