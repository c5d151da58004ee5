"""The HTTP connector's host policy on its own, attacked directly: no server, no network.

Every request hop passes ``check_url`` and then ``addresses`` (the socket layer connects
only to what that returns); ``reach`` below runs both, as the connector does.
"""

from __future__ import annotations

import asyncio
import ipaddress

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import ToolError
from connectors.http import BlockedDestination, HostPolicy, parse_rule, system_resolver
from connectors.http.headers import OperatorHeaders
from connectors.http.policy import UnresolvedHost, is_public_address

PUBLIC_V4 = "93.184.216.34"


class FakeResolver:
    """Answers from a table, records what it was asked, and never touches DNS."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table = table or {}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"fake resolver: unknown host {host}")
        return list(self.table[host])


def policy_of(*entries: str, resolver: FakeResolver | None = None) -> HostPolicy:
    return HostPolicy([parse_rule(entry) for entry in entries], resolver or FakeResolver())


def allowed(policy: HostPolicy, url: str) -> bool:
    """The URL check alone (before any name is resolved)."""
    try:
        policy.check_url(httpx.URL(url))
    except ToolError:
        return False
    return True


def reach(policy: HostPolicy, url: str) -> list[str]:
    """The addresses a request to ``url`` would connect to; raises where it is refused."""
    parsed = httpx.URL(url)
    policy.check_url(parsed)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return asyncio.run(policy.addresses(parsed.raw_host.decode("ascii"), port))


def refused(policy: HostPolicy, url: str) -> str:
    with pytest.raises((ToolError, BlockedDestination)) as caught:
        reach(policy, url)
    return str(caught.value)


# ---------------------------------------------------------------- names and wildcards


@pytest.mark.parametrize(
    "host",
    [
        "example.com",  # a wildcard covers subdomains, never the domain itself
        "example.com.evil.net",
        "evilexample.com",
        "evil-example.com",
        "example.comm",
        "xexample.com",
        "example.com%2eevil.net",
        ".example.com",  # empty labels name no subdomain
        "a..example.com",
    ],
)
def test_a_wildcard_covers_subdomains_and_nothing_else(host: str) -> None:
    policy = policy_of("*.example.com")
    assert not allowed(policy, f"http://{host}/")


@pytest.mark.parametrize(
    "host",
    ["a.example.com", "a.b.example.com", "A.EXAMPLE.COM", "a.example.com.", "x-1.example.com"],
)
def test_a_wildcard_matches_any_case_and_a_trailing_dot(host: str) -> None:
    assert allowed(policy_of("*.Example.COM."), f"https://{host}/")


def test_exact_names_ignore_case_and_trailing_dots_only() -> None:
    policy = policy_of("API.Example.com.")
    for url in ("HTTPS://API.EXAMPLE.COM./", "http://api.example.com../"):
        assert allowed(policy, url), url
    for url in ("http://www.api.example.com/", "http://api.example.co/", "http://pi.example.com/"):
        assert not allowed(policy, url), url


def test_userinfo_never_stands_in_for_the_host() -> None:
    policy = policy_of("allowed.com")
    for url in (
        "http://allowed.com@evil.com/",
        "http://allowed.com:80@evil.com/",
        "http://user:allowed.com@evil.com/",
        "http://evil.com#@allowed.com/",
        "http://evil.com?@allowed.com/",
    ):
        assert not allowed(policy, url), url
    assert allowed(policy, "http://evil.com@allowed.com/")


def test_what_is_checked_is_what_is_connected_to() -> None:
    """Parser tricks cannot split the policy's host from the socket's: both read raw_host."""
    policy = policy_of("allowed.com")
    for url in ("http://evil.com\\@allowed.com/", "http://allowed.com\\@evil.com/"):
        parsed = httpx.URL(url)
        assert allowed(policy, url) == (parsed.raw_host == b"allowed.com"), url


# ---------------------------------------------------------------- IDNA


def test_unicode_rules_match_their_punycode_urls() -> None:
    policy = policy_of("bücher.de", "*.Bücher.DE")
    for url in ("http://bücher.de/", "http://BÜCHER.de/", "http://xn--bcher-kva.de/"):
        assert allowed(policy, url), url
    assert allowed(policy, "http://shop.xn--bcher-kva.de/")
    assert not allowed(policy, "http://buecher.de/")


def test_a_rule_names_the_host_its_urls_reach_under_idna_2008() -> None:
    """URLs are encoded with IDNA 2008 (httpx); IDNA 2003 mapped ``ß`` to ``ss``, so a rule
    for ``straße.de`` used to allow ``strasse.de``, another domain, and refuse its own."""
    policy = policy_of("straße.de")
    assert policy.rules[0].pattern == "xn--strae-oqa.de"
    assert allowed(policy, "http://straße.de/")
    assert not allowed(policy, "http://strasse.de/")


def test_homographs_and_invisible_characters_do_not_match() -> None:
    policy = policy_of("example.com")
    assert not allowed(policy, "http://exаmple.com/")  # Cyrillic а
    with pytest.raises(httpx.InvalidURL):
        httpx.URL("http://exa\u200bmple.com/")  # a zero-width space never reaches the policy
    with pytest.raises(ValueError, match="not a valid host name"):
        parse_rule("exa\u200bmple.com")  # nor becomes a rule for example.com


# ---------------------------------------------------------------- IPv4 spellings


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),  # decimal
        ("0x7f000001", "127.0.0.1"),  # hex
        ("0177.1", "127.0.0.1"),  # octal
        ("017700000001", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),  # short form
        ("0x7f.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
    ],
)
def test_numeric_ipv4_spellings_are_judged_by_what_they_resolve_to(host: str, address: str) -> None:
    """Not IP literals to httpx, so names; the system resolver reads them as inet_aton does
    (no DNS query) and the address they spell is refused."""
    policy = HostPolicy([parse_rule("*")], system_resolver)
    assert allowed(policy, f"http://{host}/")  # a name as far as the URL goes
    assert f"{host} resolves to {address}," in refused(policy, f"http://{host}/")


def test_numeric_spellings_do_not_match_the_entry_of_the_address_they_spell() -> None:
    policy = policy_of("8.8.8.8")
    for host in ("134744072", "0x8080808", "8.8.2056", "0x08.0x08.0x08.0x08"):
        assert not allowed(policy, f"http://{host}/"), host


def test_a_dotted_quad_with_leading_zeros_never_reaches_the_policy() -> None:
    for url in ("http://0177.0.0.1/", "http://010.0.0.1/", "http://127.0.0.01/"):
        with pytest.raises(httpx.InvalidURL):
            httpx.URL(url)


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1", "127.255.255.254", "10.0.0.1"])
def test_ipv4_literals_need_an_exact_entry(host: str) -> None:
    assert refused(policy_of("*"), f"http://{host}:8080/").startswith("refused: ")
    assert reach(policy_of(f"{host}:8080", "*"), f"http://{host}:8080/") == [host]


# ---------------------------------------------------------------- IPv6 and address ranges


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("93.184.216.34", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.31.255.255", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("255.255.255.255", False),
        ("224.0.0.251", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("fec0::1", False),  # deprecated site-local
        ("ff02::1", False),
        ("fe80::1%eth0", False),
        ("fd00::1", False),
        ("2001:db8::1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("::ffff:0.0.0.0", False),
        ("::ffff:8.8.8.8", True),
        ("::127.0.0.1", False),  # IPv4-compatible
        ("64:ff9b::a00:1", False),  # NAT64
        ("64:ff9b::a9fe:a9fe", False),
        ("64:ff9b::808:808", True),
        ("2002:7f00:1::", False),  # 6to4 wrapping 127.0.0.1
    ],
)
def test_public_addresses(address: str, public: bool) -> None:
    """The address rule, and the policy applying it to the literal in a URL."""
    assert is_public_address(ipaddress.ip_address(address)) is public
    literal = f"[{address.replace('%', '%25')}]" if ":" in address else address
    if public:
        assert reach(policy_of("*"), f"http://{literal}/") == [str(ipaddress.ip_address(address))]
    else:
        assert refused(policy_of("*"), f"http://{literal}/").startswith("refused: ")


def test_ipv6_forms_of_an_allowed_ipv4_address_are_not_that_entry() -> None:
    policy = policy_of("127.0.0.1", "*")
    assert reach(policy, "http://127.0.0.1/") == ["127.0.0.1"]
    assert refused(policy, "http://[::ffff:127.0.0.1]/").startswith("refused: ")


# ---------------------------------------------------------------- ports and schemes


def test_a_port_in_an_entry_allows_that_port_only() -> None:
    policy = policy_of("api.example.com:8443", "open.example.com")
    assert allowed(policy, "https://api.example.com:8443/")
    for url in (
        "https://api.example.com/",
        "http://api.example.com/",
        "http://api.example.com:8444/",
    ):
        assert not allowed(policy, url), url
    for port in (1, 80, 443, 8080, 65535):
        assert allowed(policy, f"http://open.example.com:{port}/")
    https = policy_of("api.example.com:443")
    assert allowed(https, "https://api.example.com/")
    assert allowed(https, "https://api.example.com:443/")
    assert not allowed(https, "http://api.example.com/")


def test_an_exact_entry_on_another_port_does_not_lift_the_address_check() -> None:
    resolver = FakeResolver({"db.example.com": ["10.0.0.7"]})
    policy = policy_of("*.example.com", "db.example.com:5432", resolver=resolver)
    assert reach(policy, "http://db.example.com:5432/") == ["10.0.0.7"]
    assert "resolves to 10.0.0.7" in refused(policy, "http://db.example.com:8080/")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com:70/",
        "ws://example.com/",
        "wss://example.com/",
        "javascript:alert(1)",
        "data:text/plain,hi",
        "dict://example.com:11211/",
        "//example.com/",
    ],
)
def test_only_http_and_https(url: str) -> None:
    with pytest.raises(ToolError, match="only http and https"):
        policy_of("*").check_url(httpx.URL(url))


# ---------------------------------------------------------------- resolution


def test_a_name_is_refused_if_any_address_is_private() -> None:
    for answer in (
        [PUBLIC_V4, "10.0.0.1"],
        ["10.0.0.1", PUBLIC_V4],
        [PUBLIC_V4, "::ffff:127.0.0.1"],
        ["2606:4700:4700::1111", "fe80::1%eth0"],
    ):
        resolver = FakeResolver({"mixed.example.com": answer})
        policy = policy_of("*.example.com", resolver=resolver)
        assert "mixed.example.com resolves to" in refused(policy, "http://mixed.example.com/")
        exact = policy_of("mixed.example.com", resolver=resolver)
        assert reach(exact, "http://mixed.example.com/") == answer


def test_refused_hosts_and_literals_are_never_resolved() -> None:
    resolver = FakeResolver({"evil.net": [PUBLIC_V4]})
    policy = policy_of("*.example.com", "*", resolver=resolver)
    strict = policy_of("*.example.com", resolver=resolver)
    refused(strict, "http://evil.net/")
    reach(policy, f"http://{PUBLIC_V4}/")
    with pytest.raises(BlockedDestination):
        asyncio.run(strict.addresses("evil.net", 80))  # the socket layer checks on its own
    assert resolver.calls == []


def test_the_resolver_is_asked_the_normalized_name() -> None:
    resolver = FakeResolver({"a.example.com": [PUBLIC_V4]})
    assert reach(policy_of("*.example.com", resolver=resolver), "http://A.Example.COM./") == [
        PUBLIC_V4
    ]
    assert resolver.calls == ["a.example.com"]


def test_a_name_without_addresses_is_unresolved() -> None:
    resolver = FakeResolver({"empty.example.com": []})
    policy = policy_of("*.example.com", resolver=resolver)
    for host in ("empty.example.com", "unknown.example.com"):
        with pytest.raises(UnresolvedHost, match=f"cannot resolve {host}"):
            reach(policy, f"http://{host}/")


def test_a_label_too_long_for_dns_is_unresolved_not_a_crash() -> None:
    """getaddrinfo raises UnicodeError (not OSError) for a label over 63 characters."""
    policy = HostPolicy([parse_rule("*.example.com")], system_resolver)
    with pytest.raises(UnresolvedHost, match="cannot resolve"):
        reach(policy, f"http://{'a' * 64}.example.com/")


# ---------------------------------------------------------------- rules and per-host headers


@pytest.mark.parametrize(
    "entry", ["", "*.", "*.*.com", "ex*ample.com", "a/b", "[::1]x", "host:0", "host:65536", "h:p"]
)
def test_bad_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match=r"entry|invalid literal"):
        parse_rule(entry)


def test_rules_match_hosts_and_ports() -> None:
    wildcard = parse_rule("*.Example.COM.")
    assert wildcard.matches("a.example.com", 443) and wildcard.matches("a.b.example.com", 80)
    assert not wildcard.matches("example.com", 443)
    assert not wildcard.matches("badexample.com", 443)
    with_port = parse_rule("https://api.example.com:8443/path")
    assert with_port.matches("api.example.com", 8443)
    assert not with_port.matches("api.example.com", 443)


def test_a_wildcards_host_headers_stay_on_its_subdomains() -> None:
    headers = OperatorHeaders({}, [(parse_rule("*.example.com"), {"X-Api-Key": "k"})])
    for url, expected in [
        ("https://api.example.com/", "k"),
        ("https://example.com.evil.net/", None),
        ("https://evilexample.com/", None),
        ("https://example.com/", None),
    ]:
        request = httpx.Request("GET", url, headers={"X-Api-Key": "forged"})
        headers.apply(request, same_origin=True)
        assert request.headers.get("X-Api-Key") == expected, url


# ---------------------------------------------------------------- properties

LABELS = st.sampled_from(["a", "b", "example", "com", "evil", "xn--zca", "co", "ex-ample"])
NAMES = st.lists(LABELS, min_size=1, max_size=4)
ENTRIES = st.tuples(st.booleans(), NAMES)  # (wildcard?, labels)


def _oracle(entries: list[tuple[bool, list[str]]], host: list[str]) -> bool:
    """Label by label: exact entries equal the host, wildcards are a proper suffix of it."""
    for wildcard, labels in entries:
        if not wildcard and host == labels:
            return True
        if wildcard and len(host) > len(labels) and host[-len(labels) :] == labels:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(ENTRIES, max_size=4),
    host=NAMES,
    upper=st.booleans(),
    dot=st.booleans(),
)
def test_a_host_is_allowed_exactly_when_an_entry_matches_it(
    entries: list[tuple[bool, list[str]]], host: list[str], upper: bool, dot: bool
) -> None:
    rules = [("*." if wildcard else "") + ".".join(labels) for wildcard, labels in entries]
    resolver = FakeResolver()
    policy = policy_of(*rules, resolver=resolver)
    name = ".".join(host)
    spelled = (name.upper() if upper else name) + ("." if dot else "")
    assert allowed(policy, f"http://{spelled}/") is _oracle(entries, host)
    if not _oracle(entries, host):
        with pytest.raises(BlockedDestination):
            asyncio.run(policy.addresses(spelled, 80))
        assert resolver.calls == []


NON_PUBLIC_V4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/29",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
NON_PUBLIC_V6 = [
    "::1/128",
    "::/128",
    "::/96",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
    "2001:db8::/32",
    "2001::/32",
    "100::/64",
]
PUBLIC = ["8.8.8.0/24", "1.1.1.0/24", "93.184.216.0/24", "2606:4700::/32", "2a00:1450::/32"]


def _in(network: str) -> st.SearchStrategy[str]:
    net = ipaddress.ip_network(network)
    return st.integers(0, net.num_addresses - 1).map(lambda i: str(net[i]))


def _wrapped(v4: str) -> list[str]:
    """``v4`` and the IPv6 forms that carry it: IPv4-mapped, NAT64 and 6to4."""
    value = int(ipaddress.IPv4Address(v4))
    return [
        v4,
        f"::ffff:{v4}",
        str(ipaddress.IPv6Address((0x64FF9B << 96) | value)),
        str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80))),
    ]


non_public = st.one_of(
    st.sampled_from(NON_PUBLIC_V4).flatmap(_in).flatmap(lambda a: st.sampled_from(_wrapped(a))),
    st.sampled_from(NON_PUBLIC_V6).flatmap(_in),
)
public = st.sampled_from(PUBLIC).flatmap(_in)


@settings(max_examples=300, deadline=None)
@given(bad=non_public, good=st.lists(public, max_size=3), position=st.integers(0, 3))
def test_a_non_public_address_is_refused_unless_the_host_is_listed_exactly(
    bad: str, good: list[str], position: int
) -> None:
    answer = [*good]
    answer.insert(min(position, len(answer)), bad)
    resolver = FakeResolver({"h.example.com": answer})
    assert not is_public_address(ipaddress.ip_address(bad))
    for wildcard in ("*.example.com", "*"):
        policy = policy_of(wildcard, resolver=resolver)
        assert f"resolves to {ipaddress.ip_address(bad)}" in refused(
            policy, "http://h.example.com/"
        )
        assert refused(policy, f"http://[{bad}]/" if ":" in bad else f"http://{bad}/")
    assert reach(policy_of("h.example.com", resolver=resolver), "http://h.example.com/") == answer
    literal = f"[{bad}]" if ":" in bad else bad
    assert reach(policy_of(literal), f"http://{literal}/") == [str(ipaddress.ip_address(bad))]


@settings(max_examples=100, deadline=None)
@given(answer=st.lists(public, min_size=1, max_size=4))
def test_public_addresses_pass_a_wildcard(answer: list[str]) -> None:
    resolver = FakeResolver({"h.example.com": answer})
    assert reach(policy_of("*.example.com", resolver=resolver), "http://h.example.com/") == answer
