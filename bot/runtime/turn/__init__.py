"""A turn of a conversation: ``runner.py`` runs it (the agent, the live reply, the
journal's one write, the resume of a saved run), ``records.py`` says and records it."""

from bot.runtime.turn.runner import (
    AgentFactory,
    LiveReplyFactory,
    RunObserver,
    TurnRunner,
    UsageRecorder,
)

__all__ = ["AgentFactory", "LiveReplyFactory", "RunObserver", "TurnRunner", "UsageRecorder"]
