"""RunCheckpoint's JSON form: every state the engine makes round-trips exactly, and
anything else read back from a database is a CheckpointError, never another exception."""

from __future__ import annotations

import json
import string
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.engine import (
    Artifact,
    CheckpointError,
    ImagePart,
    Message,
    RunCheckpoint,
    Step,
    ToolCall,
    Usage,
)

# Any text, unicode included (no lone surrogates: they are not text a model sends).
texts = st.text(max_size=30)
ids = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=12)
names = st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=10)
counts = st.integers(min_value=0, max_value=10**6)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(texts, json_values, max_size=3)
optional_texts = st.none() | texts


@st.composite
def tool_calls(draw: st.DrawFn, call_id: str) -> ToolCall:
    name = draw(names)
    if draw(st.booleans()):
        args = draw(arguments)
        return ToolCall(call_id, name, args, json.dumps(args, ensure_ascii=False))
    # Argument text that did not parse: the call keeps it, with why.
    return ToolCall(call_id, name, {}, draw(texts), draw(texts))


@st.composite
def turn_calls(draw: st.DrawFn) -> tuple[ToolCall, ...]:
    call_ids = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    return tuple(draw(tool_calls(call_id)) for call_id in call_ids)


images = st.builds(
    ImagePart,
    st.text(min_size=1, max_size=40),
    st.sampled_from(["auto", "low", "high"]),
    texts,
)


def observation(call: ToolCall, text: str, native: bool) -> Message:
    if native:
        return Message.tool(call, text)
    return Message(
        "user", f"Observation from {call.name}:\n{text}", name=call.name, kind="observation"
    )


@st.composite
def turns(draw: st.DrawFn, native: bool) -> list[Message]:
    """One turn of a run, as the loop writes it."""
    choice = draw(st.sampled_from(["tools", "nudge", "interrupt", "summary", "answer"]))
    if choice == "tools":
        reasoning = draw(optional_texts)
        if native:
            calls = draw(turn_calls())
            head = Message.assistant(draw(texts), calls, reasoning_content=reasoning)
        else:
            calls = (draw(tool_calls("call_1")),)
            head = Message.assistant(draw(texts), reasoning_content=reasoning)
        return [head, *(observation(call, draw(texts), native) for call in calls)]
    if choice == "nudge":
        kind = draw(st.sampled_from(["reformat", "reflection", "cycle_warning", "checklist"]))
        return [Message.user(draw(texts), kind=kind)]
    if choice == "interrupt":
        return [Message.user(draw(texts), pinned=True, kind="interrupt")]
    if choice == "summary":
        return [Message.user(draw(texts), kind="summary")]
    return [Message.assistant(draw(texts), reasoning_content=draw(optional_texts))]


history_messages = st.one_of(
    st.builds(lambda t: Message.user(t, kind="history"), texts),
    st.builds(lambda t: Message.assistant(t, kind="history"), texts),
    st.builds(lambda t: Message.user(t, kind="attachment"), texts),
    # As a caller's OpenAI-style dict becomes one: no kind, a name.
    st.builds(lambda t, n: Message("user", t, name=n), texts, optional_texts),
)

steps_status = st.sampled_from(["ok", "error", "blocked", "cancelled"])
artifacts = st.builds(Artifact, texts, texts, texts)


@st.composite
def steps(draw: st.DrawFn, call: ToolCall | None = None) -> Step:
    return Step(
        index=draw(counts),
        iteration=draw(counts),
        call_id=call.id if call is not None else draw(ids),
        tool=call.name if call is not None else draw(names),
        arguments=draw(arguments),
        observation=draw(texts),
        status=draw(steps_status),
        duration=draw(st.floats(min_value=0, max_value=1e6)),
        error=draw(optional_texts),
        artifacts=tuple(draw(st.lists(artifacts, max_size=2))),
        plan_step=draw(st.none() | ids),
    )


@st.composite
def checkpoints(draw: st.DrawFn) -> RunCheckpoint:
    """A run waiting on the calls of its last assistant turn, as the loop snapshots it."""
    native = draw(st.booleans())
    query = draw(texts)
    transcript = [Message.system(draw(texts)), *draw(st.lists(history_messages, max_size=3))]
    transcript.append(
        Message.user(
            query, pinned=True, kind="query", images=tuple(draw(st.lists(images, max_size=2)))
        )
    )
    for turn in draw(st.lists(turns(native), max_size=4)):
        transcript.extend(turn)
    reasoning = draw(optional_texts)
    if native:
        pending = draw(turn_calls())
        transcript.append(Message.assistant(draw(texts), pending, reasoning_content=reasoning))
    else:
        pending = (draw(tool_calls("call_7")),)
        transcript.append(Message.assistant(draw(texts), reasoning_content=reasoning))
    # The context: the transcript's own messages, compacted (a summary in place of a
    # middle stretch) or with a message cut to fit (a new message) or not at all.
    context: list[Message] = list(transcript)
    how = draw(st.sampled_from(["whole", "compacted", "fitted"]))
    if how == "compacted" and len(transcript) > 3:
        summary = Message.user(f"[Summary of earlier work]\n{draw(texts)}", kind="summary")
        pinned = [message for message in transcript[1:-1] if message.pinned]
        context = [transcript[0], summary, *pinned, transcript[-1]]
    elif how == "fitted":
        context[-2] = replace(context[-2], content=draw(texts) + "\n[... cut]")
    settled_calls = [call for call in pending if draw(st.booleans())]
    settled = tuple(draw(steps(call)) for call in settled_calls)
    return RunCheckpoint(
        run_id=draw(ids),
        query=query,
        mode="native" if native else "json",
        streams=draw(st.booleans()) and native,
        context=tuple(context),
        transcript=tuple(transcript),
        steps=tuple(draw(st.lists(steps(), max_size=3))),
        usage=Usage(draw(counts), draw(counts), draw(counts)),
        iterations=draw(counts),
        compactions=draw(counts),
        real_tool_calls=draw(counts),
        reflections=draw(counts),
        checklist_done=draw(st.booleans()),
        reformat_streak=draw(counts),
        empty_streak=draw(counts),
        cycle_counts=draw(st.dictionaries(st.tuples(names, texts), counts, max_size=3)),
        last_cycle_counts=draw(st.dictionaries(ids, counts, max_size=3)),
        pending_calls=pending,
        settled=settled,
        reason=draw(optional_texts),
        tools=tuple(draw(st.lists(names, unique=True, max_size=4))),
    )


def through_json(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


JSON_TYPES = (str, int, float, bool, type(None), list, dict)


def only_json(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and only_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(only_json(v) for v in value)
    return isinstance(value, JSON_TYPES)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(checkpoints())
def test_every_state_round_trips_through_json_exactly(checkpoint: RunCheckpoint) -> None:
    data = checkpoint.to_json()
    assert only_json(data)
    back = RunCheckpoint.from_json(through_json(data))
    assert back == checkpoint
    # Every message field, the calls' and the images' too (== on Message compares them).
    for ours, theirs in zip(back.transcript, checkpoint.transcript, strict=True):
        assert (ours.role, ours.kind, ours.pinned, ours.images) == (
            theirs.role,
            theirs.kind,
            theirs.pinned,
            theirs.images,
        )
    # Read back, it writes the same JSON: the context still refers to the transcript.
    assert back.to_json() == data


def test_the_context_stores_the_transcripts_messages_once() -> None:
    system, query = Message.system("s"), Message.user("q", pinned=True, kind="query")
    call = ToolCall("c1", "echo", {"x": 1}, '{"x": 1}')
    turn = Message.assistant("", (call,))
    summary = Message.user("[Summary of earlier work]\nsome", kind="summary")
    checkpoint = waiting(transcript=(system, query, turn), context=(system, summary, turn))
    data = checkpoint.to_json()
    assert data["context"] == [
        0,
        {"role": "user", "content": summary.content, "kind": "summary"},
        2,
    ]
    assert RunCheckpoint.from_json(through_json(data)) == checkpoint


def waiting(**changes: Any) -> RunCheckpoint:
    call = ToolCall("c1", "echo", {"x": 1}, '{"x": 1}')
    transcript = (Message.system("s"), Message.user("q", pinned=True, kind="query"))
    transcript += (Message.assistant("", (call,)),)
    fields: dict[str, Any] = dict(
        run_id="r",
        query="q",
        mode="native",
        streams=False,
        context=transcript,
        transcript=transcript,
        steps=(),
        usage=Usage(),
        iterations=1,
        compactions=0,
        real_tool_calls=0,
        reflections=0,
        checklist_done=False,
        reformat_streak=0,
        empty_streak=0,
        cycle_counts={("echo", '{"x": 1}'): 1},
        last_cycle_counts={"c1": 1},
        pending_calls=(call,),
        settled=(),
        reason=None,
        tools=("echo",),
    )
    fields.update(changes)
    return RunCheckpoint(**fields)


# -- untrusted input ---------------------------------------------------------------------


def valid() -> dict[str, Any]:
    return through_json(waiting().to_json())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.update(version=2), "version: 2 is not supported"),
        (lambda d: d.pop("version"), "missing version"),
        (lambda d: d.pop("steps"), "missing steps"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d.update(mode="xml"), "checkpoint.mode"),
        (lambda d: d["transcript"][1].update(role="robot"), "transcript[1].role"),
        (lambda d: d["transcript"][1].update(kind="poem"), "transcript[1].kind: unknown kind"),
        (lambda d: d["transcript"][1].update(pinned="yes"), "transcript[1].pinned"),
        (lambda d: d["transcript"][1].update(images=[{"url": 1}]), "images[0].url"),
        (lambda d: d["transcript"][1].update(images=[{"url": "u", "detail": "x"}]), "detail"),
        (lambda d: d.update(iterations=True), "checkpoint.iterations"),
        (lambda d: d.update(iterations=-1), "checkpoint.iterations"),
        (lambda d: d.update(context=[0, 7]), "context[1]: 7 names no message"),
        (lambda d: d["pending_calls"][0].update(arguments=[1]), "pending_calls[0].arguments"),
        (
            lambda d: inserted(d, 2, tool_message("c9")),
            "a tool message answering no call",
        ),
        (lambda d: inserted(d, 3, tool_message("c1")), "must end with the assistant turn"),
        (lambda d: d.update(pending_calls=[]), "at least one call"),
        (lambda d: d.update(settled=[settled_step("c2")]), "not one of the pending calls"),
        (lambda d: d.update(settled=[settled_step("c1")] * 2), "settled twice"),
        (lambda d: d.update(cycle_counts=[["echo", 1]]), "cycle_counts[0]"),
        (lambda d: d.update(tools=["echo", "echo"]), "named twice"),
        (lambda d: d.update(usage={"prompt_tokens": 1}), "usage: missing"),
    ],
)
def test_malformed_data_says_what_and_where(change: Any, says: str) -> None:
    data = valid()
    change(data)
    with pytest.raises(CheckpointError) as raised:
        RunCheckpoint.from_json(data)
    assert says in str(raised.value)


def inserted(data: dict[str, Any], index: int, message: dict[str, Any]) -> None:
    """``message`` put into the transcript, the context being all of it."""
    data["transcript"].insert(index, message)
    data["context"] = list(range(len(data["transcript"])))


def tool_message(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "content": "x", "tool_call_id": call_id, "kind": "observation"}


def settled_step(call_id: str) -> dict[str, Any]:
    step = Step(0, 1, "c1", "echo", {"x": 1}, "echo 1", "ok", 0.1)
    written = through_json(waiting(settled=(step,)).to_json())["settled"][0]
    return {**written, "call_id": call_id}


def test_a_settled_step_round_trips_and_is_put_in_call_order() -> None:
    calls = (ToolCall("a", "echo", {"x": 1}, ""), ToolCall("b", "echo", {"x": 2}, ""))
    transcript = (Message.system("s"), Message.assistant("", calls))
    first = Step(
        0, 1, "a", "echo", {"x": 1}, "echo 1", "ok", 0.5, artifacts=(Artifact("r.md", "# r"),)
    )
    second = Step(1, 1, "b", "echo", {"x": 2}, "echo 2", "error", 0.25, error="boom")
    checkpoint = waiting(
        transcript=transcript, context=transcript, pending_calls=calls, settled=(first, second)
    )
    data = through_json(checkpoint.to_json())
    data["settled"].reverse()
    assert RunCheckpoint.from_json(data) == checkpoint


json_garbage = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_garbage)
def test_garbage_is_a_checkpoint_error(data: Any) -> None:
    with pytest.raises(CheckpointError):
        RunCheckpoint.from_json(data)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, as a path of keys and indices."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(paths(item, (*prefix, index)))
    return found


def mutate(data: Any, path: tuple[Any, ...], how: str, garbage: Any) -> Any:
    if not path:
        return garbage
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "delete":
        del parent[last]
    elif how == "insert" and isinstance(parent, list):
        parent.insert(last, garbage)
    elif how == "rename" and isinstance(parent, dict):
        parent[f"{last}_"] = parent.pop(last)
    else:
        parent[last] = garbage
    return data


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(checkpoints(), st.data())
def test_a_mutated_checkpoint_reads_back_or_is_a_checkpoint_error(
    checkpoint: RunCheckpoint, data: st.DataObject
) -> None:
    document = through_json(checkpoint.to_json())
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths(document)))
        how = data.draw(st.sampled_from(["replace", "delete", "insert", "rename"]))
        document = mutate(document, path, how, data.draw(json_garbage))
    try:
        result = RunCheckpoint.from_json(document)
    except CheckpointError:
        return
    assert isinstance(result, RunCheckpoint)
    # What reads back is a checkpoint the engine can write again.
    assert RunCheckpoint.from_json(through_json(result.to_json())) == result


def test_a_non_json_python_value_is_an_error_not_a_crash() -> None:
    data = valid()
    data["pending_calls"][0]["arguments"] = {"when": object()}
    with pytest.raises(CheckpointError, match="object is not a JSON value"):
        RunCheckpoint.from_json(data)
    data = valid()
    data["pending_calls"][0]["arguments"] = {"x": float("nan")}
    with pytest.raises(CheckpointError, match="not a JSON number"):
        RunCheckpoint.from_json(data)


def test_deep_arguments_are_an_error_both_ways() -> None:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    data = valid()
    data["pending_calls"][0]["arguments"] = {"x": deep}
    with pytest.raises(CheckpointError, match="nested deeper"):
        RunCheckpoint.from_json(data)
    call = ToolCall("c1", "echo", {"x": deep}, "")
    with pytest.raises(CheckpointError, match="nest deeper"):
        waiting(pending_calls=(call,)).to_json()


def test_arguments_a_hook_made_of_python_values_are_stored_as_json_holds_them() -> None:
    step = Step(0, 1, "c1", "echo", {"xs": (1, 2), "n": float("inf"), 3: "three"}, "o", "ok", 0.0)
    data = waiting(settled=(step,)).to_json()
    assert data["settled"][0]["arguments"] == {"xs": [1, 2], "n": "inf", "3": "three"}
    json.dumps(data, allow_nan=False)
