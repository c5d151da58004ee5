"""The ReAct engine: an agent loop over an LLM and tools, with hooks, knowing nothing of Feishu.

Public names are listed in ``__all__``; everything else is internal. The OpenAI
provider is imported lazily, so code that never builds one does not pay for the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .agent import ReActAgent
from .context_guard import ContextGuard, estimate_tokens
from .events import AnswerEvent, CompactEvent, DoneEvent, RunEvent, StepEvent
from .function_tools import tool, tool_from_function
from .hooks import (
    Hook,
    HookResult,
    PostToolUseHook,
    PreToolUseHook,
    RunContext,
    ToolUse,
    current_run,
)
from .interrupts import InterruptQueue
from .json_extract import extract_json
from .llm import (
    LLM,
    LLMContextOverflow,
    LLMError,
    LLMRequestError,
    LLMResponse,
    LLMResponseError,
    LLMStreamInterrupted,
    LLMTransientError,
    StreamDelta,
)
from .messages import ImagePart, Message, ToolCall, Usage
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
    "Artifact",
    "CompactEvent",
    "ContextGuard",
    "DoneEvent",
    "Hook",
    "HookResult",
    "ImagePart",
    "InterruptQueue",
    "LLMContextOverflow",
    "LLMError",
    "LLMRequestError",
    "LLMResponse",
    "LLMResponseError",
    "LLMStreamInterrupted",
    "LLMTransientError",
    "Message",
    "ModelRegistry",
    "OpenAICompatibleLLM",
    "PostToolUseHook",
    "PreToolUseHook",
    "ReActAgent",
    "RunContext",
    "RunEvent",
    "Step",
    "StepEvent",
    "StreamDelta",
    "StructuredCallResult",
    "StructuredOutputError",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolRegistry",
    "ToolUse",
    "Usage",
    "current_run",
    "estimate_tokens",
    "extract_json",
    "structured_llm_call",
    "tool",
    "tool_from_function",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatibleLLM":
        from .openai_compat import OpenAICompatibleLLM

        return OpenAICompatibleLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
