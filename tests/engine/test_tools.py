"""Tools, the registry's views of them, and tools built from typed Python functions."""

from __future__ import annotations

import asyncio
import json
import threading
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from bot.engine import Tool, ToolRegistry, tool, tool_from_function
from bot.engine.tools import CATALOGUE_LINE_CHARS, ToolArgumentsError

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "limit": {"type": "integer", "default": 5},
    },
    "required": ["query"],
    "additionalProperties": False,
}


async def _noop(**arguments: Any) -> str:
    return "ok"


def make(
    name: str,
    description: str = "Does a thing.",
    *,
    parameters: dict[str, Any] | None = None,
    side_effect: Any = "read",
) -> Tool:
    return Tool(
        name=name,
        description=description,
        parameters=parameters if parameters is not None else SEARCH_SCHEMA,
        handler=_noop,
        side_effect=side_effect,
    )


# -- Tool construction -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "has space", "dot.name", "slash/name", "semi;colon"])
def test_bad_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        make(name)


@pytest.mark.parametrize("name", ["search", "search_docs", "get-user", "v2_lookup", "A1"])
def test_good_tool_names_are_accepted(name: str) -> None:
    assert make(name).name == name


@pytest.mark.parametrize("name", ["工具", "x²", "a" * 65], ids=["cjk", "superscript", "too-long"])
def test_names_the_openai_api_would_reject_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        make(name)


@pytest.mark.parametrize("side_effect", ["delete", "READ", "", None])
def test_bad_side_effect_is_rejected(side_effect: Any) -> None:
    with pytest.raises(ValueError, match="side_effect"):
        make("t", side_effect=side_effect)


def test_side_effect_defaults_to_write() -> None:
    t = Tool(name="t", description="d", parameters=SEARCH_SCHEMA, handler=_noop)
    assert t.side_effect == "write"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nonsense"},
        {"type": "object", "required": "query"},
        {"type": "object", "properties": {"a": 5}},
        {"type": "integer", "minimum": "zero"},
        {"$ref": "#/definitions/missing"},
    ],
    ids=["unknown-type", "required-not-array", "property-not-object", "bad-minimum", "bad-ref"],
)
def test_invalid_schema_is_rejected_with_value_error(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="invalid parameters schema"):
        make("t", parameters=schema)


@pytest.mark.parametrize(
    "schema",
    [{"type": "object", "properties": 3}, {"type": "array", "items": 3}, {"pattern": "("}],
    ids=["properties-int", "items-int", "bad-regex"],
)
def test_every_malformed_schema_is_a_value_error(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="schema"):
        make("t", parameters=schema)


# -- validate_arguments ------------------------------------------------------------------


def test_validate_arguments_accepts_valid_arguments() -> None:
    t = make("search")
    assert t.validate_arguments({"query": "cats", "limit": 2}) == {"query": "cats", "limit": 2}


def test_validate_arguments_fills_defaults() -> None:
    t = make("search")
    assert t.validate_arguments({"query": "cats"}) == {"query": "cats", "limit": 5}


def test_validate_arguments_does_not_mutate_its_input() -> None:
    t = make("search")
    given = {"query": "cats"}
    t.validate_arguments(given)
    assert given == {"query": "cats"}


def test_wrong_type_raises_tool_arguments_error_naming_tool_and_field() -> None:
    t = make("search")
    with pytest.raises(ToolArgumentsError) as info:
        t.validate_arguments({"query": 42})
    message = str(info.value)
    assert "search" in message
    assert "query" in message
    assert "string" in message


def test_missing_required_raises_tool_arguments_error_naming_the_field() -> None:
    t = make("search")
    with pytest.raises(ToolArgumentsError) as info:
        t.validate_arguments({"limit": 3})
    assert "search" in str(info.value)
    assert "query" in str(info.value)


def test_unexpected_argument_rejected_when_schema_forbids_it() -> None:
    t = make("search")
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({"query": "x", "colour": "red"})


def test_tool_arguments_error_is_a_value_error() -> None:
    assert issubclass(ToolArgumentsError, ValueError)


# -- ToolRegistry ------------------------------------------------------------------------


def registry_of(*names: str, side_effects: dict[str, str] | None = None) -> ToolRegistry:
    side_effects = side_effects or {}
    return ToolRegistry(
        make(n, f"The {n} tool.", side_effect=side_effects.get(n, "read")) for n in names
    )


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        ToolRegistry([make("a"), make("b"), make("a")])


def test_get_in_len_and_names() -> None:
    a, b = make("a"), make("b")
    reg = ToolRegistry([a, b])
    assert reg.get("a") is a
    assert reg.get("b") is b
    assert reg.get("zzz") is None
    assert "a" in reg
    assert "zzz" not in reg
    assert len(reg) == 2
    assert reg.names() == ["a", "b"]


def test_empty_registry() -> None:
    reg = ToolRegistry()
    assert len(reg) == 0
    assert list(reg) == []
    assert reg.openai_schema() == []
    assert reg.catalogue() == ""


def test_iteration_keeps_insertion_order() -> None:
    names = ["zeta", "alpha", "mid", "beta"]
    reg = registry_of(*names)
    assert [t.name for t in reg] == names


def test_filter_keeps_registry_order_and_ignores_unknown_names() -> None:
    reg = registry_of("a", "b", "c", "d")
    picked = reg.filter(["d", "nope", "b", "a", "b"])
    assert isinstance(picked, ToolRegistry)
    assert picked.names() == ["a", "b", "d"]
    assert picked.get("a") is reg.get("a")
    assert reg.names() == ["a", "b", "c", "d"]  # the original is untouched


def test_filter_with_no_known_names_is_empty() -> None:
    assert len(registry_of("a", "b").filter(["x", "y"])) == 0


def test_by_side_effect() -> None:
    reg = registry_of("r1", "w1", "r2", "w2", side_effects={"w1": "write", "w2": "write"})
    assert reg.by_side_effect("read").names() == ["r1", "r2"]
    assert reg.by_side_effect("write").names() == ["w1", "w2"]


def test_openai_schema_exact_shape() -> None:
    other = {"type": "object", "properties": {}}
    reg = ToolRegistry([make("search", "Search docs."), make("ping", "Ping it.", parameters=other)])
    assert reg.openai_schema() == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search docs.",
                "parameters": SEARCH_SCHEMA,
            },
        },
        {
            "type": "function",
            "function": {"name": "ping", "description": "Ping it.", "parameters": other},
        },
    ]
    json.dumps(reg.openai_schema())  # wire-ready


def test_json_mode_prompt_has_names_descriptions_and_schemas() -> None:
    reg = ToolRegistry([make("search", "Search the docs."), make("fetch", "Fetch a page.")])
    prompt = reg.json_mode_prompt()
    for t in reg:
        assert t.name in prompt
        assert t.description in prompt
    assert prompt.index("search") < prompt.index("fetch")
    # The argument schema itself is in the prompt, as JSON.
    compact_schema = json.dumps(SEARCH_SCHEMA, ensure_ascii=False, separators=(",", ":"))
    assert compact_schema in prompt
    assert "What to look for" in prompt


def test_catalogue_has_one_line_per_tool_and_no_schema() -> None:
    reg = ToolRegistry(
        [
            make("search", "Search the docs.\nSecond line with details."),
            make("fetch", "Fetch a page."),
            make("ping", "Ping a host."),
        ]
    )
    lines = reg.catalogue().splitlines()
    assert len(lines) == 3
    for line, t in zip(lines, reg, strict=True):
        assert t.name in line
        assert line.startswith("- ")
    assert "Search the docs." in lines[0]
    catalogue = reg.catalogue()
    assert "Second line" not in catalogue
    assert "properties" not in catalogue
    assert "What to look for" not in catalogue
    assert "{" not in catalogue


def test_catalogue_lines_stay_short_even_for_a_very_long_description() -> None:
    long_description = "Looks things up across every system we have, " * 40
    reg = ToolRegistry([make("search_everything_everywhere", long_description), make("b")])
    lines = reg.catalogue().splitlines()
    assert len(lines) == 2
    assert all(len(line) <= CATALOGUE_LINE_CHARS for line in lines)
    assert CATALOGUE_LINE_CHARS <= 80
    assert "search_everything_everywhere" in lines[0]
    assert lines[0].startswith("- search_everything_everywhere: Looks things up")


def test_catalogue_with_cjk_description_stays_one_short_line() -> None:
    reg = ToolRegistry([make("cal", "查询飞书日历中的会议安排和参会人信息" * 10)])
    (line,) = reg.catalogue().splitlines()
    assert len(line) <= CATALOGUE_LINE_CHARS
    assert line.startswith("- cal: 查询")


# -- tool_from_function / @tool ----------------------------------------------------------


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    city: str
    postcode: str | None = None


def create_ticket(
    title: str,
    body: Annotated[str, Field(description="Markdown body of the ticket")],
    assignee: str,
    priority: Priority = Priority.LOW,
    kind: Literal["bug", "task"] = "task",
    count: int = 1,
    address: Address | None = None,
) -> dict[str, Any]:
    """Create a ticket in the tracker.

    The tracker is shared by every team, so keep titles short.

    Args:
        title: A one-line title.
        assignee (str): Login of the person who owns it.
        count: How many copies.
    """
    return {
        "title": title,
        "body": body,
        "assignee": assignee,
        "priority": priority,
        "kind": kind,
        "count": count,
        "address": address,
    }


def test_schema_required_vs_defaulted() -> None:
    t = tool_from_function(create_ticket)
    params = t.parameters
    assert params["type"] == "object"
    assert sorted(params["required"]) == ["assignee", "body", "title"]
    assert list(params["properties"]) == [
        "title",
        "body",
        "assignee",
        "priority",
        "kind",
        "count",
        "address",
    ]
    assert params["properties"]["title"]["type"] == "string"
    assert params["properties"]["count"] == {
        "type": "integer",
        "default": 1,
        "description": "How many copies.",
    }


def test_schema_descriptions_from_annotated_field_and_docstring_args() -> None:
    props = tool_from_function(create_ticket).parameters["properties"]
    assert props["body"]["description"] == "Markdown body of the ticket"
    assert props["title"]["description"] == "A one-line title."
    # "(str)" type notes in the docstring are not part of the description.
    assert props["assignee"]["description"] == "Login of the person who owns it."
    assert "description" not in props["kind"]


def test_schema_literal_and_enum() -> None:
    t = tool_from_function(create_ticket)
    props = t.parameters["properties"]
    assert props["kind"]["enum"] == ["bug", "task"]
    assert props["kind"]["default"] == "task"
    # The Enum is described somewhere in the schema with its values.
    assert '"enum": ["low", "high"]' in json.dumps(t.parameters)
    t.validate_arguments({"title": "t", "body": "b", "assignee": "a", "kind": "bug"})
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({"title": "t", "body": "b", "assignee": "a", "kind": "epic"})
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({"title": "t", "body": "b", "assignee": "a", "priority": "urgent"})


def test_schema_nested_model_validates_through_the_tool() -> None:
    t = tool_from_function(create_ticket)
    base = {"title": "t", "body": "b", "assignee": "a"}
    ok = t.validate_arguments({**base, "address": {"city": "Hangzhou"}})
    assert ok["address"]["city"] == "Hangzhou"
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({**base, "address": {"city": 5}})
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({**base, "address": {"postcode": "310000"}})


def test_no_pydantic_title_noise_at_top_level_or_in_properties() -> None:
    params = tool_from_function(create_ticket).parameters
    assert "title" not in params
    for name, prop in params["properties"].items():
        assert "title" not in prop, name
    # A property that is literally called "title" is still there.
    assert "title" in params["properties"]


def test_extra_arguments_are_forbidden() -> None:
    t = tool_from_function(create_ticket)
    with pytest.raises(ToolArgumentsError):
        t.validate_arguments({"title": "t", "body": "b", "assignee": "a", "colour": "red"})


def test_summary_comes_from_the_first_docstring_paragraph() -> None:
    t = tool_from_function(create_ticket)
    assert t.description == "Create a ticket in the tracker."
    assert t.name == "create_ticket"
    assert t.side_effect == "write"


def test_multi_line_summary_is_joined_into_one_line() -> None:
    def lookup(key: str) -> str:
        """Look up a key
        in the shared store.

        Args:
            key: The key.
        """
        return key

    t = tool_from_function(lookup)
    assert t.description == "Look up a key in the shared store."
    assert t.parameters["properties"]["key"]["description"] == "The key."


def test_explicit_name_description_side_effect_and_timeout() -> None:
    t = tool_from_function(
        create_ticket, name="new_ticket", description="Custom.", side_effect="read", timeout=3.5
    )
    assert (t.name, t.description, t.side_effect, t.timeout) == (
        "new_ticket",
        "Custom.",
        "read",
        3.5,
    )


def test_function_without_docstring_uses_its_name_as_description() -> None:
    def ping(host: str) -> str:
        return host

    t = tool_from_function(ping)
    assert t.description == "ping"
    assert t.parameters["required"] == ["host"]


def test_function_without_parameters_has_an_empty_object_schema() -> None:
    def now() -> str:
        """The time."""
        return "noon"

    t = tool_from_function(now)
    assert t.parameters["type"] == "object"
    assert t.parameters["properties"] == {}
    assert t.validate_arguments({}) == {}


def test_tool_decorator_builds_a_tool() -> None:
    @tool(name="add_numbers", side_effect="read", timeout=2.0)
    async def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    assert isinstance(add, Tool)
    assert add.name == "add_numbers"
    assert add.side_effect == "read"
    assert add.timeout == 2.0
    assert add.description == "Add two numbers."
    assert add.parameters["required"] == ["a"]


def test_tool_decorator_defaults() -> None:
    @tool()
    async def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    assert shout.name == "shout"
    assert shout.side_effect == "write"
    assert shout.timeout is None


async def test_handler_calls_an_async_function_with_converted_values() -> None:
    t = tool_from_function(create_ticket)
    out = await t.handler(
        title="T",
        body="B",
        assignee="amy",
        priority="high",
        address={"city": "Beijing"},
    )
    assert out["priority"] is Priority.HIGH
    assert isinstance(out["address"], Address)
    assert out["address"].city == "Beijing"
    assert out["count"] == 1
    assert out["kind"] == "task"


async def test_handler_coerces_lax_values() -> None:
    @tool()
    async def repeat(text: str, times: int) -> str:
        """Repeat text."""
        return text * times

    assert await repeat.handler(text="ab", times="3") == "ababab"


async def test_handler_wrong_type_raises_tool_arguments_error() -> None:
    calls: list[Any] = []

    @tool()
    async def repeat(text: str, times: int) -> str:
        """Repeat text."""
        calls.append(times)
        return text * times

    with pytest.raises(ToolArgumentsError) as info:
        await repeat.handler(text="ab", times="many")
    assert "repeat" in str(info.value)
    assert "times" in str(info.value)
    with pytest.raises(ToolArgumentsError, match="text"):
        await repeat.handler(times=2)
    assert calls == []  # the function never ran


async def test_sync_function_runs_in_a_worker_thread() -> None:
    seen: list[int] = []

    def blocking(x: int) -> int:
        """Block a little."""
        seen.append(threading.get_ident())
        return x * 2

    t = tool_from_function(blocking)
    loop_thread = threading.get_ident()
    assert await t.handler(x=21) == 42
    assert len(seen) == 1
    assert seen[0] != loop_thread


async def test_async_function_runs_on_the_event_loop() -> None:
    seen: list[int] = []

    async def quick(x: int) -> int:
        """Quick."""
        seen.append(threading.get_ident())
        await asyncio.sleep(0)
        return x

    t = tool_from_function(quick)
    assert await t.handler(x=1) == 1
    assert seen == [threading.get_ident()]


def test_var_positional_is_rejected() -> None:
    def many(*items: str) -> str:
        return ",".join(items)

    with pytest.raises((TypeError, ValueError), match="args"):
        tool_from_function(many)


def test_var_keyword_is_rejected() -> None:
    def anything(**options: str) -> str:
        return str(options)

    with pytest.raises((TypeError, ValueError), match="kwargs"):
        tool_from_function(anything)
