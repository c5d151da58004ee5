"""The HTTP connector: requests to allowlisted hosts, with the SSRF checks made where the
socket is opened (policy, transport, rendering and the connector itself).
"""

from __future__ import annotations

from .connector import HTTP
from .policy import (
    BlockedDestination,
    HostPolicy,
    HostRule,
    is_public_address,
    normalize_host,
    parse_rule,
    system_resolver,
)
from .rendering import html_to_text, render_body
from .transport import PinnedTransport, decode_content

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
