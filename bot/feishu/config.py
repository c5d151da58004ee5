"""What the Feishu wire layer needs to know about the app (built from the settings)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FeishuConfig:
    app_id: str
    app_secret: str = field(repr=False)
    verification_token: str = field(repr=False)
    encrypt_key: str = field(repr=False)
    domain: str
    max_event_age_seconds: int = 900
