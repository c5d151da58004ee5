"""The model's ``remember`` and ``forget`` tools.

Whose memory a call stores or forgets is the run's, never the model's to say: the person
is the one whose message started the run (``TurnContext``), the group is the run's chat,
and storing for everyone takes an admin. The model only chooses among what that person may
do. A run that others joined (a group's shared conversation) acts for all of them: it
stores nobody's personal memory (whose words would it be?) and forgets only what every one
of them may forget, so one person's message cannot write into, or erase, another's.
Nothing outside the bot changes, so the tools are reads to approvals and read-only mode
(which guard the company's systems); people see and erase what is kept with ``/memory``.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.engine import Tool, ToolError, tool_from_function
from bot.memory.access import may_forget, readable_in
from bot.memory.recall import MemoryConfig
from bot.memory.render import quoted
from bot.memory.terms import query_terms, terms
from bot.memory.text import MemoryTextError, clean_text
from bot.store.memories import Memory, MemoryScope, MemoryStore
from bot.turn_context import TurnContext, current_turn

REMEMBER = "remember"
FORGET = "forget"
TOOL_NAMES = (REMEMBER, FORGET)
_WHERE = {"person": "for you", "chat": "for this group", "org": "for everyone"}


class MemoryTools:
    def __init__(
        self, store: MemoryStore, config: MemoryConfig, *, is_admin: Callable[[str], bool]
    ) -> None:
        self._store = store
        self._config = config
        self._is_admin = is_admin

    def tools(self) -> list[Tool]:
        return [
            tool_from_function(self.remember, name=REMEMBER, side_effect="read", timeout=30),
            tool_from_function(self.forget, name=FORGET, side_effect="read", timeout=30),
        ]

    async def remember(self, text: str, scope: str = "me") -> str:
        """Remember a fact for later conversations, when someone asks you to (or states a
        lasting preference). `text`: the fact, written so it makes sense on its own ("Alex
        is on the Shanghai team"). `scope`: "me" (the person asking; recalled only in their
        direct messages with you), "chat" (this group's shared memory; only in a group) or
        "org" (everyone; admins only)."""
        turn = _turn()
        owner_scope, owner = self._owner(turn, scope.strip().lower() or "me")
        try:
            cleaned = clean_text(text)
        except MemoryTextError as exc:
            raise ToolError(str(exc)) from None
        cap = self._config.per_person if owner_scope == "person" else self._config.per_chat
        stored = await self._store.add(
            scope=owner_scope,
            owner=owner,
            text=cleaned,
            terms=terms(cleaned),
            created_by=turn.sender_open_id,
            chat_id=turn.chat_id or None,
            cap=cap,
        )
        said = f"Remembered {_WHERE[owner_scope]} (id {stored.memory.id}): {quoted(cleaned)}"
        if stored.evicted:
            said += f". To stay within {cap} memories, the least used was forgotten: " + ", ".join(
                quoted(m.text) for m in stored.evicted
            )
        return said

    async def forget(self, memory_id: str = "", text: str = "") -> str:
        """Forget one memory: by its `memory_id` (as recalled), or by `text` that finds it.
        Only memories that may be recalled here can be forgotten here."""
        turn = _turn()
        readable = readable_in(turn.chat_type, turn.chat_id, turn.sender_open_id)
        if memory_id.strip():
            memory = await self._store.get(memory_id.strip())
            if memory is None or not readable.may_read(memory):
                raise ToolError(f"there is no memory {memory_id.strip()!r} here")
        elif text.strip():
            found = await self._store.recall(readable, query_terms(text), limit=3)
            if not found:
                raise ToolError("no memory here matches that text")
            if len(found) > 1 and not _same(found[0], text):
                options = "; ".join(f"{m.id}: {quoted(m.text)}" for m in found)
                return f"Several memories match; call forget again with one memory_id: {options}"
            memory = found[0]
        else:
            raise ToolError("say which memory: its memory_id, or text that finds it")
        if not all(may_forget(memory, who, self._is_admin) for who in turn.askers().everyone):
            raise ToolError("only the person who stored that memory, or an admin, may forget it")
        if await self._store.forget(memory.id, actor=turn.sender_open_id, via="tool") is None:
            return "That memory was already forgotten."
        return f"Forgot {quoted(memory.text)}."

    def _owner(self, turn: TurnContext, scope: str) -> tuple[MemoryScope, str]:
        if scope == "me":
            if len(turn.askers().everyone) > 1:
                raise ToolError(
                    "several people's messages are in this request: a personal memory is "
                    'stored only when its person asks alone (or use scope "chat")'
                )
            return "person", turn.sender_open_id
        if scope == "chat":
            if turn.chat_type == "p2p":
                raise ToolError('"chat" memories belong to a group; here use scope "me"')
            return "chat", turn.chat_id
        if scope == "org":
            if not self._is_admin(turn.sender_open_id):
                raise ToolError("only an admin may store a memory for everyone")
            return "org", ""
        raise ToolError(f'scope is "me", "chat" or "org", not {scope!r}')


def _turn() -> TurnContext:
    turn = current_turn()
    if turn is None or not turn.sender_open_id:
        raise ToolError("memories are kept for a chat's people; this run has none")
    return turn


def _same(memory: Memory, text: str) -> bool:
    return " ".join(terms(memory.text)) == " ".join(terms(text))
