"""Feishu failures as ToolErrors that tell the model (and the person) what to do next."""

from __future__ import annotations

from bot.feishu.errors import (
    FeishuAuthorizationGone,
    FeishuError,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuTokenInvalid,
    FeishuTransportError,
    FeishuUserScopeMissing,
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


def user_tool_error(exc: FeishuError, doing: str) -> ToolError:
    """``exc`` from a call made with the asker's own user token: what they (or an admin)
    must do about their authorisation; anything else as :func:`tool_error` says it."""
    if isinstance(exc, FeishuUserScopeMissing):
        return ToolError(
            f"{doing} failed: your Feishu authorisation of this bot does not include the "
            f"permission {scope_text(exc)}. Authorise again with /login and grant it."
        )
    if isinstance(exc, FeishuScopeMissing):
        return ToolError(
            f"{doing} failed: the Feishu app may not act as users for this "
            f"({scope_text(exc)}). An admin must add that user permission in the Feishu "
            "developer console and publish a new app version."
        )
    if isinstance(exc, FeishuTokenInvalid | FeishuAuthorizationGone):
        return ToolError(
            f"{doing} failed: Feishu no longer accepts your authorisation of this bot "
            "(it expired or was revoked). Authorise again with /login."
        )
    return tool_error(exc, doing)


def scope_text(exc: FeishuScopeMissing) -> str:
    if not exc.scopes:
        return "named in Feishu's message"
    if len(exc.scopes) == 1:
        return exc.scopes[0]
    return "any one of " + ", ".join(exc.scopes)


__all__ = ["scope_text", "tool_error", "user_tool_error"]
