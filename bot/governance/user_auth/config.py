"""Per-user authorisation's settings, as the composition root hands them over.

Two ways to ask a person for their consent, chosen from the settings:

- ``code`` (the authorization code flow with PKCE): the card's button opens Feishu's
  consent page, which sends the browser back to ``<LARKGATE_PUBLIC_URL>/feishu/oauth/callback``.
  Needs a public URL, and that callback listed in the app's redirect URLs.
- ``device`` (RFC 8628, the device authorization grant): the card's button opens Feishu's
  own verification page and the bot asks Feishu every few seconds whether the person
  agreed. Needs no public URL: the long-connection mode's usual case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CALLBACK_PATH = "/feishu/oauth/callback"

Flow = Literal["code", "device"]


@dataclass(frozen=True, slots=True)
class UserAuthConfig:
    # LARKGATE_TOKEN_KEY as set: the Fernet keys that seal stored tokens (first seals).
    token_key: str = field(repr=False)
    public_url: str
    ttl_seconds: float = 600.0
    # Refresh an access token this long before it expires (Feishu's live two hours).
    refresh_margin_seconds: float = 300.0

    @property
    def flow(self) -> Flow:
        return "code" if self.public_url else "device"

    @property
    def redirect_uri(self) -> str:
        """Where Feishu sends the browser back ("" in the device flow)."""
        return f"{self.public_url}{CALLBACK_PATH}" if self.public_url else ""

    @property
    def state_secret(self) -> str:
        """What signs OAuth states and derives PKCE verifiers: the sealing key."""
        return self.token_key.split(",")[0].strip()

    def describe(self) -> str:
        """One line for ``larkgate check``: which flow, and what Feishu must know."""
        if self.flow == "code":
            return (
                f"on: consent through Feishu's page, back to {self.redirect_uri} (list it "
                "under Security Settings → Redirect URLs, and grant the app offline_access "
                "and the user scopes of its tools)"
            )
        return (
            "on: consent by device code (no LARKGATE_PUBLIC_URL, so no callback): the card "
            "links Feishu's verification page and the bot polls for the answer; grant the app "
            "offline_access and the user scopes of its tools. Set LARKGATE_PUBLIC_URL to use "
            "the redirect flow instead"
        )


OFF_DETAIL = (
    'off: set LARKGATE_TOKEN_KEY (a Fernet key; make one with python -c "from '
    'cryptography.fernet import Fernet; print(Fernet.generate_key().decode())") to let '
    "tools act as the person who asks"
)
