"""Sending lark-oapi requests over pooled keep-alive connections.

lark-oapi's async transport builds a new ``httpx.AsyncClient`` for every call. Building
one creates an SSL context and loads the CA bundle, about 70 ms of CPU on this kind of
machine, on the event loop, per call; and no connection is ever reused. Replies and
card updates are the hot path, so requests are built with the SDK's generated
builders, as before, but sent here, over one aiohttp session per client: a keep-alive
pool, the proxy for each host and the CA the environment sets (:mod:`bot.network`).

Uploads are sent as lark-oapi sends them, multipart/form-data (``request.files``, set by
``Files.extract_files`` as the SDK's upload calls do), with aiohttp's multipart writer.
``download`` reads a binary answer (a message resource) without trusting it: a declared
``Content-Length`` over the limit is refused before the body is read, and a body that
keeps coming (no length, chunked) is cut off as soon as it passes the limit. A JSON
answer is capped too (``MAX_ANSWER_BYTES``): Feishu's envelopes are kilobytes.

A broken exchange ends as an exception the Feishu client reports as "no usable answer":
``aiohttp.ClientError`` (refused, reset mid-body, a proxy's refusal), ``TimeoutError``,
or ``ValueError`` (:class:`BodyTooLarge`).
"""

from __future__ import annotations

import io
import json
import urllib.parse
from typing import Any, TypeVar, cast

import aiohttp
import lark_oapi as lark
from lark_oapi.core.enum import AccessTokenType
from lark_oapi.core.json import Encoder
from lark_oapi.core.model import BaseRequest, RawResponse, RequestOption
from yarl import URL

from bot.network import Network, ProxiedSession

T = TypeVar("T")

USER_AGENT = f"oapi-sdk-python/v{lark.core.const.VERSION} larkgate"

# An error answer to a download is Feishu's small JSON envelope; more than this is not one.
_ERROR_BODY_LIMIT = 64 * 1024
# A JSON answer past this is not an OpenAPI answer, and memory is not the server's to fill.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
_CHUNK = 64 * 1024


class BodyTooLarge(ValueError):
    """A body is (or says it is) over ``limit``: ``declared`` is its Content-Length
    (None when absent), ``read`` the bytes read before giving up."""

    def __init__(self, *, declared: int | None, read: int, limit: int) -> None:
        super().__init__(f"body over {limit} bytes (declared {declared}, read {read})")
        self.declared = declared
        self.read = read
        self.limit = limit


class PooledTransport:
    """Sends SDK-built requests to ``domain`` over keep-alive connections."""

    def __init__(
        self,
        domain: str,
        *,
        timeout: float,
        max_connections: int = 32,
        network: Network | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._domain = domain.rstrip("/")
        self._max_answer_bytes = max_answer_bytes
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_connections = max_connections
        self._network = network if network is not None else Network()
        self._session: ProxiedSession | None = None

    def _client(self) -> ProxiedSession:
        # Created on first use: an aiohttp session belongs to the running event loop.
        if self._session is None or self._session.closed:
            self._session = self._network.client_session(
                limit=self._max_connections, timeout=self._timeout
            )
        return self._session

    async def send_raw_response(
        self, request: BaseRequest, option: RequestOption, *, seconds: float | None = None
    ) -> Any:
        """An object whose ``raw`` is the answer.

        Not unmarshalled into the SDK's response models: the client reads the JSON
        once itself, and the SDK's reflective model building cost more CPU than the
        whole HTTP exchange.
        """
        holder = _RawHolder()
        holder.raw = await self.send_raw(request, option, seconds=seconds)
        return holder

    async def send_raw(
        self, request: BaseRequest, option: RequestOption, *, seconds: float | None = None
    ) -> RawResponse:
        """``seconds`` bounds this exchange instead of the session's timeout (uploads)."""
        headers = self._headers(request, option)
        data: bytes | aiohttp.FormData | None = None
        if request.files:
            # aiohttp writes the multipart Content-Type (with its boundary) itself.
            data = _form_data(request)
        elif request.body is not None and _is_form(headers):
            # OAuth endpoints outside the OpenAPI (RFC 6749/8628) take a form, not JSON.
            data = urllib.parse.urlencode(request.body).encode()
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif request.body is not None:
            data = marshal(request.body).encode()
            headers.setdefault("Content-Type", "application/json; charset=utf-8")
        url = self._url(request)
        if request.queries:
            query = urllib.parse.urlencode(request.queries, quote_via=urllib.parse.quote)
            url = f"{url}{'&' if '?' in url else '?'}{query}"
        async with self._client().request(
            request.http_method.name,
            # Encoded here (path parameters, the query): sent as written, not requoted.
            URL(url, encoded=True),
            headers=headers,
            data=data,
            timeout=aiohttp.ClientTimeout(total=seconds) if seconds else self._timeout,
        ) as response:
            raw = RawResponse()
            raw.status_code = response.status
            raw.headers = dict(response.headers)
            raw.content = await _read_capped(response, self._max_answer_bytes)
        return raw

    async def download(
        self, request: BaseRequest, option: RequestOption, *, max_bytes: int, seconds: float
    ) -> RawResponse:
        """A binary answer of at most ``max_bytes`` (raises :class:`BodyTooLarge`).

        A non-2xx answer is Feishu's JSON error envelope: read (at most 64 KiB) and
        returned for the caller to classify, like every other answer.
        """
        async with self._client().request(
            request.http_method.name,
            self._url(request),
            headers=self._headers(request, option),
            params=request.queries or None,
            timeout=aiohttp.ClientTimeout(total=seconds),
        ) as response:
            raw = RawResponse()
            raw.status_code = response.status
            raw.headers = dict(response.headers)
            if not 200 <= response.status < 300:
                raw.content = await _read_capped(response, _ERROR_BODY_LIMIT, truncate=True)
                return raw
            declared = response.content_length
            if declared is not None and declared > max_bytes:
                # Refused on the header alone: not one byte of the body is read, and the
                # connection is dropped rather than drained back into the pool.
                response.close()
                raise BodyTooLarge(declared=declared, read=0, limit=max_bytes)
            raw.content = await _read_capped(response, max_bytes)
        return raw

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, request: BaseRequest, option: RequestOption) -> dict[str, str]:
        headers = {**(request.headers or {}), "User-Agent": USER_AGENT, **(option.headers or {})}
        token = _bearer(request.token_types, option)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _url(self, request: BaseRequest) -> str:
        uri = str(request.uri)
        for key, value in (request.paths or {}).items():
            # Path parameters are ids from the outside world: encode everything.
            uri = uri.replace(":" + key, urllib.parse.quote(str(value or ""), safe=""))
        if uri.startswith(("https://", "http://")):
            # Our own absolute URL (Feishu's accounts host, for the device flow).
            return uri
        return f"{self._domain}{uri}"


class _RawHolder:
    raw: RawResponse


async def _read_capped(
    response: aiohttp.ClientResponse, limit: int, *, truncate: bool = False
) -> bytes:
    """At most ``limit`` bytes of the body: past it, cut off (``truncate``) or refused."""
    chunks: list[bytes] = []
    read = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        read += len(chunk)
        if read > limit:
            response.close()
            if truncate:
                chunks.append(chunk[: len(chunk) - (read - limit)])
                break
            raise BodyTooLarge(declared=response.content_length, read=read, limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _form_data(request: BaseRequest) -> aiohttp.FormData:
    """The request as lark-oapi's async transport sends an upload: the body's fields as
    form fields, each file as a part (with the file's ``name`` as its filename)."""
    form = aiohttp.FormData()
    fields = json.loads(marshal(request.body)) if request.body is not None else {}
    for name, value in (fields or {}).items():
        if value is not None:
            form.add_field(name, value if isinstance(value, str) else json.dumps(value))
    for name, stream in (request.files or {}).items():
        # From the start every time: a call retried after a token refresh sends it again.
        stream.seek(0)
        form.add_field(
            name,
            stream.read(),
            filename=str(getattr(stream, "name", "") or name),
            content_type="application/octet-stream",
        )
    return form


def marshal(body: Any) -> str:
    """``lark.JSON.marshal(body)``, the same text, without its deep copy of every model."""
    text: str = _ENCODER.encode(body)
    return text


class _CopyFreeEncoder(json.JSONEncoder):
    """lark-oapi's encoder, except that a model's fields are filtered into new dicts
    instead of deep-copied and then filtered in place (a reply's body: 19 calls of
    ``copy.deepcopy`` a message, for a result that is only read). Everything else
    (dates, bytes, sets) is left to lark-oapi's."""

    def default(self, o: Any) -> Any:
        if not isinstance(o, io.BufferedReader) and hasattr(o, "__dict__"):
            return _without_nulls(vars(o))
        return _LARK_ENCODER.default(o)


def _without_nulls(fields: dict[str, Any]) -> dict[str, Any]:
    # lark's filter_null: None values go, at this level and in nested dicts (not lists).
    return {
        key: _without_nulls(value) if isinstance(value, dict) else value
        for key, value in fields.items()
        if value is not None
    }


# One encoder for every call (json.dumps(cls=...) builds one each time); encode() keeps no
# state between calls.
_ENCODER = _CopyFreeEncoder(ensure_ascii=False)
_LARK_ENCODER: Any = Encoder()


def _is_form(headers: dict[str, str]) -> bool:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    return content_type.startswith("application/x-www-form-urlencoded")


def _bearer(token_types: set[Any] | None, option: RequestOption) -> str | None:
    """The token the option carries of a kind the request takes, as lark-oapi picks it
    with ``enable_set_token``: a request that takes both a tenant and a user token (most
    calendar, task and search endpoints) goes with whichever one the caller gave, so a
    call made with a person's user token is sent with theirs."""
    types = token_types or set()
    # lark-oapi's options are untyped: the tokens are str or None.
    candidates = (
        (AccessTokenType.TENANT, option.tenant_access_token),
        (AccessTokenType.APP, option.app_access_token),
        (AccessTokenType.USER, option.user_access_token),
    )
    for kind, token in candidates:
        if kind in types and token:
            return cast(str, token)
    return None
