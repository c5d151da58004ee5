"""Who and where in the sandbox: two people of the emulator's tenant and the chats."""

from __future__ import annotations

from dataclasses import dataclass

BOT_OPEN_ID = "ou_larkgate_sandbox"
BOT_NAME = "larkgate"
APP_ID = "cli_larkgate_sandbox"
GROUP_CHAT_ID = "oc_sandbox_group"


@dataclass(frozen=True, slots=True)
class Person:
    key: str
    open_id: str  # a user of the emulator's workspace, so cards show the name
    name: str
    admin: bool

    def dm_chat_id(self) -> str:
        return f"oc_sandbox_dm_{self.key}"


ADMIN = Person("admin", "ou_fake_alice", "Alice Wang", admin=True)
USER = Person("user", "ou_fake_bob", "Bob Li", admin=False)
PEOPLE = {p.key: p for p in (ADMIN, USER)}


def chat_of(person: Person, where: str) -> tuple[str, str]:
    """(chat_id, chat_type) of ``where`` ("dm" or "group") for ``person``."""
    if where == "group":
        return GROUP_CHAT_ID, "group"
    return person.dm_chat_id(), "p2p"
