"""How MCP tools are named as engine tools, and which names clash.

An engine name is derived from the server's tool name alone, never from the order the
server lists its tools in, so a name always means the same server tool. A clash (two
tools with one engine name, within a server or across servers, or a built-in
connector's tool name) is refused, never settled by renaming one of the tools: the
tool that would lose the name could be the one the operator classified.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

TOOL_NAME_MAX = 64  # the engine's limit (^[A-Za-z0-9_-]{1,64}$)
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def engine_tool_name(prefix: str, remote: str) -> str:
    """The engine name of the server tool ``remote``: ``<prefix>_<remote>`` (``remote``
    alone with an empty prefix), each character outside ``[A-Za-z0-9_-]`` made ``_``; a
    name past 64 characters is cut and ends in a hash of the whole.

    It depends on these two names only, never on the server's other tools or their
    order, so a name always means the same server tool. Different tools may come out
    the same (``docs.search``, ``docs_search``): ``plan_names`` refuses that.
    """
    raw = f"{prefix}_{remote}" if prefix else remote
    name = _UNSAFE_NAME_CHARS.sub("_", raw) or "_"
    if len(name) <= TOOL_NAME_MAX:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return f"{name[: TOOL_NAME_MAX - len(digest) - 1]}_{digest}"


def plan_names(
    listings: Mapping[str, tuple[str, Sequence[str]]], reserved: Mapping[str, str]
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The engine names of the servers' tools, and why a server cannot start.

    ``listings`` maps a server to its tool prefix and the tool names it offers;
    ``reserved`` maps the built-in connectors' tool names to their connector. Returns,
    for each server that may start, server tool name -> engine name; and for each server
    involved in a clash (two tools with one engine name, or a built-in's name), a reason
    naming both tools and the fix. Every server in a clash fails, so neither the order of
    the tools nor that of the servers decides which tool a name means.
    """
    claims: dict[str, list[tuple[str, str]]] = {}
    for server, (prefix, tools) in listings.items():
        for remote in tools:
            claims.setdefault(engine_tool_name(prefix, remote), []).append((server, remote))
    problems: dict[str, set[str]] = {}
    for engine, owners in claims.items():
        if len(owners) > 1 or engine in reserved:
            message = _clash(engine, sorted(owners), reserved.get(engine))
            for server, _ in owners:
                problems.setdefault(server, set()).add(message)
    failures = {
        server: "tool name collision: " + "; ".join(sorted(messages))
        for server, messages in problems.items()
    }
    names = {
        server: {remote: engine_tool_name(prefix, remote) for remote in tools}
        for server, (prefix, tools) in listings.items()
        if server not in failures
    }
    return names, failures


def _clash(engine: str, owners: list[tuple[str, str]], builtin: str | None) -> str:
    tools = " and ".join(f"{server}'s tool {remote!r}" for server, remote in owners)
    servers = sorted({server for server, _ in owners})
    if builtin is not None:
        return (
            f"{tools} would be the engine tool {engine}, the name of a built-in {builtin}"
            f" connector tool; set another tool_prefix on {', '.join(servers)}"
        )
    if len(servers) > 1:
        return (
            f"{tools} both become the engine tool {engine}; give one of these servers"
            " another tool_prefix"
        )
    remotes = sorted({remote for _, remote in owners})
    if len(remotes) == 1:
        return (
            f"server {servers[0]} lists the tool {remotes[0]!r} more than once;"
            f" exclude = {json.dumps(remotes)} leaves it out"
        )
    return (
        f"{tools} all become the engine tool {engine}; leave all but one out with"
        f" exclude on server {servers[0]}, e.g. exclude = {json.dumps(remotes[:1])}"
    )


@functools.cache
def builtin_tool_names() -> Mapping[str, str]:
    """The built-in connectors' tool names (name -> connector), which no MCP tool may take:
    approval rules and habits written for the built-in tool would apply to it.

    Read from the connectors' source (their ``@action`` methods), not by importing them:
    the Feishu and SQL connectors take seconds and over 100 MB to import, for a name.
    """
    from .hub import BUILTIN  # the hub loads this module lazily

    names: dict[str, str] = {}
    for connector, target in BUILTIN.items():
        if connector != "mcp":  # MCP tools are what is being named
            for name in _declared_actions(target.partition(":")[0]):
                names[name] = connector
    return names


def _declared_actions(module: str) -> list[str]:
    """The tool names of the ``@action(...)`` methods defined in ``module``'s source.

    For a package, in every module of it: a connector may be mixed in from several.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return []
    sources = [Path(spec.origin)]
    if spec.submodule_search_locations:
        locations = spec.submodule_search_locations
        sources = sorted(path for place in locations for path in Path(place).rglob("*.py"))
    names: list[str] = []
    for source in sources:
        names += _actions_in(ast.parse(source.read_text(encoding="utf-8")))
    return names


def _actions_in(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _callee(decorator.func) == "action":
                explicit = [
                    keyword.value.value
                    for keyword in decorator.keywords
                    if keyword.arg == "name"
                    and isinstance(keyword.value, ast.Constant)
                    and isinstance(keyword.value.value, str)
                ]
                names.append(explicit[0] if explicit else node.name)
    return names


def _callee(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


__all__ = ["TOOL_NAME_MAX", "builtin_tool_names", "engine_tool_name", "plan_names"]
