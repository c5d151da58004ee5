"""Feishu failures as a small exception tree, mapped once from Feishu's numeric codes.

::

    FeishuError(code, msg, log_id, endpoint)        any failure; unknown codes stay this class
    ├── FeishuRateLimited       230020, 99991400, or HTTP 429           retryable, later
    ├── FeishuTooLarge          230025, 200860                          shrink or split
    ├── FeishuCardInvalid       230099, 11310, 3003xx, 200220           degrade the card
    ├── FeishuMessageGone       230011, 231003, 230110, 200740, 200750  recalled/deleted: stop
    ├── FeishuEditWindowClosed  230031                                  too old to edit
    ├── FeishuSequenceError     300317                                  CardKit sequence
    ├── FeishuStreamingClosed   300309, 200850                          streaming mode ended
    ├── FeishuTokenInvalid      99991661, 99991663, 99991668, 99991677  refresh once
    ├── FeishuScopeMissing      99991672  (.scopes)                     tell the admin
    └── FeishuTransportError    no usable answer: network, timeout,     retryable
                                non-JSON body (a gateway 502 page)

``retryable`` says whether the same call may succeed later unchanged. Nothing in
this package retries on its own except the one token refresh; callers decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar


class FeishuError(Exception):
    """A Feishu API call failed. ``code`` is Feishu's code (None when there was no answer)."""

    retryable: ClassVar[bool] = False

    def __init__(
        self,
        code: int | None,
        msg: str,
        log_id: str | None = None,
        endpoint: str = "",
        *,
        http_status: int | None = None,
    ) -> None:
        self.code = code
        self.msg = msg
        self.log_id = log_id
        self.endpoint = endpoint
        self.http_status = http_status
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = f"{self.endpoint}: " if self.endpoint else ""
        code = "" if self.code is None else f" (code {self.code})"
        log_id = f" [log_id {self.log_id}]" if self.log_id else ""
        return f"{where}{self.msg}{code}{log_id}"


class FeishuRateLimited(FeishuError):
    """Too many calls; ``retry_after`` (seconds) when Feishu said how long to wait."""

    retryable = True

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(*args, **kwargs)


class FeishuTooLarge(FeishuError):
    """The message or card is over Feishu's size limit."""


class FeishuCardInvalid(FeishuError):
    """Feishu could not build the card (often tables or unsupported components)."""


class FeishuMessageGone(FeishuError):
    """The target message was recalled or deleted."""


class FeishuEditWindowClosed(FeishuError):
    """The message is too old to be edited."""


class FeishuSequenceError(FeishuError):
    """A CardKit ``sequence`` was not strictly increasing."""


class FeishuStreamingClosed(FeishuError):
    """The card's streaming mode is off (closed or timed out)."""


class FeishuTokenInvalid(FeishuError):
    """The access token was missing, invalid or expired."""


class FeishuScopeMissing(FeishuError):
    """The app lacks a permission scope; ``scopes`` lists the ones that would do."""

    def __init__(self, *args: Any, scopes: Iterable[str] = (), **kwargs: Any) -> None:
        self.scopes: tuple[str, ...] = tuple(scopes)
        super().__init__(*args, **kwargs)


class FeishuTransportError(FeishuError):
    """No usable answer: network failure, timeout, or a body that is not Feishu JSON."""

    retryable = True


_BY_CODE: dict[int, type[FeishuError]] = {
    230020: FeishuRateLimited,
    99991400: FeishuRateLimited,
    230025: FeishuTooLarge,
    200860: FeishuTooLarge,  # CardKit: card JSON over 30 KB
    230099: FeishuCardInvalid,
    11310: FeishuCardInvalid,
    200220: FeishuCardInvalid,  # CardKit: card JSON does not parse
    300301: FeishuCardInvalid,  # duplicate element_id
    300302: FeishuCardInvalid,  # update_multi must be true
    300303: FeishuCardInvalid,  # not a schema 2.0 card
    300305: FeishuCardInvalid,  # too many components
    300307: FeishuCardInvalid,  # empty card
    230011: FeishuMessageGone,
    231003: FeishuMessageGone,
    230110: FeishuMessageGone,
    200740: FeishuMessageGone,  # CardKit: the card entity does not exist
    200750: FeishuMessageGone,  # CardKit: the card entity expired (14 days)
    230031: FeishuEditWindowClosed,
    300317: FeishuSequenceError,
    300309: FeishuStreamingClosed,
    200850: FeishuStreamingClosed,
    99991661: FeishuTokenInvalid,
    99991663: FeishuTokenInvalid,
    99991668: FeishuTokenInvalid,
    99991677: FeishuTokenInvalid,
    99991672: FeishuScopeMissing,
}

# The first bracketed list in the message: "... scopes is required: [im:message, im:...]".
_SCOPE_LIST = re.compile(r"\[([^\]]+)\]")
_SCOPE_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def error_for(
    code: int,
    msg: str,
    *,
    endpoint: str,
    log_id: str | None = None,
    http_status: int | None = None,
    headers: Mapping[str, str] | None = None,
    error: Mapping[str, Any] | None = None,
) -> FeishuError:
    """The exception for a Feishu answer with ``code != 0`` (or HTTP 429).

    ``headers`` are the response headers (lower-case keys); ``error`` is the body's
    ``error`` object, which carries ``permission_violations`` on scope errors.
    """
    common: dict[str, Any] = {"log_id": log_id, "endpoint": endpoint, "http_status": http_status}
    cls = FeishuRateLimited if http_status == 429 else _BY_CODE.get(code, FeishuError)
    if cls is FeishuRateLimited:
        return FeishuRateLimited(code, msg, retry_after=_retry_after(headers), **common)
    if cls is FeishuScopeMissing:
        return FeishuScopeMissing(code, msg, scopes=_scopes(msg, error), **common)
    return cls(code, msg, **common)


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        value = headers.get(name)
        if value is not None:
            try:
                return max(float(value), 0.0)
            except ValueError:
                continue
    return None


def _scopes(msg: str, error: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Scope names from the message, else from ``error.permission_violations[].subject``."""
    match = _SCOPE_LIST.search(msg)
    if match:
        names = [part.strip() for part in match.group(1).split(",")]
        found = tuple(name for name in names if _SCOPE_NAME.match(name))
        if found:
            return found
    violations = (error or {}).get("permission_violations") or []
    return tuple(
        v["subject"]
        for v in violations
        if isinstance(v, dict) and isinstance(v.get("subject"), str)
    )
