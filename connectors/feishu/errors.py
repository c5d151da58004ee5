"""Feishu failures as ToolErrors that tell the model (and the person) what to do next."""

from __future__ import annotations

from bot.feishu.errors import (
    FeishuError,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuTokenInvalid,
    FeishuTransportError,
    hint_for,
)
from connectors.base import ToolError


def tool_error(exc: FeishuError, doing: str) -> ToolError:
    """``exc`` as "<doing> failed: <what to do>. Feishu said: ..."."""
    if isinstance(exc, FeishuScopeMissing):
        return ToolError(
            f"{doing} failed: the Feishu app lacks a permission scope ({scope_text(exc)}). "
            "An admin must add it in the Feishu developer console and publish a new app "
            f"version. Feishu said: {exc.msg}"
        )
    if isinstance(exc, FeishuRateLimited):
        wait = f"{exc.retry_after:g} seconds" if exc.retry_after else "a little"
        return ToolError(f"{doing} failed: Feishu's rate limit was hit; wait {wait} and retry.")
    if isinstance(exc, FeishuTransportError):
        return ToolError(
            f"{doing} failed: Feishu could not be reached or gave no usable answer "
            f"({exc.msg}). Try again later."
        )
    if isinstance(exc, FeishuTokenInvalid):
        return ToolError(f"{doing} failed: Feishu refused the app's access token ({exc.msg}).")
    hint = hint_for(exc.code or 0)
    if not hint and exc.http_status is not None and exc.http_status >= 500:
        hint = "Feishu had a server error; try again later"
    said = f"Feishu said: {exc.msg} (code {exc.code})"
    return ToolError(f"{doing} failed: {hint}. {said}." if hint else f"{doing} failed. {said}.")


def scope_text(exc: FeishuScopeMissing) -> str:
    if not exc.scopes:
        return "named in Feishu's message"
    if len(exc.scopes) == 1:
        return exc.scopes[0]
    return "any one of " + ", ".join(exc.scopes)


__all__ = ["scope_text", "tool_error"]
