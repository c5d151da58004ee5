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
    │   └── FeishuUserScopeMissing  99991679: the user token lacks it   ask the user to consent
    ├── FeishuAuthorizationGone  20026, 20037, 20064, 20073             the user authorises again
    ├── FeishuOAuthServerError   20050                                  retryable, once
    ├── FeishuResourceTooLarge  234037, or over our own download limit  say so, with the limit
    │                           (code None; .size, .limit, .read)
    ├── FeishuResourceUnavailable  234003, 234004, 234043               the file cannot be had
    └── FeishuTransportError    no usable answer: network, timeout,     retryable
        │                       non-JSON body (a gateway 502 page)
        └── FeishuProxyAuthRequired  the proxy's 407: its credentials   fix HTTP(S)_PROXY

``retryable`` says whether the same call may succeed later unchanged. Nothing in
this package retries on its own except the one token refresh; callers decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


class FeishuUserScopeMissing(FeishuScopeMissing):
    """A user token lacks a scope (99991679): the user, not the admin, must grant more."""


class FeishuAuthorizationGone(FeishuError):
    """The user's refresh token is invalid (20026), expired (20037), revoked (20064) or
    already used (20073, Feishu rotates it on every refresh): they must authorise again.
    Codes from larksuite/openclaw-lark ``src/core/auth-errors.ts`` (research/feishu-bots.md)."""


class FeishuOAuthServerError(FeishuError):
    """The OAuth token endpoint failed on Feishu's side (20050); worth one more try."""

    retryable = True


class FeishuResourceTooLarge(FeishuError):
    """A message resource is over a download limit: ours (``code`` None, refused before or
    while reading the body) or Feishu's 100 MB (234037).

    ``size`` is the size the answer declared (None when it did not say, or said nothing
    we could trust), ``limit`` the limit in bytes, ``read`` how many body bytes were read
    before refusing (0 when the declared size was enough to refuse).
    """

    def __init__(
        self,
        *args: Any,
        size: int | None = None,
        limit: int | None = None,
        read: int = 0,
        **kwargs: Any,
    ) -> None:
        self.size = size
        self.limit = limit
        self.read = read
        super().__init__(*args, **kwargs)

    @classmethod
    def over_limit(
        cls, *, size: int | None, limit: int, read: int, endpoint: str
    ) -> FeishuResourceTooLarge:
        """Our own refusal: the file was (or declared it would be) over ``limit``."""
        said = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        msg = f"the file is {said}, over the limit of {limit} bytes"
        return cls(None, msg, endpoint=endpoint, size=size, limit=limit, read=read)


class FeishuResourceUnavailable(FeishuError):
    """The resource cannot be downloaded from that message: the key is not in it (or it
    expired, or the message was recalled), the bot is not in its chat, or Feishu serves
    no resources for that kind of message (stickers, cards)."""


class FeishuTransportError(FeishuError):
    """No usable answer: network failure, timeout, or a body that is not Feishu JSON."""

    retryable = True


class FeishuProxyAuthRequired(FeishuTransportError):
    """The egress proxy wants credentials it was not given (HTTP 407): the proxy URL in
    HTTP_PROXY/HTTPS_PROXY lacks them or has wrong ones; trying again changes nothing."""

    retryable = False


@dataclass(frozen=True, slots=True)
class _Code:
    """What one Feishu code is: the exception it raises, the ``msg`` Feishu answers with
    (the emulator answers the same), and what it means for whoever holds the tool."""

    kind: type[FeishuError]
    msg: str
    hint: str = ""


# Feishu's own limit on a message resource download (documented: 100 MB).
FEISHU_DOWNLOAD_LIMIT = 100 * 1024 * 1024

_WRONG_FIELD_TYPE = (
    "a field value has the wrong type for its column (text: string, number: number, "
    "single select: string, multi select: list of strings, date: epoch milliseconds, "
    'checkbox: true/false, person: [{"id": open_id}], link: {"link", "text"})'
)

# The one table of Feishu's error codes: the client, the emulator and the workspace tools
# all read it, so a code means the same everywhere.
CODES: dict[int, _Code] = {
    10003: _Code(FeishuError, "invalid param"),
    10014: _Code(FeishuError, "app secret invalid"),
    11310: _Code(FeishuCardInvalid, "card content is invalid"),
    40004: _Code(
        FeishuError,
        "no dept authority",
        "the department does not exist or is outside the app's contact range",
    ),
    41050: _Code(FeishuError, "no user authority", "that user is outside the app's contact range"),
    91403: _Code(
        FeishuError,
        "Forbidden",
        "the app has no access to that Base; its owner must add the app "
        "('...' > 'Add document app')",
    ),
    190002: _Code(
        FeishuError, "invalid parameters in request", "Feishu rejected the event's parameters"
    ),
    191000: _Code(FeishuError, "calendar not found", "the calendar does not exist"),
    191001: _Code(FeishuError, "", "the calendar id is invalid"),
    191002: _Code(
        FeishuError,
        "no calendar access_role",
        "the app has no access to that calendar (it needs to be a reader or writer)",
    ),
    193001: _Code(FeishuError, "event not found", "the event does not exist"),
    200220: _Code(FeishuCardInvalid, "card json is invalid"),  # CardKit: card JSON does not parse
    200740: _Code(FeishuMessageGone, "card not found"),  # CardKit: the card entity does not exist
    200750: _Code(FeishuMessageGone, ""),  # CardKit: the card entity expired (14 days)
    200770: _Code(FeishuError, "uuid conflict"),
    200850: _Code(FeishuStreamingClosed, "card streaming timeout"),
    200860: _Code(
        FeishuTooLarge, "card content exceeds the size limit"
    ),  # CardKit: card JSON over 30 KB
    230001: _Code(
        FeishuError,
        "Your request contains an invalid request parameter.",
        "an id or parameter is invalid (for example a chat_id that does not exist)",
    ),
    230002: _Code(
        FeishuError,
        "The bot can not be outside the group.",
        "the bot is not a member of that chat; add the bot to the group first",
    ),
    230006: _Code(FeishuError, "", "the app has no bot ability enabled"),
    230011: _Code(FeishuMessageGone, "The message was withdrawn."),
    230013: _Code(
        FeishuError,
        "Bot has NO availability to this user.",
        "that user is outside the bot's availability range",
    ),
    230020: _Code(FeishuRateLimited, "This operation triggers the frequency limit."),
    230025: _Code(
        FeishuTooLarge,
        "The length of the message content reaches its limit.",
        "the message is too long",
    ),
    230031: _Code(FeishuEditWindowClosed, "The message is too old to be edited."),
    230054: _Code(FeishuError, "This type of message can't be updated."),
    230099: _Code(FeishuCardInvalid, "Failed to create card content."),
    230110: _Code(FeishuMessageGone, "Action unavailable as the message has been deleted."),
    231003: _Code(FeishuMessageGone, "The message is not found, maybe not exist or deleted."),
    # Chat facts and members (GET /im/v1/chats/:chat_id[/members]), as Feishu's group API
    # documents them.
    232006: _Code(
        FeishuError,
        "Your request specifies a chat_id which is invalid.",
        "the chat_id is invalid or the chat does not exist",
    ),
    232011: _Code(
        FeishuError,
        "Operator can NOT be out of the chat.",
        "the bot is not a member of that chat; add the bot to the group first",
    ),
    232015: _Code(FeishuError, "Your request specifies a member_id_type which is NOT supported."),
    # Message resources (GET /im/v1/messages/:id/resources/:key). Codes and meanings as
    # Feishu documents them and as other bots handle them (openclaw, larksuite/cli):
    # answered with HTTP 400 and a JSON body instead of the file.
    234001: _Code(
        FeishuError,
        "Invalid request param.",
        "Feishu rejected the resource request (message id, key or type image/file)",
    ),
    234003: _Code(
        FeishuResourceUnavailable,
        "File not in msg.",
        "that key is not in that message (or it expired, or the message was recalled); "
        "a forwarded message's files are fetched with the forward's own message id",
    ),
    234004: _Code(
        FeishuResourceUnavailable, "App not in chat.", "the bot is not in the chat of that message"
    ),
    234037: _Code(FeishuResourceTooLarge, "", "the file is over Feishu's download limit of 100 MB"),
    234043: _Code(
        FeishuResourceUnavailable,
        "",
        "Feishu serves no files for that kind of message (cards, forwarded sub-messages)",
    ),
    300301: _Code(FeishuCardInvalid, "duplicate element_id"),  # duplicate element_id
    300302: _Code(FeishuCardInvalid, "update_multi must be true"),  # update_multi must be true
    300303: _Code(FeishuCardInvalid, "card schema must be 2.0"),  # not a schema 2.0 card
    300305: _Code(FeishuCardInvalid, "too many card components"),  # too many components
    300307: _Code(FeishuCardInvalid, "card content is empty"),  # empty card
    300309: _Code(FeishuStreamingClosed, "streaming mode is closed"),
    300310: _Code(FeishuError, "element type does not support streaming content"),
    300313: _Code(FeishuError, "element not found"),
    300317: _Code(FeishuSequenceError, "sequence number compare failed"),
    # Drive permissions (GET /drive/v1/permissions/:token/members) on a document or Base.
    1063001: _Code(
        FeishuError,
        "Invalid parameter",
        "the document or Base token, or its type, is wrong (or it does not exist)",
    ),
    1063002: _Code(
        FeishuError,
        "Permission denied",
        "the app has no permission on that document or Base; share it with the app",
    ),
    1254001: _Code(FeishuError, "WrongRequestBody"),
    1254003: _Code(FeishuError, "", "the Base app_token is wrong"),
    1254004: _Code(FeishuError, "", "the table_id is wrong"),
    1254005: _Code(FeishuError, "", "the view_id is wrong"),
    1254016: _Code(FeishuError, "InvalidSort", "the sort is invalid"),
    1254018: _Code(FeishuError, "InvalidFilter", "the filter is invalid"),
    1254024: _Code(
        FeishuError,
        "InvalidFieldNames",
        "a field name does not exist in the table (names must match exactly)",
    ),
    1254040: _Code(FeishuError, "BaseTokenNotFound", "the Base app_token does not exist"),
    1254041: _Code(FeishuError, "TableIdNotFound", "the table_id does not exist in that Base"),
    1254042: _Code(FeishuError, "ViewIdNotFound", "the view_id does not exist"),
    1254045: _Code(
        FeishuError,
        "FieldNameNotFound",
        "a field name does not exist in the table (names must match exactly)",
    ),
    1254060: _Code(FeishuError, "TextFieldConvFail", _WRONG_FIELD_TYPE),
    1254061: _Code(FeishuError, "NumberFieldConvFail", _WRONG_FIELD_TYPE),
    1254062: _Code(FeishuError, "SingleSelectFieldConvFail", _WRONG_FIELD_TYPE),
    1254063: _Code(FeishuError, "MultiSelectFieldConvFail", _WRONG_FIELD_TYPE),
    1254064: _Code(FeishuError, "DatetimeFieldConvFail", _WRONG_FIELD_TYPE),
    1254065: _Code(FeishuError, "CheckboxFieldConvFail", _WRONG_FIELD_TYPE),
    1254066: _Code(FeishuError, "UserFieldConvFail", _WRONG_FIELD_TYPE),
    1254067: _Code(FeishuError, "", _WRONG_FIELD_TYPE),
    1254068: _Code(FeishuError, "URLFieldConvFail", _WRONG_FIELD_TYPE),
    1254069: _Code(FeishuError, "", _WRONG_FIELD_TYPE),
    1254070: _Code(FeishuError, "", _WRONG_FIELD_TYPE),
    1254071: _Code(FeishuError, "", _WRONG_FIELD_TYPE),
    1254072: _Code(FeishuError, "", _WRONG_FIELD_TYPE),
    1254302: _Code(
        FeishuError,
        "Permission denied.",
        "the app lacks permission on that Base; add it as a document app with edit rights",
    ),
    1470400: _Code(FeishuError, "invalid request params", "Feishu rejected the task's parameters"),
    1470403: _Code(
        FeishuError,
        "permission denied",
        "the app has no permission on that task or tasklist (it must be a member)",
    ),
    1470404: _Code(FeishuError, "resource not found", "the task or tasklist does not exist"),
    1770001: _Code(FeishuError, "invalid param", "Feishu rejected the document parameters"),
    1770002: _Code(FeishuError, "not found", "the document does not exist"),
    1770003: _Code(FeishuError, "", "the document was deleted"),
    1770032: _Code(
        FeishuError,
        "forBidden",
        "the app has no permission on that document; share the document with the app",
    ),
    # The v2 OAuth token endpoint's refresh failures (see FeishuAuthorizationGone).
    20026: _Code(FeishuAuthorizationGone, "", "the user's authorisation is invalid"),
    20037: _Code(FeishuAuthorizationGone, "", "the user's authorisation expired"),
    20064: _Code(FeishuAuthorizationGone, "", "the user's authorisation was revoked"),
    20073: _Code(FeishuAuthorizationGone, "", "the user's refresh token was already used"),
    20050: _Code(FeishuOAuthServerError, "", "Feishu's OAuth service failed; try again"),
    99991400: _Code(FeishuRateLimited, "request trigger frequency limit"),
    99991661: _Code(
        FeishuTokenInvalid,
        "Missing access token for authorization. Please make a request with token attached.",
    ),
    99991663: _Code(
        FeishuTokenInvalid,
        "Invalid access token for authorization. Please make a request with token attached.",
    ),
    99991668: _Code(
        FeishuTokenInvalid,
        "Invalid access token for authorization. Please make a request with token attached.",
    ),
    99991672: _Code(
        FeishuScopeMissing,
        "Access denied. One of the following scopes is required: "
        "[im:message, im:message:send_as_bot].",
    ),
    99991677: _Code(FeishuTokenInvalid, ""),
    99991679: _Code(
        FeishuUserScopeMissing, "", "the user has not granted the scope; ask them to authorise"
    ),
    99992402: _Code(FeishuError, "field validation failed", "a request parameter was rejected"),
}
_BY_CODE = {code: entry.kind for code, entry in CODES.items() if entry.kind is not FeishuError}


def feishu_msg(code: int) -> str:
    """The ``msg`` Feishu answers ``code`` with ("" when the table does not know it)."""
    entry = CODES.get(code)
    return entry.msg if entry else ""


def hint_for(code: int) -> str:
    """What ``code`` means for the person or model that called ("" when nothing more than
    Feishu's own msg can be said)."""
    entry = CODES.get(code)
    return entry.hint if entry else ""


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
    if issubclass(cls, FeishuScopeMissing):
        return cls(code, msg, scopes=_scopes(msg, error), **common)
    if cls is FeishuResourceTooLarge:
        return FeishuResourceTooLarge(code, msg, limit=FEISHU_DOWNLOAD_LIMIT, **common)
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
