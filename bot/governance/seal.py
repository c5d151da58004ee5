"""Sealed button values: a click acts only on a value this bot wrote.

A card button's value comes back verbatim in the click's callback. Feishu signs the
callback, but not the card: any card the app ever sent (one a prompt-injected model had the
bot post, an old card, a card copied between chats) delivers whatever value it holds. So
the values of buttons that change the organisation carry an HMAC over their other fields,
keyed by a secret the model never sees; a value without a valid seal changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

SEAL_FIELD = "seal"


def derive_button_key(*secrets_in_order: str) -> bytes:
    """A button key from the first non-empty app secret (same on every replica); a random key
    (buttons work only on this process until it restarts) when there is none."""
    for secret in secrets_in_order:
        if secret:
            return hashlib.sha256(b"larkgate button seal\0" + secret.encode()).digest()
    logger.debug("no app secret to seal buttons with; using a key for this process only")
    return secrets.token_bytes(32)


class ButtonSeal:
    def __init__(self, key: bytes) -> None:
        self._key = key or secrets.token_bytes(32)

    def sealed(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """``value`` with its seal added."""
        return {**value, SEAL_FIELD: self._mac(value)}

    def valid(self, value: Mapping[str, Any]) -> bool:
        seal = value.get(SEAL_FIELD)
        if not isinstance(seal, str):
            return False
        unsealed = {k: v for k, v in value.items() if k != SEAL_FIELD}
        return hmac.compare_digest(seal, self._mac(unsealed))

    def _mac(self, value: Mapping[str, Any]) -> str:
        canonical = json.dumps(
            {k: v for k, v in value.items() if k != SEAL_FIELD},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            default=str,
        )
        return hmac.new(self._key, canonical.encode(), hashlib.sha256).hexdigest()[:32]
