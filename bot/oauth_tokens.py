"""A person's Feishu user tokens as one value, shared by the Feishu wire layer (which
obtains them) and the store (which keeps them encrypted): neither may import the other.

The secrets are ``repr=False``: a token in a traceback, a log line or a model prompt is a
credential leaked, so printing the value shows only who it belongs to and when it expires.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class UserTokens:
    """``expires_at`` / ``refresh_expires_at`` are epoch seconds; ``scope`` is Feishu's
    space-separated list of what the user granted; ``open_id`` is who granted it."""

    open_id: str
    access_token: str = field(repr=False)
    refresh_token: str = field(repr=False)
    expires_at: float
    refresh_expires_at: float
    scope: str = ""

    def expires_within(self, seconds: float, *, now: float) -> bool:
        """True when the access token is gone or will be within ``seconds``."""
        return self.expires_at - now <= seconds

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.scope.split())
