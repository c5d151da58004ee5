"""A consent racing ``/logout`` and an admin's revoke (issue 32), through governance's own
entry points, on two replicas sharing a real database (SQLite, and PostgreSQL when
configured): ``Consents.record`` is what the callback and the device poll call once Feishu
has answered with the person's tokens; ``UserAuth.logout`` and ``UserAuth.revoke`` are
the chat command's and the console's.

Every order is forced at transaction boundaries, without timing: the withdrawal lands
whole before the callback's first transaction, before its second, and so on, and the
callback lands whole before each of the withdrawal's. Whatever the order, once both are
done no grant is stored, no request is left pending, and the callback counts as
authorised (its page says so) exactly when its request is.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.fernet import Fernet

from bot.engine import tool_from_function
from bot.engine.hooks import ToolUse
from bot.feishu.client import FeishuClient
from bot.governance.user_auth.config import UserAuthConfig
from bot.governance.user_auth.service import UserAuth, build_user_auth
from bot.oauth_tokens import UserTokens
from bot.store import Database, upgrade_async
from bot.store.replays import ReplayGuard
from bot.store.user_authorizations import AUTHORISED, PENDING, NewAuthorization

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.postgres import BACKENDS, scratch_database_async, url_text
from support.turns import run_of, turn_context
from support.waiting import wait_until

KEY = Fernet.generate_key().decode()
SCOPE = "contact:user.base:readonly"


class HeldDatabase:
    """A replica's database whose n-th transaction from now waits until ``release()``."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._hold_at: int | None = None
        self._count = 0
        self.holding = asyncio.Event()
        self._released = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def hold_before(self, n: int) -> None:
        self._hold_at, self._count = n, 0
        self.holding.clear()
        self._released.clear()

    def release(self) -> None:
        self._hold_at = None
        self._released.set()

    async def transact(self, fn: Callable[..., Any], /, *args: Any, **options: Any) -> Any:
        if self._count == self._hold_at:
            self.holding.set()
            await self._released.wait()
        self._count += 1
        return await self._database.transact(fn, *args, **options)


@dataclass
class Replica:
    auth: UserAuth
    database: HeldDatabase


@pytest.fixture(params=BACKENDS)
async def database_url(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'auth.db'}"
        await upgrade_async(url)
        yield url
        return
    async with scratch_database_async("larkgate_races_") as scratch:
        url = url_text(scratch)
        await upgrade_async(url)
        yield url


@pytest.fixture
async def replicas(database_url) -> AsyncIterator[tuple[Replica, Replica]]:
    """The replica the callback reached, and the one that handles the withdrawal."""
    async with (
        FakeFeishu() as fake,
        FeishuClient(feishu_config(fake), timeout=5.0) as client,
        Database(database_url) as here,
        Database(database_url) as there,
    ):
        built = []
        for index, database in enumerate((here, there)):
            held = HeldDatabase(database)

            async def name_of(open_id: str) -> str:
                return open_id

            auth = build_user_auth(
                UserAuthConfig(token_key=KEY, public_url="https://bot.example.com"),
                database=held,  # type: ignore[arg-type]
                feishu=client,
                feishu_config=feishu_config(fake),
                replays=ReplayGuard(held),  # type: ignore[arg-type]
                timezone="UTC",
                owner=f"replica-{index}",
                name_of=name_of,
            )
            built.append(Replica(auth, held))
        yield built[0], built[1]


def request_of(person: str) -> NewAuthorization:
    return NewAuthorization(
        id=f"request-of-{person}",
        open_id=person,
        chat_id="oc_1",
        message_id="om_1",
        thread_id="",
        scopes=(SCOPE,),
        purpose="tell you your name",
        flow="code",
        owner="replica-0",
        expires_at=time.time() + 600,
    )


def tokens_of(person: str) -> UserTokens:
    now = time.time()
    return UserTokens(person, f"u-{person}", f"ur-{person}", now + 7200, now + 86400, SCOPE)


WITHDRAWALS: dict[str, Callable[[UserAuth, str], Awaitable[bool]]] = {
    "logout": lambda auth, person: auth.logout(person, chat_id="oc_1"),
    "revoke": lambda auth, person: auth.revoke(person, actor="ou_admin"),
}


@pytest.mark.parametrize("withdrawal", sorted(WITHDRAWALS))
@pytest.mark.parametrize("held", ["callback", "withdrawal"])
async def test_whatever_the_order_no_grant_outlives_the_withdrawal(replicas, withdrawal, held):
    callback_side, withdrawing_side = replicas
    paused = callback_side if held == "callback" else withdrawing_side
    for n in itertools.count():
        assert n < 10, "a side that never runs out of transactions"
        person = f"ou_person_{n}"
        request = await callback_side.auth.requests.create(request_of(person))

        def callback(person: str = person, request: Any = request) -> Awaitable[Any]:
            return callback_side.auth.consents.record(request, tokens_of(person))

        def withdraw(person: str = person) -> Awaitable[bool]:
            return WITHDRAWALS[withdrawal](withdrawing_side.auth, person)

        first, whole = (callback, withdraw) if held == "callback" else (withdraw, callback)
        paused.database.hold_before(n)
        started = asyncio.ensure_future(first())
        holding = asyncio.ensure_future(paused.database.holding.wait())
        await asyncio.wait({started, holding}, return_when=asyncio.FIRST_COMPLETED)
        holding.cancel()
        reached = paused.database.holding.is_set()  # else: fewer than n + 1 transactions
        landed = await whole()  # the other side, whole, in that gap (or after the end)
        paused.database.release()
        outcome = await started
        transition = landed if held == "withdrawal" else outcome

        assert await callback_side.auth.tokens.get(person) is None, f"a grant survived (n={n})"
        state = (await withdrawing_side.auth.requests.get(request.id)).state
        assert state != PENDING
        assert transition.changed == (state == AUTHORISED), f"the page lied (n={n})"
        if not reached:
            break


async def _my_name() -> str:
    """Tell the person their Feishu name."""
    return "?"


MY_NAME = tool_from_function(_my_name, name="my_name", side_effect="read")


async def test_a_consent_withdrawn_before_its_turn_resumes_is_called_withdrawn(replicas):
    """The consent wins, then /logout deletes the grant, and only then does the waiting
    replica notice the request ended: its turn is told the grant was withdrawn, not that
    Feishu left scopes out for an admin to add."""
    waiting, elsewhere = replicas
    gate = waiting.auth.gate(lambda name: (SCOPE,) if name == "my_name" else None)
    turn = turn_context(sender_open_id="ou_fake_alice")
    person = turn.sender_open_id
    run = run_of(turn, "what is my name?")
    call = ToolUse("my_name", {}, "c1", "read", MY_NAME, 1, run)
    verdict = asyncio.ensure_future(gate.pre_tool_use(call))
    (request,) = await wait_until(lambda: waiting.auth.requests.pending_of(person))
    assert (await elsewhere.auth.consents.record(request, tokens_of(person))).changed
    assert await elsewhere.auth.logout(person, chat_id=turn.chat_id)
    await waiting.auth.waits.check()  # what the waiting replica's watcher does
    result = await verdict
    assert not result.allow
    assert "withdrawn" in result.reason and "admin" not in result.reason
