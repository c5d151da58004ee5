"""Message resources: the files in messages people sent, served as Feishu serves them.

``GET /open-apis/im/v1/messages/{message_id}/resources/{file_key}?type=image|file``
answers 200 with the bytes, ``Content-Type``, ``Content-Length`` and, when the file has a
name, ``Content-Disposition: attachment; filename="..."`` (plus ``filename*=UTF-8''...``
for a name that is not ASCII). Refusals are HTTP 400 with Feishu's JSON, checked in order:

- ``type`` is not ``image``/``file``: 234001;
- the message is unknown or recalled: 234003 ("File not in msg.");
- a sticker or a card: 234043 (Feishu documents stickers as not downloadable without
  naming the code; 234043 is the code it names for the other messages it serves no files
  for, cards and forwarded messages);
- a forwarded message's own id: 234003. Its files are served through the merge_forward
  it came in, as Feishu does (larksuite/cli and other bots download them that way);
- the message's chat is a workspace chat the bot is not in: 234004;
- the key is not in the message (nor, for a merge_forward, in what it forwards): 234003;
- ``type`` is not the file's (an image fetched as ``file``): 234001;
- over Feishu's 100 MB: 234037.

Tests register files with ``add_resource`` (or the ``add_*_message`` helpers of
``inbound``) and see every answer with a body in ``FakeResource.served``
(:class:`ServedBody`: the Content-Length sent, bytes written, whether the client left
early). ``resource_fault(message_id, key, mode=...)`` makes the next answer misbehave:

- ``"hold_body"``: the true Content-Length, then no body until the client hangs up (at
  most ``hold_body_s``): a client that reads the body before judging the length hangs;
- ``"chunked"``: no Content-Length, the whole body in chunks;
- ``"understated"``: ``Content-Length: claimed`` (fewer bytes than the file has; only
  those are sent, as HTTP framing allows no more);
- ``"overstated"``: ``Content-Length: claimed`` (more than the file has), the file, then
  the connection is closed.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from dataclasses import dataclass, field

from aiohttp import web

from bot.feishu.errors import FEISHU_DOWNLOAD_LIMIT

from .messages import MessagesApi
from .wire import FakeError

RESOURCE_ROUTE = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
FAULT_MODES = ("hold_body", "chunked", "understated", "overstated")
_CHUNK = 64 * 1024
_NO_FILES = ("sticker", "interactive")


@dataclass
class ServedBody:
    """One answer that carried a file: how far it got."""

    declared: int | None  # the Content-Length sent; None when chunked
    bytes_sent: int = 0
    complete: bool = False  # every byte written and the body ended
    client_left: bool = False  # the client hung up before the end


@dataclass
class FakeResource:
    message_id: str
    key: str
    data: bytes = field(repr=False)
    kind: str  # "image" | "file": the ``type`` it is downloaded with
    content_type: str = "application/octet-stream"
    file_name: str | None = None
    content_disposition: str | None = None  # sent as it is, instead of one from file_name
    served: list[ServedBody] = field(default_factory=list)


@dataclass
class ResourceFault:
    message_id: str | None  # None: any message
    key: str | None  # None: any key
    mode: str
    claimed: int | None = None  # the Content-Length of "understated" / "overstated"
    times: int | None = 1  # None: every time

    def matches(self, message_id: str, key: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return self.message_id in (None, message_id) and self.key in (None, key)


class ResourcesApi(MessagesApi):
    def add_resource(
        self,
        message_id: str,
        key: str,
        data: bytes,
        *,
        kind: str | None = None,
        content_type: str | None = None,
        file_name: str | None = None,
        content_disposition: str | None = None,
    ) -> FakeResource:
        """Serve ``data`` as file ``key`` of message ``message_id``.

        ``kind`` defaults to "image" for image keys (``img_...``) and image messages,
        "file" otherwise; ``content_disposition`` replaces the header built from
        ``file_name`` (to send a hostile one).
        """
        message = self.message_by_id.get(message_id)
        if kind is None:
            is_image = key.startswith("img_") or (
                message is not None and message.msg_type == "image"
            )
            kind = "image" if is_image else "file"
        if kind not in ("image", "file"):
            raise ValueError(f"kind must be 'image' or 'file', not {kind!r}")
        default_type = "image/png" if kind == "image" else "application/octet-stream"
        resource = FakeResource(
            message_id,
            key,
            data,
            kind,
            content_type or default_type,
            file_name,
            content_disposition,
        )
        self.resources[(message_id, key)] = resource
        return resource

    def resource_fault(
        self,
        message_id: str | None = None,
        key: str | None = None,
        *,
        mode: str,
        claimed: int | None = None,
        times: int | None = 1,
    ) -> None:
        """Make the next ``times`` answers for that file misbehave (see the module doc)."""
        if mode not in FAULT_MODES:
            raise ValueError(f"mode must be one of {FAULT_MODES}, not {mode!r}")
        if mode in ("understated", "overstated") and claimed is None:
            raise ValueError(f"mode {mode!r} needs claimed=<the Content-Length to send>")
        self._resource_faults.append(ResourceFault(message_id, key, mode, claimed, times))

    async def _get_resource(self, request: web.Request) -> web.StreamResponse:
        message_id = request.match_info["message_id"]
        key = request.match_info["file_key"]
        kind = request.query.get("type")
        if kind not in ("image", "file"):
            raise FakeError(234001, "Invalid request param. type must be image or file")
        resource = self._resource_for(message_id, key)
        if resource.kind != kind:
            raise FakeError(234001, f"Invalid request param. {key} is not of type {kind}")
        if len(resource.data) > FEISHU_DOWNLOAD_LIMIT:
            raise FakeError(234037, "fake: the file is over the download limit of 100 MB")
        return await self._serve(request, resource, self._take_fault(message_id, key))

    def _resource_for(self, message_id: str, key: str) -> FakeResource:
        message = self.message_by_id.get(message_id)
        if message is None or message.deleted:
            raise FakeError(234003)
        if message.msg_type in _NO_FILES:
            raise FakeError(234043, f"fake: no files can be downloaded from a {message.msg_type}")
        if message.upper_message_id:
            raise FakeError(234003)  # a forwarded message: only through its forward
        chat = self.workspace.chats.get(message.chat_id)
        if chat is not None and not chat.bot_is_member:
            raise FakeError(234004)
        for holder in (message, *self.forwarded(message)):
            resource = self.resources.get((holder.message_id, key))
            if resource is not None and holder.msg_type not in _NO_FILES:
                return resource
        raise FakeError(234003)

    def _take_fault(self, message_id: str, key: str) -> ResourceFault | None:
        fault = next((f for f in self._resource_faults if f.matches(message_id, key)), None)
        if fault is not None and fault.times is not None:
            fault.times -= 1
        return fault

    async def _serve(
        self, request: web.Request, resource: FakeResource, fault: ResourceFault | None
    ) -> web.StreamResponse:
        mode = fault.mode if fault is not None else None
        response = web.StreamResponse(headers=_file_headers(resource, self._log_id()))
        if mode == "chunked":
            response.enable_chunked_encoding()
        elif mode in ("understated", "overstated") and fault is not None:
            response.content_length = fault.claimed
        else:
            response.content_length = len(resource.data)
        if mode == "overstated":
            response.force_close()  # the body ends early: the client sees the close
        served = ServedBody(response.content_length)
        resource.served.append(served)
        await response.prepare(request)
        if mode == "hold_body":
            await self._hold_until_client_leaves(request, served)
            return response
        try:
            for start in range(0, len(resource.data), _CHUNK):
                chunk = resource.data[start : start + _CHUNK]
                await response.write(chunk)
                served.bytes_sent += len(chunk)
            await response.write_eof()
            served.complete = True
        except ConnectionError:
            served.client_left = True
        return response

    async def _hold_until_client_leaves(self, request: web.Request, served: ServedBody) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hold_body_s
        while loop.time() < deadline and not self._closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                served.client_left = True
                return
            await asyncio.sleep(0.01)


def _file_headers(resource: FakeResource, log_id: str) -> dict[str, str]:
    headers = {"Content-Type": resource.content_type, "X-Tt-Logid": log_id}
    disposition = resource.content_disposition or _disposition(resource.file_name)
    if disposition:
        headers["Content-Disposition"] = disposition
    return headers


def _disposition(file_name: str | None) -> str:
    if not file_name:
        return ""
    if file_name.isascii():
        escaped = file_name.replace("\\", "\\\\").replace('"', '\\"')
        return f'attachment; filename="{escaped}"'
    ascii_name = file_name.encode("ascii", "replace").decode().replace('"', "'")
    encoded = urllib.parse.quote(file_name, safe="")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{encoded}"
