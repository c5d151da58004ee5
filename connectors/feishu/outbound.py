"""Posting into the conversation a run serves: files and charts the agent made.

Where a file goes is read from the run's turn (``bot.turn_context.current_turn()``), never
from the model's arguments: a model steered by a prompt injection in
some tool result could otherwise post a company's data into a chat of its choosing.
The tools take no chat id at all, and reply to the person's own message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.feishu.client import SentMessage
from bot.feishu.errors import FeishuError
from bot.turn_context import current_turn
from connectors.base import ToolError

from .common import WorkspaceTools
from .errors import tool_error

# A cell as JSON brings it: text, a number, true/false or null.
Cell = str | int | float | bool | None


def compact_schema(schema: dict[str, Any]) -> None:
    """Drop pydantic's titles and the class docstring from a nested model's schema: every
    call that offers the tool pays for them in tokens, and they tell the model nothing
    that the argument's own description does not."""
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)


class Table(BaseModel):
    """A table as the model passes one: the column names, then the rows, cell by cell."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=compact_schema)

    # No descriptions: the tool's own argument line shows the shape, once.
    columns: list[str] = Field(min_length=1, max_length=500)
    rows: list[list[Cell]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rectangular(self) -> Table:
        for number, row in enumerate(self.rows, start=1):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"row {number} has {len(row)} cells but there are {len(self.columns)} columns"
                )
        return self


@dataclass(frozen=True, slots=True)
class Conversation:
    chat_id: str
    message_id: str  # the person's message the run answers: the reply goes under it
    thread_id: str  # "" outside a topic


def current_conversation(tool: str) -> Conversation:
    """The conversation of the run this tool call serves, or a ToolError saying there is
    none (a run started outside a Feishu chat: the console, a benchmark, a test)."""
    turn = current_turn()
    if turn is None or not (turn.chat_id and turn.message_id):
        raise ToolError(
            f"{tool} posts into the Feishu conversation being answered, and this run is "
            "not answering a message in a Feishu chat, so there is nowhere to post. "
            "Nothing was sent."
        )
    return Conversation(turn.chat_id, turn.message_id, turn.thread_id)


class OutboundTools(WorkspaceTools):
    """Uploads and the reply that posts them, each Feishu failure as a ToolError."""

    async def _upload_file(self, data: bytes, file_name: str) -> str:
        try:
            return await self._client().upload_file(data, file_name=file_name)
        except FeishuError as exc:
            raise tool_error(exc, f"Uploading {file_name}") from exc

    async def _upload_image(self, png: bytes) -> str:
        try:
            return await self._client().upload_image(png)
        except FeishuError as exc:
            raise tool_error(exc, "Uploading the chart") from exc

    async def _post(
        self, where: Conversation, msg_type: str, content: dict[str, str], uuid: str
    ) -> SentMessage:
        """Reply to the person's message; in a topic, the reply stays in the topic."""
        try:
            return await self._client().reply_message(
                where.message_id,
                msg_type=msg_type,
                content=json.dumps(content),
                uuid=uuid,
                reply_in_thread=bool(where.thread_id),
            )
        except FeishuError as exc:
            raise tool_error(exc, f"Posting the {msg_type} into the conversation") from exc

    def _check_size(self, size: int, what: str) -> None:
        limit = self.settings.send_file_max_bytes
        if size > limit:
            raise ToolError(
                f"{what} would be {size_text(size)}, over the limit of {size_text(limit)}. "
                "Nothing was sent: make it smaller (fewer rows or less text)."
            )


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


__all__ = [
    "Cell",
    "Conversation",
    "OutboundTools",
    "Table",
    "compact_schema",
    "current_conversation",
    "size_text",
]
