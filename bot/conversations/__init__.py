"""Conversations: which messages belong together, and one run at a time per conversation."""

from .scope import ScopeInput, scope_key
from .workers import ConversationWorkers, Job

__all__ = ["ConversationWorkers", "Job", "ScopeInput", "scope_key"]
