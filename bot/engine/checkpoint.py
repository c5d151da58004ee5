"""Checkpoints of a ReAct run that waits inside a tool call's pre-hook (issue 34).

A hook that holds a call for a long time (an approval waits for a human) can take
``call.checkpoint()`` (``ToolUse.checkpoint``): a :class:`RunCheckpoint` of the run as it
is at that moment, which ``to_json()`` turns into plain JSON for a database. Another
process reads it back with :meth:`RunCheckpoint.from_json` and goes on with
``ReActAgent.resume(checkpoint)``: the calls of the assistant turn that were waiting run
again through every hook (the approval now decided), the ones that had already finished
are not run again, and the loop continues from there as if it had never stopped.

What a checkpoint holds: everything ``RunLoop`` needs to go on: the question, the mode
and whether calls stream, the working context and the full transcript, the steps so far,
usage, the iteration count and the counters behind the loop rules (reflection, cycle
detection, the completion checklist, reformat and empty-reply retries), the tool calls of
the current assistant turn (``pending_calls``), the steps of those that had finished when
the snapshot was taken (``settled``, in call order), the model's stated reason for the
calls, and the names of the tools the run may use (after selection or the tool menu).

What it does not hold, and why:
- Plan mode: the step agents of ``bot.engine.dag`` give their hooks no checkpoint
  (``ToolUse.checkpoint`` is None): the plan's state (its steps, their results, the
  rounds and verdicts) is not captured yet, and a step alone cannot finish the plan.
- ``answer_streamed``: a checkpoint is taken while tool calls wait, when no reply has
  been taken as the answer, so it is always False there.
- The tool menu: by the time a tool runs, the model has chosen from it; the chosen tools
  are kept by name.
- The interrupt queue (messages waiting to join the run are the caller's, who gives the
  resumed run a queue of its own) and the context guard's calibration (learned again
  from the next call's usage).
- A call that was still running when the snapshot was taken (a parallel call) is not
  settled: the resumed run runs it again. For that reason only pre hooks get
  ``ToolUse.checkpoint`` (a post hook's call has run, but has not finished).

The JSON form is a versioned object (``version`` 1). Messages leave out fields at their
default value. The context is mostly the transcript's own messages (compaction replaces
only old turns), so an entry of ``context`` that is the transcript's message is stored as
its index into ``transcript``: each such message is stored once.

Values in tool-call arguments are the JSON the model sent; a hook may rewrite arguments
into other Python values, which are stored as JSON can hold them (a tuple as a list, a
non-text key or any other value as its ``str()``, a non-finite float as its text). Values
nested deeper than ``MAX_DEPTH`` levels cannot be stored (``CheckpointError``).

``from_json`` treats its input as untrusted (it comes back from a database): anything
malformed (a wrong type, an unknown role, kind or key, a missing key, a tool message
answering no call, a settled step of no pending call, another version) raises
:class:`CheckpointError` saying where, never anything else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

from .events import StepStatus
from .messages import ROLES, ImagePart, Message, MessageKind, ToolCall, Usage
from .result import LoopMode, Step
from .tools import Artifact

CHECKPOINT_VERSION = 1

# How deep argument values may nest (a model's arguments are a few levels deep).
MAX_DEPTH = 100

_KINDS: tuple[str, ...] = get_args(MessageKind)
_STEP_STATUSES: tuple[str, ...] = get_args(StepStatus)
_DETAILS = ("auto", "low", "high")
_MODES = ("native", "json")

T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint's data is not one this engine can resume from; says what and where."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCheckpoint:
    """A ReAct run waiting on the tool calls of its current assistant turn.

    Made by the loop (``ToolUse.checkpoint``), resumed by ``ReActAgent.resume``; see the
    module docstring for what it holds and what it does not.
    """

    version: int = CHECKPOINT_VERSION
    run_id: str
    query: str
    mode: LoopMode
    streams: bool
    context: tuple[Message, ...]
    transcript: tuple[Message, ...]
    steps: tuple[Step, ...]
    usage: Usage
    iterations: int
    compactions: int
    real_tool_calls: int
    reflections: int
    checklist_done: bool
    reformat_streak: int
    empty_streak: int
    # (tool name, canonical arguments) -> how often the run called it so.
    cycle_counts: Mapping[tuple[str, str], int]
    # The current turn's call id -> its count in ``cycle_counts``.
    last_cycle_counts: Mapping[str, int]
    pending_calls: tuple[ToolCall, ...]
    # The steps of the pending calls that had finished, in call order.
    settled: tuple[Step, ...]
    # The model's stated reason for the pending calls.
    reason: str | None
    # The tools the run may use, by name.
    tools: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The checkpoint as JSON values only (str, int, float, bool, None, list, dict)."""
        positions = {id(message): index for index, message in enumerate(self.transcript)}
        context: list[Any] = []
        for message in self.context:
            index = positions.get(id(message))
            context.append(index if index is not None else _message_json(message))
        return {
            "version": self.version,
            "run_id": self.run_id,
            "query": self.query,
            "mode": self.mode,
            "streams": self.streams,
            "transcript": [_message_json(message) for message in self.transcript],
            "context": context,
            "steps": [_step_json(step) for step in self.steps],
            "usage": self.usage.as_dict(),
            "iterations": self.iterations,
            "compactions": self.compactions,
            "real_tool_calls": self.real_tool_calls,
            "reflections": self.reflections,
            "checklist_done": self.checklist_done,
            "reformat_streak": self.reformat_streak,
            "empty_streak": self.empty_streak,
            "cycle_counts": [
                [name, key, count] for (name, key), count in self.cycle_counts.items()
            ],
            "last_cycle_counts": dict(self.last_cycle_counts),
            "pending_calls": [_call_json(call) for call in self.pending_calls],
            "settled": [_step_json(step) for step in self.settled],
            "reason": self.reason,
            "tools": list(self.tools),
        }

    @classmethod
    def from_json(cls, data: object) -> RunCheckpoint:
        """Read back what ``to_json`` wrote; raises :class:`CheckpointError` for anything
        else (the input is untrusted)."""
        if not isinstance(data, dict):
            raise CheckpointError(f"checkpoint: expected an object, got {_show(data)}")
        if "version" not in data:
            raise CheckpointError("checkpoint: missing version")
        version = _int(data["version"], "checkpoint.version")
        if version != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint.version: {version} is not supported (this engine reads "
                f"version {CHECKPOINT_VERSION})"
            )
        root = _object(data, "checkpoint", _CHECKPOINT_KEYS)
        mode = root["mode"]
        if mode == "native" or mode == "json":
            loop_mode: LoopMode = mode
        else:
            raise CheckpointError(f"checkpoint.mode: must be one of {_MODES}; got {_show(mode)}")
        transcript = tuple(_items(root["transcript"], "checkpoint.transcript", _message))
        context = tuple(_context(root["context"], transcript))
        pending = tuple(_items(root["pending_calls"], "checkpoint.pending_calls", _call))
        checkpoint = cls(
            version=version,
            run_id=_str(root["run_id"], "checkpoint.run_id"),
            query=_str(root["query"], "checkpoint.query"),
            mode=loop_mode,
            streams=_bool(root["streams"], "checkpoint.streams"),
            context=context,
            transcript=transcript,
            steps=tuple(_items(root["steps"], "checkpoint.steps", _step)),
            usage=_usage(root["usage"], "checkpoint.usage"),
            iterations=_int(root["iterations"], "checkpoint.iterations"),
            compactions=_int(root["compactions"], "checkpoint.compactions"),
            real_tool_calls=_int(root["real_tool_calls"], "checkpoint.real_tool_calls"),
            reflections=_int(root["reflections"], "checkpoint.reflections"),
            checklist_done=_bool(root["checklist_done"], "checkpoint.checklist_done"),
            reformat_streak=_int(root["reformat_streak"], "checkpoint.reformat_streak"),
            empty_streak=_int(root["empty_streak"], "checkpoint.empty_streak"),
            cycle_counts=_cycle_counts(root["cycle_counts"], "checkpoint.cycle_counts"),
            last_cycle_counts=_counts(root["last_cycle_counts"], "checkpoint.last_cycle_counts"),
            pending_calls=pending,
            settled=_settled(root["settled"], pending),
            reason=_optional_str(root["reason"], "checkpoint.reason"),
            tools=_tool_names(root["tools"], "checkpoint.tools"),
        )
        _check_pending(checkpoint)
        _check_tool_messages(checkpoint.transcript, "checkpoint.transcript")
        _check_tool_messages(checkpoint.context, "checkpoint.context")
        return checkpoint


_CHECKPOINT_KEYS = frozenset(
    (
        "version",
        "run_id",
        "query",
        "mode",
        "streams",
        "transcript",
        "context",
        "steps",
        "usage",
        "iterations",
        "compactions",
        "real_tool_calls",
        "reflections",
        "checklist_done",
        "reformat_streak",
        "empty_streak",
        "cycle_counts",
        "last_cycle_counts",
        "pending_calls",
        "settled",
        "reason",
        "tools",
    )
)

# -- writing -----------------------------------------------------------------------------


def _message_json(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [_call_json(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        data["name"] = message.name
    if message.reasoning_content is not None:
        data["reasoning_content"] = message.reasoning_content
    if message.pinned:
        data["pinned"] = True
    if message.kind is not None:
        data["kind"] = message.kind
    if message.images:
        data["images"] = [
            {"url": image.url, "detail": image.detail, "label": image.label}
            for image in message.images
        ]
    return data


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.name,
        "arguments": _arguments_json(call.arguments),
        "raw_arguments": call.raw_arguments,
        "parse_error": call.parse_error,
    }


def _step_json(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "iteration": step.iteration,
        "call_id": step.call_id,
        "tool": step.tool,
        "arguments": _arguments_json(step.arguments),
        "observation": step.observation,
        "status": step.status,
        "duration": step.duration,
        "error": step.error,
        "artifacts": [
            {"name": artifact.name, "content": artifact.content, "media_type": artifact.media_type}
            for artifact in step.artifacts
        ],
        "plan_step": step.plan_step,
    }


def _arguments_json(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key): _json_safe(value, 1) for key, value in arguments.items()}


def _json_safe(value: Any, depth: int) -> Any:
    """``value`` as JSON can hold it (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise CheckpointError(f"tool-call arguments nest deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(key): _json_safe(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item, depth + 1) for item in value]
    return str(value)


# -- reading -----------------------------------------------------------------------------


def _show(value: object) -> str:
    """A value in an error message: its type, and short values themselves."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"text of {len(value)} characters"
    return type(value).__name__


def _object(
    value: object, where: str, required: frozenset[str], optional: frozenset[str] = frozenset()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected an object, got {_show(value)}")
    keys = set(value)
    if not all(isinstance(key, str) for key in keys):
        raise CheckpointError(f"{where}: keys must be text")
    missing = required - keys
    if missing:
        raise CheckpointError(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = keys - required - optional
    if unknown:
        raise CheckpointError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    return value


def _items(value: object, where: str, read: Callable[[object, str], T]) -> list[T]:
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: expected a list, got {_show(value)}")
    return [read(item, f"{where}[{index}]") for index, item in enumerate(value)]


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: expected text, got {_show(value)}")
    return value


def _optional_str(value: object, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise CheckpointError(f"{where}: expected true or false, got {_show(value)}")
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{where}: expected a whole number >= 0, got {_show(value)}")
    return value


def _float(value: object, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise CheckpointError(f"{where}: expected a number >= 0, got {_show(value)}")
    return float(value)


def _choice(value: object, where: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise CheckpointError(f"{where}: must be one of {', '.join(allowed)}; got {_show(value)}")
    return value


def _json_value(value: object, where: str, depth: int = 1) -> Any:
    """A JSON value, checked all the way down (a copy: nothing aliases the input)."""
    if depth > MAX_DEPTH:
        raise CheckpointError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CheckpointError(f"{where}: {value!r} is not a JSON number")
        return value
    if isinstance(value, list):
        return [_json_value(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CheckpointError(f"{where}: keys must be text")
            copied[key] = _json_value(item, f"{where}.{key}", depth + 1)
        return copied
    raise CheckpointError(f"{where}: {type(value).__name__} is not a JSON value")


def _arguments(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected an object, got {_show(value)}")
    arguments = _json_value(value, where)
    assert isinstance(arguments, dict)
    return arguments


_MESSAGE_REQUIRED = frozenset(("role", "content"))
_MESSAGE_OPTIONAL = frozenset(
    ("tool_calls", "tool_call_id", "name", "reasoning_content", "pinned", "kind", "images")
)


def _message(value: object, where: str) -> Message:
    data = _object(value, where, _MESSAGE_REQUIRED, _MESSAGE_OPTIONAL)
    role = data["role"]
    if role not in ROLES:
        raise CheckpointError(f"{where}.role: must be one of {', '.join(ROLES)}; got {_show(role)}")
    kind = data.get("kind")
    if kind is not None and kind not in _KINDS:
        raise CheckpointError(f"{where}.kind: unknown kind {_show(kind)}")
    return Message(
        role,
        _str(data["content"], f"{where}.content"),
        tool_calls=tuple(_items(data.get("tool_calls", []), f"{where}.tool_calls", _call)),
        tool_call_id=_optional_str(data.get("tool_call_id"), f"{where}.tool_call_id"),
        name=_optional_str(data.get("name"), f"{where}.name"),
        reasoning_content=_optional_str(
            data.get("reasoning_content"), f"{where}.reasoning_content"
        ),
        pinned=_bool(data.get("pinned", False), f"{where}.pinned"),
        kind=kind,
        images=tuple(_items(data.get("images", []), f"{where}.images", _image)),
    )


_IMAGE_KEYS = frozenset(("url", "detail", "label"))


def _image(value: object, where: str) -> ImagePart:
    data = _object(value, where, frozenset(("url",)), _IMAGE_KEYS)
    detail = data.get("detail", "auto")
    if detail == "auto" or detail == "low" or detail == "high":
        return ImagePart(
            _str(data["url"], f"{where}.url"), detail, _str(data.get("label", ""), f"{where}.label")
        )
    raise CheckpointError(
        f"{where}.detail: must be one of {', '.join(_DETAILS)}; got {_show(detail)}"
    )


_CALL_KEYS = frozenset(("id", "name", "arguments", "raw_arguments", "parse_error"))


def _call(value: object, where: str) -> ToolCall:
    data = _object(value, where, _CALL_KEYS)
    return ToolCall(
        _str(data["id"], f"{where}.id"),
        _str(data["name"], f"{where}.name"),
        _arguments(data["arguments"], f"{where}.arguments"),
        _str(data["raw_arguments"], f"{where}.raw_arguments"),
        _optional_str(data["parse_error"], f"{where}.parse_error"),
    )


_STEP_KEYS = frozenset(
    (
        "index",
        "iteration",
        "call_id",
        "tool",
        "arguments",
        "observation",
        "status",
        "duration",
        "error",
        "artifacts",
        "plan_step",
    )
)


def _step(value: object, where: str) -> Step:
    data = _object(value, where, _STEP_KEYS)
    status = data["status"]
    if status not in ("ok", "error", "blocked", "cancelled"):
        raise CheckpointError(
            f"{where}.status: must be one of {', '.join(_STEP_STATUSES)}; got {_show(status)}"
        )
    return Step(
        index=_int(data["index"], f"{where}.index"),
        iteration=_int(data["iteration"], f"{where}.iteration"),
        call_id=_str(data["call_id"], f"{where}.call_id"),
        tool=_str(data["tool"], f"{where}.tool"),
        arguments=_arguments(data["arguments"], f"{where}.arguments"),
        observation=_str(data["observation"], f"{where}.observation"),
        status=status,
        duration=_float(data["duration"], f"{where}.duration"),
        error=_optional_str(data["error"], f"{where}.error"),
        artifacts=tuple(_items(data["artifacts"], f"{where}.artifacts", _artifact)),
        plan_step=_optional_str(data["plan_step"], f"{where}.plan_step"),
    )


_ARTIFACT_KEYS = frozenset(("name", "content", "media_type"))


def _artifact(value: object, where: str) -> Artifact:
    data = _object(value, where, _ARTIFACT_KEYS)
    return Artifact(
        _str(data["name"], f"{where}.name"),
        _str(data["content"], f"{where}.content"),
        _str(data["media_type"], f"{where}.media_type"),
    )


_USAGE_KEYS = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _usage(value: object, where: str) -> Usage:
    data = _object(value, where, _USAGE_KEYS)
    return Usage(
        _int(data["prompt_tokens"], f"{where}.prompt_tokens"),
        _int(data["completion_tokens"], f"{where}.completion_tokens"),
        _int(data["total_tokens"], f"{where}.total_tokens"),
    )


def _context(value: object, transcript: tuple[Message, ...]) -> list[Message]:
    where = "checkpoint.context"
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: expected a list, got {_show(value)}")
    context = []
    for position, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            if not 0 <= item < len(transcript):
                raise CheckpointError(
                    f"{where}[{position}]: {item} names no message of the transcript "
                    f"({len(transcript)} messages)"
                )
            context.append(transcript[item])
        else:
            context.append(_message(item, f"{where}[{position}]"))
    return context


def _cycle_counts(value: object, where: str) -> dict[tuple[str, str], int]:
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: expected a list, got {_show(value)}")
    counts: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise CheckpointError(f"{at}: expected [tool, arguments, count], got {_show(entry)}")
        key = (_str(entry[0], f"{at}[0]"), _str(entry[1], f"{at}[1]"))
        if key in counts:
            raise CheckpointError(f"{at}: {key[0]} with these arguments is counted twice")
        counts[key] = _int(entry[2], f"{at}[2]")
    return counts


def _counts(value: object, where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: expected an object, got {_show(value)}")
    counts = {}
    for key, count in value.items():
        counts[_str(key, f"{where}: a key")] = _int(count, f"{where}.{key}")
    return counts


def _tool_names(value: object, where: str) -> tuple[str, ...]:
    names = tuple(_items(value, where, _str))
    if len(set(names)) != len(names):
        raise CheckpointError(f"{where}: a tool is named twice")
    return names


def _settled(value: object, pending: tuple[ToolCall, ...]) -> tuple[Step, ...]:
    where = "checkpoint.settled"
    steps = _items(value, where, _step)
    order = {call.id: index for index, call in enumerate(pending)}
    by_call: dict[str, Step] = {}
    for index, step in enumerate(steps):
        if step.call_id not in order:
            raise CheckpointError(
                f"{where}[{index}]: call {step.call_id!r} is not one of the pending calls"
            )
        if step.call_id in by_call:
            raise CheckpointError(f"{where}[{index}]: call {step.call_id!r} is settled twice")
        by_call[step.call_id] = step
    return tuple(sorted(by_call.values(), key=lambda step: order[step.call_id]))


def _check_pending(checkpoint: RunCheckpoint) -> None:
    """The pending calls are those of the last assistant turn, whose results are not in."""
    pending = checkpoint.pending_calls
    if not pending:
        raise CheckpointError("checkpoint.pending_calls: a checkpoint waits on at least one call")
    if len({call.id for call in pending}) != len(pending):
        raise CheckpointError("checkpoint.pending_calls: two calls have the same id")
    for name, messages in (("transcript", checkpoint.transcript), ("context", checkpoint.context)):
        last = messages[-1] if messages else None
        if last is None or last.role != "assistant":
            raise CheckpointError(
                f"checkpoint.{name}: must end with the assistant turn of the pending calls"
            )
        if checkpoint.mode == "native" and last.tool_calls != pending:
            raise CheckpointError(
                f"checkpoint.{name}: its last message does not make the pending calls"
            )


def _check_tool_messages(messages: tuple[Message, ...], where: str) -> None:
    """Every tool message answers a call of the latest message with tool calls before it."""
    calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.tool_calls:
            calls = {call.id for call in message.tool_calls}
        elif message.role == "tool" and message.tool_call_id not in calls:
            raise CheckpointError(
                f"{where}[{index}]: a tool message answering no call "
                f"({_show(message.tool_call_id)})"
            )
