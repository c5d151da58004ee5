"""Who reads and who forgets which memories: the rules every path applies.

Read: in a direct message the person's own memories (and everyone's), in a group that
group's (and everyone's); never a person's in a group (everyone there would read the
answer), never another person's. A scheduled run follows the same rule: it posts in its
creator's direct messages, or in a group. Forget: a person's memory by that person; a
group's or everyone's by whoever stored it, or an admin.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.store.memories import Memory, Readable


def readable_in(chat_type: str, chat_id: str, asker: str) -> Readable:
    """The memories a run for ``asker`` in this chat may read."""
    if chat_type == "p2p":
        return Readable(person=asker or None)
    return Readable(chat=chat_id or None)


def may_forget(memory: Memory, actor: str, is_admin: Callable[[str], bool]) -> bool:
    if not actor:
        return False
    if memory.scope == "person":
        return memory.owner == actor
    return memory.created_by == actor or is_admin(actor)
