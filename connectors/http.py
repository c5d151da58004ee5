"""HTTP requests to an allowlist of hosts, with the SSRF defences done at connect time.

Where a request may go:

- Only ``http`` and ``https`` URLs, and only to hosts matching ``allowed_hosts``:
  exact names or IP literals (``api.example.com``, ``127.0.0.1:8080``, ``[::1]:9000``),
  ``*.example.com`` for any subdomain (not ``example.com`` itself), or ``*`` for any
  host. An entry with a port allows only that port; without one, any port.
- Loopback, private, link-local, multicast, reserved, shared (CGNAT) and unspecified
  addresses, IPv4 and IPv6 (IPv4-mapped and NAT64 forms included) are refused unless
  the URL's host matched an exact entry: wildcards never reach them.
- The check happens where the socket is opened. A custom httpcore network backend
  resolves the host itself, checks every address it got, and connects to one of
  those checked addresses (TLS still verifies the host name). Nothing resolves the
  name a second time, so DNS rebinding cannot swap the address after the check, and
  decimal, octal or hex IPv4 spellings are caught by what they resolve to. Proxies
  from the environment are ignored (a proxy would resolve the name itself).
- Redirects are followed (up to ``max_redirects``, default 5) only when the target
  passes the same rules, checked before each hop; otherwise the call fails and names
  the target. With ``max_redirects = 0`` the 3xx answer itself is returned, Location
  included. Authorization is dropped on a cross-origin hop (httpx's redirect rules).
- No cookie is ever stored: one user's session must not leak into another's call.

What a request may carry, and what comes back:

- The model may set only the request headers ``allowed_request_headers`` names
  (default: content negotiation and conditional or partial requests; the write tool
  also takes ``Content-Type`` and ``Idempotency-Key``); any other header is refused
  with the list, and nothing is sent (see ``http_headers.py``).
- Configured headers carry credentials: ``headers`` go to every allowed host (and follow
  a redirect only to the same origin), ``host_headers`` only to the hosts their entry
  matches (set again on each redirect hop, so a key never follows a redirect to another
  host). Their values, and their
  URL-encoded, JSON-escaped and HTML forms, are masked (``***``) in everything the
  tools return, errors included, so a backend echoing them cannot put them in the
  chat. The tools never show the request headers they sent.

The body is read as a stream and reading stops at ``max_response_bytes``. An HTTP
status of 400 or more is a ToolError carrying the status and a short excerpt.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import html.parser
import http.cookiejar
import ipaddress
import json
import logging
import socket
import ssl
import typing
import urllib.parse
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Annotated, Any

import httpcore
import httpx
from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from bot.engine import Tool

from .base import (
    CommaList,
    Connector,
    ConnectorContext,
    ConnectorSettings,
    ConnectorStatus,
    ToolError,
    action,
)
from .http_headers import (
    DEFAULT_REQUEST_HEADERS,
    WRITE_REQUEST_HEADERS,
    HeaderPolicy,
    check_name,
    check_value,
    is_framing,
    never_settable,
)
from .secret_masking import SecretMasker

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

EXCERPT_CHARS = 300
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_TEXT_SUFFIXES = ("+json", "+xml")


class BlockedDestination(Exception):
    """A request that would reach an address the policy does not allow."""


# ---------------------------------------------------------------- the host policy


def normalize_host(host: str) -> str:
    """Lower-case ASCII (IDNA) form without brackets or a trailing dot; IPs in canonical form."""
    text = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    try:
        return text.encode("idna").decode("ascii")
    except UnicodeError:
        return text


@dataclasses.dataclass(frozen=True, slots=True)
class HostRule:
    """One ``allowed_hosts`` entry."""

    pattern: str  # a normalized host, "*.suffix" or "*"
    port: int | None

    @property
    def exact(self) -> bool:
        return not self.pattern.startswith("*")

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.pattern == "*":
            return True
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:])
        return host == self.pattern


def parse_rule(entry: str) -> HostRule:
    """``host``, ``host:port``, ``[v6]:port``, ``*.suffix`` or ``*``; a URL is accepted too."""
    text = entry.strip()
    if "://" in text:
        parsed = urllib.parse.urlsplit(text)
        text = parsed.netloc
    if not text:
        raise ValueError("empty host entry")
    port: int | None = None
    host = text
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad host entry {entry!r}")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"bad port in host entry {entry!r}")
    if host == "*":
        return HostRule("*", port)
    if host.startswith("*."):
        suffix = normalize_host(host[2:])
        if not suffix or "*" in suffix:
            raise ValueError(f"bad wildcard in host entry {entry!r}")
        return HostRule("*." + suffix, port)
    if "*" in host or "/" in host or not host:
        raise ValueError(f"bad host entry {entry!r}: use host, host:port or *.domain")
    return HostRule(normalize_host(host), port)


def is_public_address(address: IPAddress) -> bool:
    """Whether ``address`` is a globally routable unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None and not is_public_address(address.sixtofour):
            return False
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
    )


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class HostPolicy:
    """The allowlist and the address rules, shared by the URL checks and the socket layer."""

    def __init__(self, rules: Iterable[HostRule], resolver: Resolver) -> None:
        self.rules = list(rules)
        self.resolver = resolver

    def rule_for(self, host: str, port: int) -> HostRule | None:
        """The best matching rule: an exact one wins over wildcards."""
        matching = [rule for rule in self.rules if rule.matches(host, port)]
        exact = [rule for rule in matching if rule.exact]
        candidates = exact or matching
        return candidates[0] if candidates else None

    def check_url(self, url: httpx.URL) -> None:
        """Refuse a URL by scheme, allowlist, or a literal address it may not reach."""
        if url.scheme not in ("http", "https"):
            raise ToolError(f"only http and https URLs are allowed, not {url.scheme or 'none'!r}")
        if not url.host:
            raise ToolError(f"the URL {url} has no host")
        host = normalize_host(url.raw_host.decode("ascii"))
        port = url.port or (443 if url.scheme == "https" else 80)
        rule = self.rule_for(host, port)
        if rule is None:
            allowed = ", ".join(_show_rule(r) for r in self.rules) or "none"
            raise ToolError(f"{_hostport(host, port)} is not an allowed host (allowed: {allowed})")
        literal = _ip_literal(host)
        if literal is not None and not rule.exact and not is_public_address(literal):
            raise ToolError(_private_refusal(host, literal))

    async def addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses to connect to for ``host:port``; BlockedDestination otherwise."""
        name = normalize_host(host)
        rule = self.rule_for(name, port)
        if rule is None:
            raise BlockedDestination(f"{_hostport(name, port)} is not an allowed host")
        literal = _ip_literal(name)
        if literal is not None:
            resolved = [str(literal)]
        else:
            try:
                resolved = await self.resolver(name, port)
            except OSError as exc:
                raise httpcore.ConnectError(f"cannot resolve {name}: {exc}") from exc
            if not resolved:
                raise httpcore.ConnectError(f"cannot resolve {name}: no addresses")
        if not rule.exact:
            for text in resolved:
                address = ipaddress.ip_address(text.split("%")[0])
                if not is_public_address(address):
                    raise BlockedDestination(_private_refusal(name, address))
        return resolved


def _private_refusal(host: str, address: IPAddress) -> str:
    what = f"{host} is" if str(address) == host else f"{host} resolves to {address},"
    return (
        f"refused: {what} a loopback, private, link-local or otherwise non-public address;"
        " only a host listed exactly in the allowed hosts may reach such addresses"
    )


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _show_rule(rule: HostRule) -> str:
    if rule.port is None:
        return rule.pattern
    return _hostport(rule.pattern, rule.port)


async def system_resolver(host: str, port: int) -> list[str]:
    """Every TCP address of ``host``, from the system resolver (which also reads /etc/hosts)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    seen: list[str] = []
    for _family, _type, _proto, _canonical, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in seen:
            seen.append(address)
    return seen


# ---------------------------------------------------------------- the pinned transport


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to addresses the policy checked, never re-resolving."""

    def __init__(self, policy: HostPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._policy.addresses(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedDestination("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore exceptions as httpx ones (most specific first), as httpx's own transport does.
_EXCEPTIONS: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


def _as_httpx(exc: Exception) -> Exception:
    for source, target in _EXCEPTIONS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> typing.AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            await closer()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The verifying TLS context, built once: loading the CA bundle costs tens of ms."""
    return httpx.create_ssl_context()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose sockets go through the policy."""

    def __init__(self, policy: HostPolicy, *, max_connections: int = 20) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections // 2,
            keepalive_expiry=5.0,
            network_backend=_PinnedBackend(policy),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


# ---------------------------------------------------------------- rendering


class _HTMLText(html.parser.HTMLParser):
    """The readable text of an HTML page: no scripts or styles, blocks on their own lines."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"}
        | {"header", "footer", "table", "ul", "ol", "pre", "blockquote", "title"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def html_to_text(markup: str) -> str:
    parser = _HTMLText()
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # malformed markup: show what was gathered
        pass
    return parser.text()


def _is_text(content_type: str, sample: bytes) -> bool:
    media = content_type.split(";")[0].strip().lower()
    if media.startswith(_TEXT_TYPES) or media.endswith(_TEXT_SUFFIXES):
        return True
    if media in ("", "application/x-www-form-urlencoded"):
        return b"\x00" not in sample[:1024]
    return False


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def render_body(
    body: bytes,
    content_type: str,
    encoding: str | None,
    limit: int,
    clean: Callable[[str], str] | None = None,
) -> str:
    """The body for the model: JSON pretty (bounded), HTML as text, binary summarised.

    ``clean`` (masking secrets) sees the decoded text and the rendered text before
    either is cut: cutting first could leave the beginning of a secret in view.
    """
    media = content_type.split(";")[0].strip().lower()
    if not _is_text(content_type, body):
        head = body[:16].hex(" ")
        return f"[binary body: {media or 'unknown type'}, {len(body)} bytes; starts {head}]"
    scrub = clean or (lambda text: text)
    text = scrub(body.decode(encoding or "utf-8", errors="replace"))
    if "json" in media or (not media and text.lstrip()[:1] in ("{", "[")):
        try:
            document = json.loads(text)
        except ValueError:
            pass
        else:
            pretty = scrub(json.dumps(document, indent=2, ensure_ascii=False))
            if len(pretty) > limit:
                pretty = scrub(json.dumps(document, ensure_ascii=False, separators=(",", ":")))
            return _cut(pretty, limit)
    if media in ("text/html", "application/xhtml+xml"):
        text = scrub(html_to_text(text))
    return _cut(text.strip(), limit)


def decode_content(raw: bytes, content_encoding: str, limit: int) -> tuple[bytes, bool]:
    """``raw`` decompressed (gzip, deflate) to at most ``limit`` bytes; whether it was cut.

    A body cut short on the wire decompresses as far as it goes. An encoding we did not
    ask for is left as it is (and shows up as binary).
    """
    data, cut = raw, False
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        if coding in ("gzip", "x-gzip"):
            wbits = 16 + zlib.MAX_WBITS
        elif coding == "deflate":
            # zlib-wrapped as the RFC says, or raw deflate as some servers send.
            wbits = zlib.MAX_WBITS if data[:1] == b"\x78" else -zlib.MAX_WBITS
        else:
            return data, cut
        decompressor = zlib.decompressobj(wbits)
        try:
            output = decompressor.decompress(data, limit)
        except zlib.error:
            return data, cut
        cut = cut or bool(decompressor.unconsumed_tail)
        data = output
    return data, cut


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


# ---------------------------------------------------------------- settings and connector


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
        # The values count as secrets: masked in every result and in the logs.
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
        self._everywhere = _reveal(config.headers)
        # Wildcard entries first, so an exact entry's value wins where both match.
        per_host = [(parse_rule(entry), _reveal(h)) for entry, h in config.host_headers.items()]
        self._per_host = sorted(per_host, key=lambda pair: pair[0].exact)
        configured = [*self._everywhere, *(name for _, h in self._per_host for name in h)]
        self._configured = {name.lower() for name in configured}
        self._read_headers = HeaderPolicy(config.allowed_request_headers, configured)
        self._write_headers = HeaderPolicy(
            [*config.allowed_request_headers, *WRITE_REQUEST_HEADERS], configured
        )
        self.masker = SecretMasker(
            [*self._everywhere.values(), *(v for _, h in self._per_host for v in h.values())]
        )

    async def start(self) -> None:
        if self._everywhere and any(not rule.exact for rule in self.policy.rules):
            logger.warning(
                "HTTP connector: headers (%s) go to every allowed host, wildcard matches"
                " included; use host_headers to send credentials to one host only",
                ", ".join(self._everywhere),
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
        allowed = ", ".join(_show_rule(rule) for rule in self.policy.rules)
        return ConnectorStatus(self.name, True, f"allowed hosts: {allowed}", tools)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=PinnedTransport(self.policy),
                timeout=httpx.Timeout(self.settings.timeout_seconds),
                follow_redirects=False,  # each hop is checked by _send
                trust_env=False,  # no proxies from the environment: they resolve names themselves
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

    def _with_configured_headers(self, request: httpx.Request, *, same_origin: bool) -> None:
        """Give ``request`` exactly the configured headers its host gets, on every hop: a
        redirect must not carry one host's key to another. ``headers`` follow a redirect
        only to the same origin (as httpx does with Authorization); ``host_headers`` go to
        the hosts they name."""
        for name in self._configured:
            request.headers.pop(name, None)
        if same_origin:
            request.headers.update(self._everywhere)
        host, port = _host_and_port(request.url)
        for rule, headers in self._per_host:
            if rule.matches(host, port):
                request.headers.update(headers)

    async def _send(self, client: httpx.AsyncClient, request: httpx.Request) -> str:
        redirects: list[str] = []
        origin = (request.url.scheme, *_host_and_port(request.url))
        while True:
            self.policy.check_url(request.url)
            here = (request.url.scheme, *_host_and_port(request.url))
            self._with_configured_headers(request, same_origin=here == origin)
            response = await client.send(request, stream=True)
            try:
                next_request = response.next_request
                # max_redirects = 0: the redirect itself is the answer (with its Location).
                if next_request is not None and self.settings.max_redirects > 0:
                    if len(redirects) >= self.settings.max_redirects:
                        raise ToolError(
                            f"too many redirects (more than {self.settings.max_redirects});"
                            f" last to {next_request.url}"
                        )
                    try:
                        self.policy.check_url(next_request.url)
                    except ToolError as exc:
                        raise ToolError(
                            f"{request.url} redirected to {next_request.url}, which is not"
                            f" allowed: {exc}"
                        ) from exc
                    redirects.append(str(request.url))
                    request = next_request
                    continue
                body, truncated = await self._read_capped(response)
            finally:
                await response.aclose()
            return self._render(request, response, body, truncated, redirects)

    async def _read_capped(self, response: httpx.Response) -> tuple[bytes, bool]:
        """The body, reading at most ``max_response_bytes`` off the wire and, once
        decompressed, keeping at most as many (so a gzip bomb stays small)."""
        cap = self.settings.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        truncated = False
        async for chunk in response.aiter_raw():
            if size + len(chunk) > cap:
                chunks.append(chunk[: cap - size])
                truncated = True
                break
            chunks.append(chunk)
            size += len(chunk)
        raw = b"".join(chunks)
        body, cut = decode_content(raw, response.headers.get("content-encoding", ""), cap)
        return body, truncated or cut

    def _render(
        self,
        request: httpx.Request,
        response: httpx.Response,
        body: bytes,
        truncated: bool,
        redirects: list[str],
    ) -> str:
        """The observation: status, URL, type and size, and the body; never the request's
        headers. The body is masked before it is cut; the rest by ``_request``."""
        content_type = response.headers.get("content-type", "")
        clean = functools.partial(self.masker.mask, cut=truncated)
        text = render_body(
            body, content_type, response.charset_encoding, self.settings.max_chars, clean
        )
        status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        if response.status_code >= 400:
            raise ToolError(f"{status} from {request.method} {request.url}: {_excerpt(text)}")
        size = f"{len(body)} bytes" + (
            f" (cut at max_response_bytes={self.settings.max_response_bytes})" if truncated else ""
        )
        lines = [f"{status} · {request.method} {request.url}"]
        if redirects:
            lines.append("redirected from: " + " -> ".join(redirects))
        lines.append(f"content-type: {content_type or 'none'} · {size}")
        if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
            lines.append(f"location: {response.headers['location']}")
        lines.append("")
        lines.append(text if text else "(empty body)")
        return "\n".join(lines)


def _host_and_port(url: httpx.URL) -> tuple[str, int]:
    host = normalize_host(url.raw_host.decode("ascii"))
    return host, url.port or (443 if url.scheme == "https" else 80)


def _reveal(headers: Mapping[str, SecretStr]) -> dict[str, str]:
    return {name: value.get_secret_value() for name, value in headers.items()}


__all__ = [
    "HTTP",
    "BlockedDestination",
    "HostPolicy",
    "HostRule",
    "PinnedTransport",
    "decode_content",
    "html_to_text",
    "is_public_address",
    "normalize_host",
    "parse_rule",
    "render_body",
    "system_resolver",
]
