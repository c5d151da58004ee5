"""A ``FeishuConfig`` for the client, pointing at a fake Feishu (or its long connection)."""

from __future__ import annotations

from typing import Any, Protocol

from bot.feishu.config import FeishuConfig


class FakeApp(Protocol):
    """What a fake knows of the app it serves: FakeFeishu, FakeLongConnection."""

    app_id: str
    app_secret: str

    @property
    def domain(self) -> str: ...


def feishu_config(fake: FakeApp, **changes: Any) -> FeishuConfig:
    """The fake's app and domain, with verification token "vt" and encrypt key "ek";
    ``changes`` set any field (``encrypt_key=""``, ``app_secret="wrong"``)."""
    values: dict[str, Any] = {
        "app_id": fake.app_id,
        "app_secret": fake.app_secret,
        "verification_token": "vt",
        "encrypt_key": "ek",
        "domain": fake.domain,
    }
    return FeishuConfig(**(values | changes))
