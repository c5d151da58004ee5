"""The HTTP connector: ``http_get`` and ``http_post`` to allowlisted hosts, and its settings."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import http.cookiejar
import json
import logging
from collections.abc import Mapping
from typing import Annotated, Any

import httpx
from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from bot.engine import Tool

from ..base import (
    CommaList,
    Connector,
    ConnectorContext,
    ConnectorSettings,
    ConnectorStatus,
    ToolError,
    action,
)
from ..secret_masking import SecretMasker
from .headers import (
    DEFAULT_REQUEST_HEADERS,
    WRITE_REQUEST_HEADERS,
    HeaderPolicy,
    OperatorHeaders,
    check_name,
    check_value,
    is_framing,
    never_settable,
)
from .policy import BlockedDestination, HostPolicy, parse_rule, show_rule, system_resolver
from .rendering import render_observation
from .transport import PinnedTransport, send_checked

logger = logging.getLogger(__name__)


def _json_object(value: object) -> object:
    if isinstance(value, str):
        return json.loads(value) if value.strip() else {}
    return value


# Header values from the settings are credentials: SecretStr keeps them out of reprs.
ConfiguredHeaders = Annotated[dict[str, SecretStr], BeforeValidator(_json_object)]


def _check_configured(headers: Mapping[str, SecretStr], where: str) -> None:
    for name, value in headers.items():
        check_name(name)
        check_value(name, value.get_secret_value())
        if is_framing(name):
            raise ValueError(f"{where}: the {name} header is managed by the connector")


class HTTP(Connector):
    """HTTP GET and POST to allowlisted hosts."""

    name = "http"

    class Settings(ConnectorSettings):
        allowed_hosts: CommaList = Field(
            default_factory=list, description="HTTP_CONNECTOR_ALLOWED_HOSTS, comma separated"
        )
        timeout_seconds: float = Field(15.0, gt=0, le=300)
        max_response_bytes: int = Field(1_000_000, ge=1024, le=100_000_000)
        max_chars: int = Field(8000, ge=500, le=200_000)
        max_redirects: int = Field(5, ge=0, le=20)
        # Sent with every request to every allowed host (a JSON object in the environment).
        # The values count as secrets: masked (in their URL, JSON and HTML forms too) in
        # every result, errors included, and in the logs, so an echoing backend cannot
        # put them in the chat.
        headers: ConfiguredHeaders = Field(default_factory=dict)
        # Sent only to hosts an entry matches (allowed_hosts syntax), e.g.
        # {"api.example.com": {"X-Api-Key": "..."}}; secrets like ``headers``.
        host_headers: Annotated[dict[str, dict[str, SecretStr]], BeforeValidator(_json_object)] = (
            Field(default_factory=dict)
        )
        # The request headers the model may set (the write tool also takes Content-Type
        # and Idempotency-Key); any other is refused. Framing, identity, client-address
        # and method-override headers can never be allowed.
        allowed_request_headers: CommaList = Field(
            default_factory=lambda: list(DEFAULT_REQUEST_HEADERS)
        )
        user_agent: str = "larkgate-http-connector/0.1"

        @field_validator("allowed_hosts")
        @classmethod
        def _valid_rules(cls, value: list[str]) -> list[str]:
            for entry in value:
                parse_rule(entry)  # raises ValueError with the entry
            return value

        @field_validator("headers")
        @classmethod
        def _valid_headers(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
            _check_configured(value, "headers")
            return value

        @field_validator("host_headers")
        @classmethod
        def _valid_host_headers(
            cls, value: dict[str, dict[str, SecretStr]]
        ) -> dict[str, dict[str, SecretStr]]:
            for entry, headers in value.items():
                parse_rule(entry)
                _check_configured(headers, f"host_headers.{entry}")
            return value

        @field_validator("allowed_request_headers")
        @classmethod
        def _valid_request_headers(cls, value: list[str]) -> list[str]:
            for name in value:
                check_name(name)
                if never_settable(name):
                    raise ValueError(f"the model may never set the {name} header")
            return value

        @field_validator("user_agent")
        @classmethod
        def _valid_user_agent(cls, value: str) -> str:
            check_value("User-Agent", value)
            return value

        @model_validator(mode="after")
        def _hosts_of_host_headers_are_allowed(self) -> HTTP.Settings:
            for entry in self.host_headers:
                if entry not in self.allowed_hosts:
                    raise ValueError(f"host_headers: {entry!r} is not one of allowed_hosts")
            return self

    settings: Settings

    def __init__(self, settings: ConnectorSettings, context: ConnectorContext) -> None:
        super().__init__(settings, context)
        config = self.settings
        rules = [parse_rule(entry) for entry in config.allowed_hosts]
        self.policy = HostPolicy(rules, system_resolver)
        self._client: httpx.AsyncClient | None = None
        self.operator_headers = OperatorHeaders(
            _reveal(config.headers),
            [(parse_rule(entry), _reveal(h)) for entry, h in config.host_headers.items()],
        )
        configured = self.operator_headers.names
        self._read_headers = HeaderPolicy(config.allowed_request_headers, configured)
        self._write_headers = HeaderPolicy(
            [*config.allowed_request_headers, *WRITE_REQUEST_HEADERS], configured
        )
        self.masker = SecretMasker(self.operator_headers.values)

    async def start(self) -> None:
        everywhere = self.operator_headers.everywhere
        if everywhere and any(not rule.exact for rule in self.policy.rules):
            logger.warning(
                "HTTP connector: headers (%s) go to every allowed host, wildcard matches"
                " included; use host_headers to send credentials to one host only",
                ", ".join(everywhere),
            )
        self._http()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def tools(self) -> list[Tool]:
        """The actions, with a tool timeout just past the connector's own deadline, and
        the headers each may set in its schema."""
        budget = self.settings.timeout_seconds + 5
        policies = {"http_get": self._read_headers, "http_post": self._write_headers}
        tools = []
        for tool in super().tools():
            parameters = copy.deepcopy(dict(tool.parameters))
            policy = policies.get(tool.name)
            if policy is not None and "headers" in parameters.get("properties", {}):
                parameters["properties"]["headers"]["description"] = (
                    f"Request headers, only these: {policy.describe()}."
                )
            tools.append(dataclasses.replace(tool, timeout=budget, parameters=parameters))
        return tools

    async def check(self) -> ConnectorStatus:
        tools = len(self.tools())
        if not self.policy.rules:
            return ConnectorStatus(self.name, False, "no allowed hosts configured", tools)
        allowed = ", ".join(show_rule(rule) for rule in self.policy.rules)
        return ConnectorStatus(self.name, True, f"allowed hosts: {allowed}", tools)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=PinnedTransport(self.policy),
                timeout=httpx.Timeout(self.settings.timeout_seconds),
                follow_redirects=False,  # each hop is checked by send_checked
                trust_env=False,  # no proxies from the environment: they resolve names themselves
                # No cookie is ever kept: one user's session must not reach another's call.
                cookies=http.cookiejar.CookieJar(
                    policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
                ),
                headers={
                    "User-Agent": self.settings.user_agent,
                    # Only encodings decode_content can bound.
                    "Accept-Encoding": "gzip, deflate",
                },
            )
        return self._client

    @action(side_effect="read", timeout=60, max_result_chars=20_000)
    async def http_get(
        self,
        url: Annotated[str, Field(description="Absolute http(s) URL on an allowed host.")],
        params: Annotated[
            dict[str, str] | None, Field(description="Query parameters to add to the URL.")
        ] = None,
        headers: Annotated[
            dict[str, str] | None, Field(description="Request headers, e.g. Accept.")
        ] = None,
    ) -> str:
        """Fetch a URL with HTTP GET from an allowed host; returns the status and the body
        (JSON pretty-printed, HTML reduced to its text, binary summarised). A status of 400
        or more is reported as an error.
        """
        checked = self._read_headers.check(headers or {})
        return await self._request("GET", url, params=params, headers=checked)

    @action(side_effect="write", timeout=60, max_result_chars=20_000)
    async def http_post(
        self,
        url: Annotated[str, Field(description="Absolute http(s) URL on an allowed host.")],
        json_body: Annotated[
            Any, Field(description="JSON value to send as the body (application/json).")
        ] = None,
        body: Annotated[str | None, Field(description="Text body to send instead of JSON.")] = None,
        content_type: Annotated[
            str | None,
            Field(description="Content-Type of a text body; default text/plain; charset=utf-8."),
        ] = None,
        headers: Annotated[dict[str, str] | None, Field(description="Request headers.")] = None,
    ) -> str:
        """Send an HTTP POST to an allowed host with a JSON body (json_body) or a text body
        (body), not both; returns the status and the response body. A status of 400 or
        more is reported as an error.
        """
        if json_body is not None and body is not None:
            raise ToolError("give either json_body or body, not both")
        extra = self._write_headers.check(headers or {})
        has_type = any(name.lower() == "content-type" for name in extra)
        content: bytes | None = None
        if json_body is not None:
            content = json.dumps(json_body, ensure_ascii=False).encode("utf-8")
            default_type = "application/json"
        elif body is not None:
            content = body.encode("utf-8")
            default_type = content_type or "text/plain; charset=utf-8"
            try:
                check_value("Content-Type", default_type)
            except ValueError as exc:
                raise ToolError(f"{exc}; nothing was sent") from None
        if content is not None and not has_type:
            extra["Content-Type"] = default_type
        return await self._request("POST", url, headers=extra, content=content)

    # ---------------------------------------------------------------- the request

    async def _request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        headers: dict[str, str],
        content: bytes | None = None,
    ) -> str:
        """The exchange, with every configured secret masked in what comes back."""
        try:
            return self.masker.mask(
                await self._exchange(method, url, params=params, headers=headers, content=content)
            )
        except ToolError as exc:
            raise ToolError(self.masker.mask(str(exc))) from exc

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None,
        headers: dict[str, str],
        content: bytes | None,
    ) -> str:
        try:
            target = httpx.URL(url.strip())
            if params:
                target = target.copy_merge_params(params)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise ToolError(f"invalid URL {url!r}: {exc}") from exc
        client = self._http()
        try:
            request = client.build_request(method, target, headers=headers, content=content)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise ToolError(f"invalid request: {exc}") from exc
        seconds = self.settings.timeout_seconds
        try:
            async with asyncio.timeout(seconds):
                return await self._send(client, request)
        except TimeoutError as exc:
            raise ToolError(f"{method} {target} took longer than {seconds:g} s") from exc
        except BlockedDestination as exc:
            raise ToolError(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"{method} {target} timed out after {seconds:g} s") from exc
        except httpx.ConnectError as exc:
            raise ToolError(f"cannot connect to {target.host}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"{method} {target} failed: {type(exc).__name__}: {exc}") from exc

    async def _send(self, client: httpx.AsyncClient, request: httpx.Request) -> str:
        config = self.settings
        exchange = await send_checked(
            client,
            request,
            self.policy,
            max_redirects=config.max_redirects,
            max_bytes=config.max_response_bytes,
            prepare=self.operator_headers.apply,
        )
        return render_observation(
            exchange,
            max_chars=config.max_chars,
            max_response_bytes=config.max_response_bytes,
            masker=self.masker,
        )


def _reveal(headers: Mapping[str, SecretStr]) -> dict[str, str]:
    return {name: value.get_secret_value() for name, value in headers.items()}


__all__ = ["HTTP"]
