"""The emulator's HTTP server: :class:`FakeFeishu`, its route table, and the middleware
that records every request, injects faults and checks the tenant token."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from .auth import AuthApi
from .cardkit import CARD_ROUTE, CardKitApi
from .core import TOKEN_PATH
from .faults import FaultControls
from .identity import APP, CALLER, Caller, bearer, require_scopes, rule_for
from .inbound import InboundApi
from .oauth import OAuthApi
from .registration import RegistrationApi
from .resources import RESOURCE_ROUTE
from .uploads import UploadsApi
from .wire import RECORDED, FakeError, RecordedRequest, parse_json
from .workspace import FakeWorkspace


class FakeFeishu(
    AuthApi, InboundApi, UploadsApi, CardKitApi, OAuthApi, RegistrationApi, FaultControls
):
    def __init__(
        self,
        app_id: str = "cli_test",
        app_secret: str = "secret",
        bot_open_id: str = "ou_bot",
        bot_name: str = "larkgate",
        *,
        clock: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
        name: str = "127.0.0.1",
    ) -> None:
        super().__init__(app_id, app_secret, bot_open_id, bot_name, clock=clock)
        # Served over TLS (``tls``, a server context) and named ``name`` in ``domain``: a
        # name only a proxy resolves, for the tests of corporate networks.
        self._tls = tls
        self._name = name
        self._init_oauth()
        self._init_registration()
        self.workspace = FakeWorkspace(self)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> Self:
        # Room for a 30 MB file upload (Feishu's limit) and its multipart framing.
        app = web.Application(middlewares=[self._middleware], client_max_size=40 * 1024 * 1024)
        for method, path, handler in [*self._routes(), *self._extra_routes]:
            app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=self._tls).start()
        return self

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def domain(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeFeishu is not started")
        return f"{'https' if self._tls else 'http'}://{self._name}:{self._port}"

    # -- routes ---------------------------------------------------------------------

    def _routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", TOKEN_PATH, self._tenant_token),
            ("GET", "/open-apis/bot/v3/info", self._bot_info),
            ("POST", "/open-apis/im/v1/messages", self._create_message),
            ("POST", "/open-apis/im/v1/messages/{message_id}/reply", self._reply_message),
            ("PATCH", "/open-apis/im/v1/messages/{message_id}", self._patch_message),
            # Before the one-message route, which would take "mget" for a message id.
            ("GET", "/open-apis/im/v1/messages/mget", self.workspace._mget_messages),
            ("GET", "/open-apis/im/v1/messages/{message_id}", self._get_message),
            ("GET", RESOURCE_ROUTE, self._get_resource),
            ("POST", "/open-apis/im/v1/images", self._upload_image),
            ("POST", "/open-apis/im/v1/files", self._upload_file),
            ("POST", "/open-apis/cardkit/v1/cards", self._create_card),
            ("PUT", CARD_ROUTE + "/elements/{element_id}/content", self._card_content),
            ("PATCH", CARD_ROUTE + "/settings", self._card_settings),
            ("PUT", CARD_ROUTE, self._update_card),
            ("GET", "/open-apis/application/v6/scopes", self._app_scopes),
            *self._oauth_routes(),
            *self._registration_routes(),
            *self.workspace.routes(),
        ]

    def add_routes(self, routes: list[tuple[str, str, Any]], *, public: bool = False) -> None:
        """Serve more routes on this domain (before ``start()``), e.g. the long-connection
        gateway of ``fakes.feishu_ws``; ``public`` ones need no tenant token."""
        if self._runner is not None:
            raise RuntimeError("add_routes() before start()")
        self._extra_routes.extend(routes)
        if public:
            self._public_paths.update(path for _, path, _ in routes)

    # -- middleware: record, faults, auth ---------------------------------------------

    def _identify(self, request: web.Request) -> Caller:
        """The app or the person behind the request's token, as the route accepts them
        (the rules and codes: :mod:`.identity`)."""
        token = bearer(request)
        rule = rule_for(request)
        if self._tenant_token_valid(token):
            if rule is not None and rule.user_only:
                raise FakeError(99991668)
            self._calling_app_is(token)
            return APP
        if token in self.user_grants or token.startswith("u-"):
            grant = self._live_grant(token)
            if rule is None:
                raise FakeError(99991663)
            require_scopes(rule, frozenset(grant.scope.split()))
            return Caller(grant.open_id)
        raise FakeError(99991663)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=CIMultiDictProxy(CIMultiDict(request.headers)),
            body=raw,
            json=parse_json(raw),
            peer=request.transport.get_extra_info("peername") if request.transport else None,
            time=time.monotonic(),
        )
        self.requests.append(recorded)
        if self.max_recorded is not None and len(self.requests) > self.max_recorded:
            del self.requests[: len(self.requests) - self.max_recorded]
        request[RECORDED] = recorded
        try:
            return await self._answer(request, handler)
        finally:
            self.revision += 1
            await self._notify()

    async def _answer(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = request[RECORDED].body
        await self._wait_if_held(request.method, request.path, body)
        for rule in self._slow:
            if rule.matches(request.method, request.path, body):
                rule.consume()
                await self._pause(rule.delay)
        fault = next((f for f in self._faults if f.matches(request.method, request.path)), None)
        if fault is not None:
            fault.consume()
            await self._pause(fault.delay)
            return self._fault_response(fault)
        try:
            if request.path not in self._public_paths:
                request[CALLER] = self._identify(request)
            return await handler(request)
        except FakeError as exc:
            return self._error(exc.code, exc.msg, http_status=exc.http_status, extra=exc.extra)
