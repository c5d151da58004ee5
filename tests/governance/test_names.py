"""Display names: one contact call per person per hour, however many ask at once."""

from __future__ import annotations

import asyncio

from bot.feishu.client import FeishuClient
from bot.governance.names import MISS_TTL, NAME_TTL, UserNames

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_names_are_looked_up_once_and_again_after_they_expire():
    async with FakeFeishu() as fake:
        fake.workspace.add_user("ou_alice", "Alice")
        async with FeishuClient(feishu_config(fake, encrypt_key="")) as client:
            clock = Clock()
            names = UserNames(client, clock=clock)

            def lookups() -> int:
                return fake.count("GET", r"/contact/v3/users/batch$")

            assert (
                await asyncio.gather(*(names.name("ou_alice") for _ in range(5))) == ["Alice"] * 5
            )
            assert lookups() == 1
            clock.now += NAME_TTL - 1
            assert await names.name("ou_alice") == "Alice" and lookups() == 1
            clock.now += 2
            assert await names.name("ou_alice") == "Alice" and lookups() == 2
            # Nobody by that id: the open_id stands in, and is asked about again sooner.
            assert await names.name("ou_nobody") == "ou_nobody" and lookups() == 3
            clock.now += MISS_TTL + 1
            await names.name("ou_nobody")
            assert lookups() == 4
