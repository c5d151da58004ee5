"""Plan validation: what is repaired, what is rejected, and that nothing else escapes."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import Plan, PlanError, validate_plan
from bot.engine.dag.plan import find_cycle


def steps(*items: dict[str, Any]) -> dict[str, Any]:
    return {"steps": list(items)}


def step(id: Any, deps: Any = (), **extra: Any) -> dict[str, Any]:
    return {"id": id, "task": f"task {id}", "dependencies": list(deps), **extra}


def test_a_valid_plan_keeps_its_steps_in_order():
    plan = validate_plan(steps(step("a"), step("b"), step("c", ["a", "b"])))
    assert plan.ids() == ("a", "b", "c")
    assert plan.get("c") is not None and plan.get("c").dependencies == ("a", "b")
    assert [s.id for s in plan.sinks()] == ["c"]


def test_a_cycle_is_rejected():
    with pytest.raises(PlanError, match="cycle"):
        validate_plan(steps(step("a", ["c"]), step("b", ["a"]), step("c", ["b"])))


def test_a_two_step_cycle_is_rejected():
    with pytest.raises(PlanError, match=r"a -> b -> a|b -> a -> b"):
        validate_plan(steps(step("a", ["b"]), step("b", ["a"])))


def test_unknown_dependencies_are_dropped_with_a_warning(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="bot.engine.dag.validation"):
        plan = validate_plan(steps(step("a"), step("b", ["a", "zzz"])))
    assert plan.get("b").dependencies == ("a",)  # type: ignore[union-attr]
    assert "zzz" in caplog.text


def test_a_dependency_on_itself_is_dropped(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="bot.engine.dag.validation"):
        plan = validate_plan(steps(step("a", ["a"])))
    assert plan.get("a").dependencies == ()  # type: ignore[union-attr]
    assert "itself" in caplog.text


def test_duplicate_ids_are_rejected():
    with pytest.raises(PlanError, match="duplicate step ids: a"):
        validate_plan(steps(step("a"), step("a")))


def test_more_steps_than_the_limit_are_rejected():
    with pytest.raises(PlanError, match="at most 3"):
        validate_plan(steps(*(step(str(i)) for i in range(4))), max_steps=3)
    assert len(validate_plan(steps(*(step(str(i)) for i in range(10))))) == 10
    with pytest.raises(PlanError):
        validate_plan(steps(*(step(str(i)) for i in range(11))))  # the default limit is 10


@pytest.mark.parametrize(
    "data",
    [
        None,
        "steps",
        [],
        {},
        {"steps": []},
        {"steps": "a, b"},
        {"steps": [1, 2]},
        {"steps": [{"id": "a"}]},  # no task
        {"steps": [{"id": "a", "task": "  "}]},
        {"steps": [{"task": "no id"}]},
        {"steps": [{"id": True, "task": "a bool is not an id"}]},
        {"steps": [{"id": {"x": 1}, "task": "t"}]},
    ],
)
def test_garbage_is_a_plan_error(data: object):
    with pytest.raises(PlanError):
        validate_plan(data)


def test_numeric_ids_and_dependencies_become_strings():
    plan = validate_plan(steps(step(1), step(2, [1])))
    assert plan.ids() == ("1", "2")
    assert plan.get("2").dependencies == ("1",)  # type: ignore[union-attr]


def test_hints_the_plan_cannot_use_are_forgotten():
    plan = validate_plan(
        steps(
            step("a", tool_hint="lookup", model_hint="fast"),
            step("b", tool_hint="no_such_tool", model_hint="huge"),
        ),
        known_tools={"lookup"},
    )
    a, b = plan.steps
    assert (a.tool_hint, a.model_hint) == ("lookup", "fast")
    assert (b.tool_hint, b.model_hint) == (None, None)


# -- property: only PlanError, and what passes is a DAG over known ids ------------------

ids = st.one_of(st.text(max_size=3), st.integers(-2, 5), st.booleans(), st.none())
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
raw_step = st.one_of(
    st.fixed_dictionaries(
        {
            "id": ids,
            "task": st.one_of(st.text(max_size=8), json_leaf),
            "dependencies": st.one_of(st.lists(ids, max_size=4), json_value),
        },
        optional={
            "tool_hint": st.one_of(st.sampled_from(["lookup", "x"]), json_leaf),
            "model_hint": st.one_of(st.sampled_from(["fast", "reasoning", "slow"]), json_leaf),
        },
    ),
    json_value,
)
# Near-valid plans too, so that the property sees accepted plans and not only errors.
plausible_id = st.one_of(st.sampled_from(["a", "b", "c", "d", "e", "f"]), st.integers(1, 4))
plausible_step = st.fixed_dictionaries(
    {
        "id": plausible_id,
        "task": st.text(min_size=1, max_size=8),
        "dependencies": st.lists(st.one_of(plausible_id, ids), max_size=3),
    },
    optional={"tool_hint": st.sampled_from(["lookup", "x", None])},
)
raw_plan = st.one_of(
    st.fixed_dictionaries({"steps": st.lists(plausible_step, min_size=1, max_size=11)}),
    st.fixed_dictionaries({"steps": st.lists(raw_step, max_size=12)}),
    st.dictionaries(st.text(max_size=5), json_value),
    json_value,
)


@settings(max_examples=150, deadline=None)
@given(raw_plan)
def test_validation_raises_only_plan_errors_and_accepts_only_dags(data: object):
    try:
        plan = validate_plan(data, known_tools={"lookup"})
    except PlanError:
        return
    assert isinstance(plan, Plan)
    assert 1 <= len(plan) <= 10
    known = set(plan.ids())
    assert len(known) == len(plan)
    for s in plan:
        assert s.task.strip()
        assert s.id not in s.dependencies
        assert set(s.dependencies) <= known
        assert s.tool_hint in (None, "lookup")
        assert s.model_hint in (None, "fast", "reasoning")
    assert find_cycle({s.id: s.dependencies for s in plan}) is None
    assert _topological(plan) is not None


def _topological(plan: Plan) -> list[str] | None:
    done: list[str] = []
    remaining = {s.id: set(s.dependencies) for s in plan}
    while remaining:
        ready = [i for i, deps in remaining.items() if deps <= set(done)]
        if not ready:
            return None
        done.extend(ready)
        for i in ready:
            del remaining[i]
    return done


def test_a_long_chain_is_checked_without_recursion():
    chain = steps(step("0"), *(step(str(i), [str(i - 1)]) for i in range(1, 5000)))
    assert len(validate_plan(chain, max_steps=5000)) == 5000
