"""How larkgate reaches the outside: one trust store and the environment's proxies.

Every outbound HTTP client of the bot is made from a :class:`Network`, so that all of them
(the Feishu OpenAPI with uploads, downloads and OAuth token calls, the long connection,
the one-scan registration, the model with vision and transcription, MCP over HTTP) honour
the same settings a company network needs:

- **Proxies**: ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY``, upper or lower case (the
  lower-case one wins, as with curl), read as Python's ``urllib`` reads them. An
  ``https://`` target goes through a CONNECT tunnel (TLS end to end with Feishu), an
  ``http://`` one in absolute form. Credentials in the proxy URL become
  ``Proxy-Authorization``; they are never printed (:func:`redacted`).
- **Trust**: the system's CA roots, or the file/folder ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
  names instead (as OpenSSL reads them), plus ``LARKGATE_CA_BUNDLE``: a company CA that
  larkgate alone should trust, added to those roots (not replacing them, so hosts outside
  the proxy keep working).

aiohttp's own ``trust_env`` is not used: it reads the proxy variables and ``~/.netrc`` on
a worker thread for every request (two thread hops a call on the reply path), and a
``.netrc`` entry for a Feishu host would add Basic credentials that clash with our Bearer
token. The environment is read once here, when the ``Network`` is made, and each
request is given its proxy. httpx clients (the model, MCP) read the same variables
themselves when they are made (``trust_env``) and get the same SSL context.

Building an SSL context loads the CA bundle (tens of ms of CPU), so each trust setting
has one context for the process.

The ``http_get``/``http_post`` connector is not made here: it connects only to the
addresses its SSRF rules checked (a proxy would resolve names itself, and could reach
what those rules refuse), so it never uses a proxy (see docs/architecture.md).
"""

from __future__ import annotations

import base64
import functools
import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpx2
from yarl import URL

CA_BUNDLE_VARIABLE = "LARKGATE_CA_BUNDLE"

# The variables a corporate network sets, which an env file may hold too
# (``export_from_env_file``); the libraries read them from the process environment.
NETWORK_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)

_UPPER_NETWORK_VARIABLES = frozenset(name.upper() for name in NETWORK_VARIABLES)


class NetworkSettingError(ValueError):
    """A proxy or CA setting that cannot be used, with what to fix."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """Where a request goes first: the proxy's URL (no credentials) and, when it has
    some, the ``Proxy-Authorization`` value they make (Basic, RFC 7617, UTF-8)."""

    url: URL
    authorization: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return str(self.url)


def _environment_proxies() -> dict[str, str]:
    # getproxies_environment, not getproxies: on macOS and Windows the latter adds the
    # system's proxy settings, which httpx and the deployment docs do not follow.
    return urllib.request.getproxies_environment()


@dataclass(frozen=True)
class Network:
    """The outbound settings of this process: ``ca_bundle`` is ``LARKGATE_CA_BUNDLE``.

    The proxies are the environment's when the ``Network`` is made (``proxies`` replaces
    them, in ``urllib.request.getproxies()``'s shape: ``{"https": URL, "no": hosts}``).
    """

    ca_bundle: Path | None = None
    proxies: Mapping[str, str] = field(default_factory=_environment_proxies)
    _by_origin: dict[tuple[str, str], Proxy | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The context every client verifies servers with (shared; never modify it)."""
        return trust_context(
            str(self.ca_bundle) if self.ca_bundle else None,
            os.environ.get("SSL_CERT_FILE") or None,
            os.environ.get("SSL_CERT_DIR") or None,
        )

    def check(self) -> None:
        """Raise :class:`NetworkSettingError` for a setting no request could use (a proxy
        that is not ``http://``, a CA file that is not one), before any request is made."""
        for scheme in ("http", "https"):
            configured = self.proxies.get(scheme)
            if configured:
                parse_proxy(configured)
        self.ssl_context  # noqa: B018  # loads (and so checks) the CA files

    def proxy_for(self, url: str | URL) -> Proxy | None:
        """The proxy a request to ``url`` goes through, or None (direct)."""
        target = url if isinstance(url, URL) else URL(url)
        scheme = _HTTP_SCHEMES.get(target.scheme, target.scheme)
        host = target.host or ""
        key = (scheme, host)
        if key not in self._by_origin:
            self._by_origin[key] = self._resolve(scheme, host)
        return self._by_origin[key]

    def _resolve(self, scheme: str, host: str) -> Proxy | None:
        proxies = self.proxies
        configured = proxies.get(scheme)
        if not configured or (host and _bypassed(host, proxies)):
            return None
        return parse_proxy(configured)

    def client_session(
        self, *, limit: int = 100, timeout: aiohttp.ClientTimeout | None = None, **options: Any
    ) -> ProxiedSession:
        """An aiohttp session that trusts :attr:`ssl_context` and sends each request
        through its proxy. Create it inside the event loop that will use it."""
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context, limit=limit),
            timeout=timeout or aiohttp.ClientTimeout(total=30),
            # No API we call sets cookies: don't store or filter any on every call.
            cookie_jar=aiohttp.DummyCookieJar(),
            **options,
        )
        return ProxiedSession(session, self)

    def httpx_options(self) -> dict[str, Any]:
        """What an httpx client needs to trust what this network trusts; httpx reads the
        proxy variables itself (``trust_env``)."""
        return {"verify": self.ssl_context, "trust_env": True}


def model_http_client(network: Network) -> httpx2.AsyncClient:
    """The HTTP client of a model endpoint (the OpenAI SDK's): its defaults (connection
    limits, redirects, timeouts), with the network's proxies and CA."""
    import openai  # the engine's dependency; only the composition needs it here

    client: httpx2.AsyncClient = openai.DefaultAsyncHttpxClient(**network.httpx_options())
    return client


class ProxiedSession:
    """An aiohttp session whose requests go through the network's proxy for their host."""

    def __init__(self, session: aiohttp.ClientSession, network: Network) -> None:
        self.session = session
        self.network = network

    @property
    def closed(self) -> bool:
        return self.session.closed

    def request(self, method: str, url: str | URL, **options: Any) -> Any:
        """``session.request`` with the proxy for ``url`` (an async context manager)."""
        return self.session.request(method, url, **self._through(url), **options)

    def post(self, url: str | URL, **options: Any) -> Any:
        return self.request("POST", url, **options)

    def get(self, url: str | URL, **options: Any) -> Any:
        return self.request("GET", url, **options)

    def ws_connect(self, url: str | URL, **options: Any) -> Any:
        return self.session.ws_connect(url, **self._through(url), **options)

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> ProxiedSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _through(self, url: str | URL) -> dict[str, Any]:
        proxy = self.network.proxy_for(url)
        if proxy is None:
            return {}
        # Credentials as a header (aiohttp deprecates its BasicAuth): it goes on the
        # CONNECT, or on an absolute-form request, never to the target.
        if proxy.authorization is None:
            return {"proxy": proxy.url}
        return {"proxy": proxy.url, "proxy_headers": {"Proxy-Authorization": proxy.authorization}}


def parse_proxy(value: str) -> Proxy:
    """``http://user:pass@host:port`` (a bare ``host:port`` means http) as a :class:`Proxy`."""
    text = value.strip()
    url = URL(text if "://" in text else f"http://{text}")
    if url.scheme != "http" or not url.host:
        raise NetworkSettingError(
            f"proxy {redacted(text)} (HTTP_PROXY/HTTPS_PROXY): only http:// proxies are "
            "supported (an https:// target still goes through one in a CONNECT tunnel, TLS "
            "end to end)"
        )
    authorization = None
    if url.user is not None:
        pair = f"{url.user}:{url.password or ''}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return Proxy(url.with_user(None).with_password(None), authorization)


def redacted(url: str) -> str:
    """``url`` without its credentials, for logs and reports."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.username is None and parts.password is None:
            return url
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"***@{host}{port}"))
    except ValueError:
        return "(an unparsable URL)"


def export_from_env_file(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    """Copy the network variables an env file sets (and the environment does not) into
    the process environment, where every HTTP library reads them; the names copied.

    Settings come from the environment and ``.env`` alike, but proxies and CA files are
    read by the libraries themselves, from the environment only.
    """
    from dotenv import dotenv_values

    target = os.environ if environ is None else environ
    if not path.is_file():
        return []
    # By name whatever its case: the libraries let a lower-case https_proxy win over
    # HTTPS_PROXY, so a file's lower-case one would override the environment's.
    present = {name.upper() for name in target if name.upper() in _UPPER_NETWORK_VARIABLES}
    copied = []
    for name, value in dotenv_values(path).items():
        if name in NETWORK_VARIABLES and value and name.upper() not in present:
            target[name] = value
            copied.append(name)
    return copied


@functools.lru_cache(maxsize=8)
def trust_context(
    ca_bundle: str | None, cert_file: str | None, cert_dir: str | None
) -> ssl.SSLContext:
    """A client context with the default roots (which ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    replace, as OpenSSL reads them) and ``ca_bundle`` added. ``cert_file`` and
    ``cert_dir`` are only the cache key: OpenSSL reads the variables itself."""
    del cert_file, cert_dir
    context = ssl.create_default_context()
    if context.cert_store_stats()["x509_ca"] == 0 and not _system_capath():
        # A slim image without the system's bundle: the one certifi ships.
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    if ca_bundle:
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise NetworkSettingError(
                f"{CA_BUNDLE_VARIABLE}={ca_bundle}: not a readable PEM file of CA "
                f"certificates ({exc})"
            ) from None
    return context


def _system_capath() -> bool:
    paths = ssl.get_default_verify_paths()
    return bool(paths.capath and os.path.isdir(paths.capath) and os.listdir(paths.capath))


def _bypassed(host: str, proxies: Mapping[str, str]) -> bool:
    # Not in typeshed's stub, documented in urllib.request since Python 3.0.
    bypass: Any = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009
    return bool(bypass(host, dict(proxies)))


# A WebSocket URL goes through the proxy of its HTTP scheme (the upgrade is an HTTP request).
_HTTP_SCHEMES = {"ws": "http", "wss": "https"}
