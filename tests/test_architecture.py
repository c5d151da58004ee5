"""The interfaces DESIGN §4 promises, and the layer rule the engine lives by."""

from __future__ import annotations

import subprocess
import sys

import bot.engine

DESIGN_ENGINE_NAMES = {
    "ReActAgent",
    "AgentResult",
    "Tool",
    "ToolRegistry",
    "HookResult",
    "InterruptQueue",
    "structured_llm_call",
    "StructuredCallResult",
    "extract_json",
    "OpenAICompatibleLLM",
    "ModelRegistry",
}


def test_the_engine_exports_the_names_design_promises():
    assert set(bot.engine.__all__) >= DESIGN_ENGINE_NAMES
    for name in bot.engine.__all__:
        assert getattr(bot.engine, name) is not None


def test_importing_the_engine_pulls_in_no_server_sdk_or_database():
    code = (
        "import sys, bot.engine; "
        "bad = [m for m in ('aiohttp', 'lark_oapi', 'sqlalchemy', 'openai') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # openai is imported only when OpenAICompatibleLLM is first used.
    assert out.stdout.strip() == ""
