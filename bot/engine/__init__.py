"""The ReAct engine: an agent loop over an LLM and tools, with hooks, knowing nothing of Feishu.

Public names are listed in ``__all__``; everything else is internal. The OpenAI
provider is imported lazily, so code that never builds one does not pay for the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .agent import ReActAgent
from .chat_agent import ChatAgent
from .checkpoint import CheckpointError, RunCheckpoint
from .context_guard import ContextGuard, estimate_tokens
from .dag import (
    DAGAgent,
    DAGExecutor,
    DAGPlanner,
    DAGSettings,
    ModeChoice,
    ModeSelector,
    Plan,
    PlanAnalyzer,
    PlanError,
    PlanReport,
    PlanStep,
    ReActOptions,
    RoundReport,
    StepReport,
    Verdict,
    choose_mode,
    rule_mode,
    validate_plan,
)
from .events import (
    AnswerEvent,
    AnswerWithdrawnEvent,
    CompactEvent,
    DoneEvent,
    PhaseEvent,
    PlanStepEvent,
    RunEvent,
    StepEvent,
)
from .function_tools import tool, tool_from_function
from .hooks import (
    Hook,
    HookChain,
    HookResult,
    PostToolUseHook,
    PreToolUseHook,
    RunContext,
    ToolUse,
    current_run,
    current_tool_use,
)
from .interrupts import InterruptQueue
from .json_extract import extract_json
from .llm import (
    LLM,
    LLMContextOverflow,
    LLMDeadlineExceeded,
    LLMError,
    LLMRequestError,
    LLMResponse,
    LLMResponseError,
    LLMStreamInterrupted,
    LLMTransientError,
    StreamDelta,
)
from .messages import ImagePart, Message, ToolCall, Usage
from .model_deadline import ModelDeadline, model_deadline
from .model_registry import ModelRegistry
from .result import AgentResult, Step
from .structured import StructuredCallResult, StructuredOutputError, structured_llm_call
from .tools import Artifact, Tool, ToolError, ToolRegistry

if TYPE_CHECKING:
    from .openai_compat import OpenAICompatibleLLM

__all__ = [
    "LLM",
    "AgentResult",
    "AnswerEvent",
    "AnswerWithdrawnEvent",
    "Artifact",
    "ChatAgent",
    "CheckpointError",
    "CompactEvent",
    "ContextGuard",
    "DAGAgent",
    "DAGExecutor",
    "DAGPlanner",
    "DAGSettings",
    "DoneEvent",
    "Hook",
    "HookChain",
    "HookResult",
    "ImagePart",
    "InterruptQueue",
    "LLMContextOverflow",
    "LLMDeadlineExceeded",
    "LLMError",
    "LLMRequestError",
    "LLMResponse",
    "LLMResponseError",
    "LLMStreamInterrupted",
    "LLMTransientError",
    "Message",
    "ModeChoice",
    "ModeSelector",
    "ModelDeadline",
    "ModelRegistry",
    "OpenAICompatibleLLM",
    "PhaseEvent",
    "Plan",
    "PlanAnalyzer",
    "PlanError",
    "PlanReport",
    "PlanStep",
    "PlanStepEvent",
    "PostToolUseHook",
    "PreToolUseHook",
    "ReActAgent",
    "ReActOptions",
    "RoundReport",
    "RunCheckpoint",
    "RunContext",
    "RunEvent",
    "Step",
    "StepEvent",
    "StepReport",
    "StreamDelta",
    "StructuredCallResult",
    "StructuredOutputError",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolRegistry",
    "ToolUse",
    "Usage",
    "Verdict",
    "choose_mode",
    "current_run",
    "current_tool_use",
    "estimate_tokens",
    "extract_json",
    "model_deadline",
    "rule_mode",
    "structured_llm_call",
    "tool",
    "tool_from_function",
    "validate_plan",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatibleLLM":
        from .openai_compat import OpenAICompatibleLLM

        return OpenAICompatibleLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
