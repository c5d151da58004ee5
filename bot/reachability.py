"""The hosts a deployment calls, the proxy each goes through, and whether each answers.

``larkgate check`` prints one line a host: what it is for, ``via <proxy>`` or
``direct`` (and why: no proxy set, or NO_PROXY covers it), and the outcome of one
``GET /`` through the same HTTP stack the bot uses (``bot.network``): any HTTP answer
means the network path works (a 404 from the API's root included); a refused
connection, a certificate the trust store does not accept, or a proxy's refusal (407,
502) is said as such. The hosts come from the settings (docs/deployment.md lists them
for a firewall):

- the Feishu OpenAPI (``FEISHU_DOMAIN``), always;
- the long connection's gateway (``msg-frontier.`` beside the public open platforms)
  in ws mode; a private deployment's gateway is named by its endpoint answer;
- the accounts host (``accounts.``), for ``larkgate setup`` and per-user authorisation;
- the model endpoints (``LLM_BASE_URL``, the vision model, ``[models.*]``);
- MCP servers over HTTP.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bot.network import Network, redacted

REACH_TIMEOUT = 8.0


@dataclass(frozen=True, slots=True)
class OutboundHost:
    """An origin the bot calls: ``purpose`` says for what; ``required`` hosts fail the
    check when unreachable (the others warn)."""

    purpose: str
    origin: str
    required: bool = True


@dataclass(frozen=True, slots=True)
class Reach:
    ok: bool
    detail: str


def outbound_hosts(
    *,
    feishu_domain: str,
    event_mode: str,
    user_auth: bool,
    models: Iterable[tuple[str, str]],
    mcp_urls: Iterable[tuple[str, str]] = (),
) -> list[OutboundHost]:
    """The deployment's hosts, each origin once (the first purpose named wins).

    ``models`` and ``mcp_urls`` are ``(purpose, url)`` pairs."""
    hosts = [OutboundHost("Feishu OpenAPI", _origin(feishu_domain))]
    open_host = urlsplit(feishu_domain).hostname or ""
    if open_host.startswith("open."):
        rest = open_host.removeprefix("open.")
        if event_mode == "ws":
            hosts.append(OutboundHost("long connection", f"https://msg-frontier.{rest}"))
        hosts.append(
            OutboundHost(
                "accounts (setup, user authorisation)", f"https://accounts.{rest}", user_auth
            )
        )
    hosts += [OutboundHost(purpose, _origin(url)) for purpose, url in models if url]
    hosts += [OutboundHost(purpose, _origin(url), required=False) for purpose, url in mcp_urls]
    seen: set[str] = set()
    unique = []
    for host in hosts:
        if host.origin not in seen:
            seen.add(host.origin)
            unique.append(host)
    return unique


def route(network: Network, origin: str) -> str:
    """``via http://proxy:3128`` or ``direct (...)``, credentials never shown."""
    configured = network.proxies.get(urlsplit(origin).scheme)
    if network.proxy_for(origin) is not None and configured:
        return f"via {redacted(configured)}"  # as set, so "***@" shows credentials are sent
    return "direct (NO_PROXY)" if configured else "direct"


async def reach(network: Network, origin: str, *, seconds: float = REACH_TIMEOUT) -> Reach:
    """One ``GET /`` of ``origin`` through ``network``: any HTTP answer is a path that works."""
    started = time.monotonic()
    session = network.client_session(limit=1, timeout=aiohttp.ClientTimeout(total=seconds))
    try:
        async with session.get(origin + "/", allow_redirects=False) as response:
            status = response.status
    except aiohttp.ClientHttpProxyError as exc:
        return Reach(False, f"the proxy refused: HTTP {exc.status} {exc.message}")
    except aiohttp.ClientConnectorCertificateError as exc:
        return Reach(False, f"certificate not trusted: {_reason(exc.certificate_error)}")
    except aiohttp.ClientSSLError as exc:
        return Reach(False, f"TLS failed: {_reason(exc)}")
    except aiohttp.ClientConnectorError as exc:
        return Reach(False, f"cannot connect: {_reason(exc.os_error)}")
    except TimeoutError:
        return Reach(False, f"no answer within {seconds:g} s")
    except aiohttp.ClientError as exc:
        return Reach(False, f"{type(exc).__name__}: {_reason(exc)}")
    finally:
        await session.close()
    elapsed = (time.monotonic() - started) * 1000
    return Reach(True, f"reachable (HTTP {status} in {elapsed:.0f} ms)")


def describe(network: Network, environ: Mapping[str, str]) -> str:
    """The proxy variables in effect (credentials hidden) and what is trusted."""
    proxies = network.proxies
    parts = [
        f"{scheme} proxy {redacted(proxies[scheme])}"
        for scheme in ("http", "https")
        if proxies.get(scheme)
    ]
    if proxies.get("no"):
        parts.append(f"NO_PROXY {proxies['no']}")
    if not parts:
        parts.append("no proxy set (HTTP_PROXY, HTTPS_PROXY)")
    roots = (
        "SSL_CERT_FILE " + environ["SSL_CERT_FILE"]
        if environ.get("SSL_CERT_FILE")
        else "the system's CA roots"
    )
    if network.ca_bundle is not None:
        roots += f" + LARKGATE_CA_BUNDLE {network.ca_bundle}"
    return "; ".join(parts) + f"; trusting {roots}"


def _origin(url: str) -> str:
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _reason(exc: Any) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return str(exc.verify_message or exc.reason)
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


async def reach_all(network: Network, hosts: list[OutboundHost]) -> list[Reach]:
    """Every host at once (the check waits for the slowest, not the sum)."""
    return list(await asyncio.gather(*(reach(network, host.origin) for host in hosts)))
