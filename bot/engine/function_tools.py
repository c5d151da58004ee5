"""Build a ``Tool`` from a typed Python function.

The argument schema comes from the signature through pydantic, so the annotations are
the single source of truth: ``Annotated[int, Field(description=...)]`` or a Google-style
``Args:`` section documents a parameter; defaults make it optional. The handler
validates (and coerces) with the same model before calling the function. Synchronous
functions run in a worker thread so they never block the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .tools import SideEffect, Tool, ToolArgumentsError

_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$")


def tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: SideEffect = "write",
    timeout: float | None = None,
) -> Tool:
    """Wrap ``fn`` (async or sync, returning str or anything JSON-able) as a Tool."""
    tool_name = name or fn.__name__
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    model = _arguments_model(fn, tool_name, arg_docs)
    schema = _clean_schema(model.model_json_schema())
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(**arguments: Any) -> Any:
        try:
            parsed = model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(_short_validation_message(tool_name, exc)) from exc
        kwargs = {key: getattr(parsed, key) for key in model.model_fields}
        if is_async:
            return await fn(**kwargs)
        return await asyncio.to_thread(fn, **kwargs)

    return Tool(
        name=tool_name,
        description=description or summary or tool_name,
        parameters=schema,
        handler=handler,
        side_effect=side_effect,
        timeout=timeout,
    )


def tool(
    *, name: str | None = None, side_effect: SideEffect = "write", timeout: float | None = None
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :func:`tool_from_function`."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return tool_from_function(fn, name=name, side_effect=side_effect, timeout=timeout)

    return wrap


def _arguments_model(
    fn: Callable[..., Any], tool_name: str, arg_docs: dict[str, str]
) -> type[BaseModel]:
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{tool_name}: *args/**kwargs cannot be described as a tool schema")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = arg_docs.get(param.name)
        fields[param.name] = (annotation, Field(default, description=doc) if doc else default)
    return create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary paragraph and the per-argument lines of a Google-style docstring."""
    match = _ARGS_SECTION.search(doc)
    head = doc[: match.start()] if match else doc
    summary = " ".join(head.strip().split("\n\n")[0].split())
    arg_docs: dict[str, str] = {}
    if match:
        for line in doc[match.end() :].splitlines():
            if line.strip() and not line.startswith((" ", "\t")):
                break  # the next section
            arg = _ARG_LINE.match(line)
            if arg:
                arg_docs[arg.group(1)] = arg.group(2).strip()
    return summary, arg_docs


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles: they cost tokens and tell the model nothing."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _short_validation_message(tool_name: str, exc: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors()[:5]
    ]
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)
