"""Where the HTTP connector may send a request: the host allowlist and the address rules.

No I/O but the DNS lookup that ``HostPolicy.addresses`` makes through its resolver.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable

import httpx

from bot.engine import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class BlockedDestination(Exception):
    """A request that would reach an address the policy does not allow."""


class UnresolvedHost(Exception):
    """A host name the resolver gave no address for."""


def normalize_host(host: str) -> str:
    """Lower-case ASCII (IDNA) form without brackets or a trailing dot; IPs in canonical form.

    A non-ASCII name is encoded exactly as httpx encodes URL hosts (IDNA 2008), so a rule
    names the host its URLs reach: IDNA 2003 would turn ``straße.de`` into ``strasse.de``,
    another domain. A name that cannot be encoded is a ValueError.
    """
    text = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if text.isascii():
        return text
    try:
        return httpx.URL(scheme="http", host=text).raw_host.decode("ascii")
    except httpx.InvalidURL as exc:
        raise ValueError(f"{host!r} is not a valid host name: {exc}") from None


def _has_empty_label(host: str) -> bool:
    # ".example.com" or "a..example.com" name no host; system resolvers choke on them.
    return ":" not in host and "" in host.split(".")


@dataclasses.dataclass(frozen=True, slots=True)
class HostRule:
    """One ``allowed_hosts`` entry; with a port it allows only that port, without one any."""

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
            suffix = self.pattern[1:]
            return host.endswith(suffix) and not _has_empty_label(host[: -len(suffix)])
        return host == self.pattern


def parse_rule(entry: str) -> HostRule:
    """``host``, ``host:port``, ``[v6]:port``, ``*.suffix`` or ``*``; a URL is accepted too.

    ``*.example.com`` covers every subdomain, never ``example.com`` itself; ``*`` any host.
    """
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
    """Whether ``address`` is a globally routable unicast address.

    IPv4 wrapped in IPv6 (IPv4-mapped, NAT64, 6to4) counts as the IPv4 address it carries.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None and not is_public_address(address.sixtofour):
            return False
        # Deprecated site-local (fec0::/10) is still routed inside some networks, and
        # ipaddress counts it as global.
        if address.is_site_local:
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


def host_and_port(url: httpx.URL) -> tuple[str, int]:
    """The normalized host of ``url`` and its port, the scheme's default when none is given."""
    host = normalize_host(url.raw_host.decode("ascii"))
    return host, url.port or (443 if url.scheme == "https" else 80)


class HostPolicy:
    """The allowlist and the address rules, shared by the URL checks and the socket layer.

    Loopback, private, link-local, multicast, reserved, shared (CGNAT) and unspecified
    addresses are refused unless the host matched an exact entry: wildcards never reach
    them. A name is judged by every address it resolves to.
    """

    def __init__(self, rules: Iterable[HostRule], resolver: Resolver) -> None:
        self.rules = list(rules)
        self.resolver = resolver

    def rule_for(self, host: str, port: int) -> HostRule | None:
        """The best matching rule: an exact one wins over wildcards."""
        if _has_empty_label(host):
            return None
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
        host, port = host_and_port(url)
        rule = self.rule_for(host, port)
        if rule is None:
            allowed = ", ".join(show_rule(r) for r in self.rules) or "none"
            raise ToolError(f"{hostport(host, port)} is not an allowed host (allowed: {allowed})")
        literal = _ip_literal(host)
        if literal is not None and not rule.exact and not is_public_address(literal):
            raise ToolError(_private_refusal(host, literal))

    async def addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses to connect to for ``host:port``.

        BlockedDestination when the policy refuses them, UnresolvedHost without any.
        """
        name = normalize_host(host)
        rule = self.rule_for(name, port)
        if rule is None:
            raise BlockedDestination(f"{hostport(name, port)} is not an allowed host")
        literal = _ip_literal(name)
        if literal is not None:
            resolved = [str(literal)]
        else:
            try:
                resolved = await self.resolver(name, port)
            # getaddrinfo raises UnicodeError for a label over 63 characters.
            except (OSError, UnicodeError) as exc:
                raise UnresolvedHost(f"cannot resolve {name}: {exc}") from exc
            if not resolved:
                raise UnresolvedHost(f"cannot resolve {name}: no addresses")
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


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def show_rule(rule: HostRule) -> str:
    if rule.port is None:
        return rule.pattern
    return hostport(rule.pattern, rule.port)


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


__all__ = [
    "BlockedDestination",
    "HostPolicy",
    "HostRule",
    "IPAddress",
    "Resolver",
    "UnresolvedHost",
    "host_and_port",
    "hostport",
    "is_public_address",
    "normalize_host",
    "parse_rule",
    "show_rule",
    "system_resolver",
]
