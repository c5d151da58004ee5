"""Asking a person for their consent: the request, the card, and the wait for its end.

``ask`` posts an authorisation card as a reply to the person's message and waits until the
request ends: authorised (the callback, on any replica, or the device-code poll), expired,
refused or cancelled. It never waits past the request's expiry; a cancelled wait (a
``/stop``) cancels the request and the card says so. Calls waiting for the same person in
the same chat share one request (parallel tool calls get one card, not several), and the
request is cancelled only when the last of them stops waiting. ``start`` (``/login``)
returns once the card is out and leaves the wait to a background task.

In the code flow the card links Feishu's consent page with a signed state and a PKCE
challenge (``bot.feishu.oauth_state``); the request's id is the state's nonce, so the
callback finds it. In the device flow the card links Feishu's verification page with the
code to confirm, and the waiting task polls Feishu at the interval it asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace

from bot.feishu.errors import FeishuError, FeishuRateLimited, FeishuTransportError
from bot.feishu.oauth import authorize_url
from bot.feishu.oauth_device import DeviceFlowEnded, DevicePending, FeishuDeviceFlow
from bot.feishu.oauth_state import StateSigner
from bot.store.user_authorizations import (
    CANCELLED,
    EXPIRED,
    REFUSED,
    AuthorizationRecord,
    AuthorizationState,
    NewAuthorization,
    UserAuthorizationStore,
)

from ..person_wait import PersonWaits
from ..posting import post_card
from .cards import AuthorizationCards
from .config import UserAuthConfig
from .consents import Consents

logger = logging.getLogger(__name__)

STOPPED_NOTE = "the reply was stopped"
SOMEONE_ELSE = "someone else confirmed the code on Feishu's page; only the person asked may"
SLOW_DOWN_SECONDS = 5.0  # RFC 8628 §3.5


class ConsentUnavailable(Exception):
    """The person could not even be asked (Feishu refused to start the flow)."""


@dataclass(frozen=True, slots=True)
class Asking:
    """Who is asked, and the message the card replies to."""

    open_id: str
    chat_id: str
    message_id: str
    thread_id: str = ""


@dataclass(eq=False)
class _Flight:
    scopes: frozenset[str]
    posted: asyncio.Future[str | None]
    task: asyncio.Task[AuthorizationRecord] | None = None
    waiters: int = 0
    keep: bool = False  # started by /login: nobody's stop cancels it
    failure: ConsentUnavailable | None = None


@dataclass(frozen=True, slots=True)
class AskerParts:
    config: UserAuthConfig
    requests: UserAuthorizationStore
    cards: AuthorizationCards
    waits: PersonWaits[AuthorizationRecord]
    consents: Consents
    signer: StateSigner
    app_id: str
    feishu_domain: str
    device: FeishuDeviceFlow
    owner: str
    clock: Callable[[], float] = time.time
    # The fastest the device flow polls, whatever Feishu's interval says.
    min_poll_seconds: float = 1.0


class ConsentAsker:
    def __init__(self, parts: AskerParts) -> None:
        self._p = parts
        self._flights: dict[tuple[str, str], _Flight] = {}

    @property
    def closing(self) -> bool:
        """Set when the process stops: a wait cut short then leaves its request pending (a
        consent on another replica, or after a restart, still completes it)."""
        return self._p.waits.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self._p.waits.closing = value

    async def aclose(self) -> None:
        """Stop the waits still running here (``/login`` cards' included)."""
        self.closing = True
        tasks = [f.task for f in self._flights.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def ask(
        self, asking: Asking, scopes: Collection[str], purpose: str
    ) -> AuthorizationRecord:
        """Ask ``asking.open_id`` to consent to ``scopes``; the request as it ended."""
        flight = self._flight(asking, scopes, purpose)
        task = flight.task
        assert task is not None
        flight.waiters += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if flight.waiters == 1 and not flight.keep and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise
        finally:
            flight.waiters -= 1

    async def start(self, asking: Asking, scopes: Collection[str], purpose: str) -> str | None:
        """Post the card and wait in the background; the card's message id (None: the card
        could not be sent). ConsentUnavailable when the person could not be asked."""
        flight = self._flight(asking, scopes, purpose)
        flight.keep = True
        message_id = await asyncio.shield(flight.posted)
        if flight.failure is not None:
            raise flight.failure
        return message_id

    def _flight(self, asking: Asking, scopes: Collection[str], purpose: str) -> _Flight:
        key = (asking.open_id, asking.chat_id)
        wanted = frozenset(scopes)
        flight = self._flights.get(key)
        task = flight.task if flight is not None else None
        if flight is not None and task is not None and not task.done() and wanted <= flight.scopes:
            return flight
        loop = asyncio.get_running_loop()
        flight = _Flight(wanted, loop.create_future())
        flight.task = loop.create_task(
            self._run(asking, sorted(wanted), purpose, flight),
            name=f"authorisation:{asking.open_id}",
        )
        self._flights[key] = flight
        flight.task.add_done_callback(lambda task: self._landed(key, flight, task))
        return flight

    def _landed(self, key: tuple[str, str], flight: _Flight, task: asyncio.Task[object]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not task.cancelled() and task.exception() is not None and flight.waiters == 0:
            logger.error("asking for consent failed: %s", task.exception())

    async def _run(
        self, asking: Asking, scopes: list[str], purpose: str, flight: _Flight
    ) -> AuthorizationRecord:
        posted = flight.posted
        try:
            if self._p.config.flow == "device":
                return await self._device(asking, scopes, purpose, posted)
            return await self._code(asking, scopes, purpose, posted)
        except ConsentUnavailable as exc:
            flight.failure = exc
            raise
        finally:
            if not posted.done():
                posted.set_result(None)

    async def _code(
        self,
        asking: Asking,
        scopes: list[str],
        purpose: str,
        posted: asyncio.Future[str | None],
    ) -> AuthorizationRecord:
        p = self._p
        earlier = await self._earlier(asking, scopes)
        if earlier is not None:
            posted.set_result(earlier.card_message_id)
            future = p.waits.register(earlier.id)
            try:
                return await self._await(earlier, future, None)
            finally:
                p.waits.discard(earlier.id)
        issued = p.signer.issue(
            open_id=asking.open_id,
            chat_id=asking.chat_id,
            now=p.clock(),
            ttl_seconds=p.config.ttl_seconds,
        )
        record = await p.requests.create(
            self._new(
                asking, issued.claims.nonce, scopes, purpose, "code", issued.claims.expires_at
            )
        )
        url = authorize_url(
            p.app_id,
            p.config.redirect_uri,
            issued.state,
            issued.code_challenge,
            scopes,
            domain=p.feishu_domain,
        )
        return await self._post_and_wait(record, posted, url=url)

    async def _device(
        self,
        asking: Asking,
        scopes: list[str],
        purpose: str,
        posted: asyncio.Future[str | None],
    ) -> AuthorizationRecord:
        p = self._p
        try:
            started = await p.device.start(scopes)
        except FeishuError as exc:
            raise ConsentUnavailable(f"Feishu did not start a device authorization: {exc}") from exc
        now = p.clock()
        expires_at = now + min(p.config.ttl_seconds, started.expires_in)
        record = await p.requests.create(
            self._new(asking, uuid.uuid4().hex, scopes, purpose, "device", expires_at)
        )
        interval = max(started.interval, p.min_poll_seconds)

        def poll(current: AuthorizationRecord) -> Awaitable[AuthorizationRecord]:
            return self._poll(current, started.device_code, interval)

        return await self._post_and_wait(
            record,
            posted,
            url=started.verification_url,
            user_code=started.user_code,
            work=poll,
        )

    def _new(
        self,
        asking: Asking,
        request_id: str,
        scopes: list[str],
        purpose: str,
        flow: str,
        expires_at: float,
    ) -> NewAuthorization:
        return NewAuthorization(
            id=request_id,
            open_id=asking.open_id,
            chat_id=asking.chat_id,
            message_id=asking.message_id,
            thread_id=asking.thread_id,
            scopes=tuple(scopes),
            purpose=purpose,
            flow=flow,
            owner=self._p.owner,
            expires_at=expires_at,
        )

    async def _post_and_wait(
        self,
        record: AuthorizationRecord,
        posted: asyncio.Future[str | None],
        *,
        url: str,
        user_code: str = "",
        work: Callable[[AuthorizationRecord], Awaitable[AuthorizationRecord]] | None = None,
    ) -> AuthorizationRecord:
        p = self._p
        future = p.waits.register(record.id)
        try:
            pending = record

            async def stopped(message_id: str | None) -> None:
                # The card is linked by now, so when the process is closing, a consent
                # after a restart (or on another replica) still rewrites it.
                if not self.closing:
                    stopped_record = replace(pending, card_message_id=message_id)
                    await self._end(stopped_record, CANCELLED, STOPPED_NOTE)

            try:
                message_id = await post_card(
                    p.cards.post(record, url=url, user_code=user_code), if_cancelled=stopped
                )
            except FeishuError as exc:
                logger.error("could not post authorisation card %s: %s", record.id, exc)
                return await self._end(record, CANCELLED, f"the card could not be sent ({exc})")
            posted.set_result(message_id)
            return await self._await(replace(record, card_message_id=message_id), future, work)
        finally:
            p.waits.discard(record.id)

    async def _await(
        self,
        record: AuthorizationRecord,
        future: asyncio.Future[AuthorizationRecord],
        work: Callable[[AuthorizationRecord], Awaitable[AuthorizationRecord]] | None,
    ) -> AuthorizationRecord:
        """The request's end, at its expiry at the latest; a stop (not the process
        closing) cancels it."""
        remaining = max(0.0, record.expires_at - self._p.clock())
        try:
            return await asyncio.wait_for(self._outcome(future, record, work), remaining)
        except TimeoutError:
            return await self._end(record, EXPIRED)
        except asyncio.CancelledError:
            if not self.closing:
                await self._end(record, CANCELLED, STOPPED_NOTE)
            raise

    async def _earlier(self, asking: Asking, scopes: list[str]) -> AuthorizationRecord | None:
        """A request the person was asked before this process took their run over (a
        restart resumed it): still open, in this chat, for these scopes, its card in the
        chat. Its link still works, so the run waits for it instead of asking again. (A
        device-flow request needs its poller, which died with its process: asked anew.)"""
        wanted = set(scopes)
        now = self._p.clock()
        for record in await self._p.requests.pending_of(asking.open_id):
            if (
                record.chat_id == asking.chat_id
                and record.flow == "code"
                and record.card_message_id
                and record.expires_at > now
                and wanted <= set(record.scopes)
            ):
                return record
        return None

    @staticmethod
    async def _outcome(
        future: asyncio.Future[AuthorizationRecord],
        record: AuthorizationRecord,
        work: Callable[[AuthorizationRecord], Awaitable[AuthorizationRecord]] | None,
    ) -> AuthorizationRecord:
        """The request's end: what resolves the future (a callback, another replica), or
        what ``work`` (the device poll) comes to first."""
        if work is None:
            return await asyncio.shield(future)
        worker = asyncio.ensure_future(work(record))
        try:
            await asyncio.wait({future, worker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            worker.cancel()
        return future.result() if future.done() and not future.cancelled() else await worker

    async def _poll(
        self, record: AuthorizationRecord, device_code: str, interval: float
    ) -> AuthorizationRecord:
        p = self._p
        while True:
            await asyncio.sleep(interval)
            try:
                answer = await p.device.poll(device_code, now=p.clock())
            except DeviceFlowEnded as ended:
                if ended.reason == "denied":
                    return await self._end(record, REFUSED, "declined on Feishu's page")
                return await self._end(record, EXPIRED)
            except (FeishuTransportError, FeishuRateLimited) as exc:
                logger.warning("polling device authorization %s: %s; trying again", record.id, exc)
                continue
            except FeishuError as exc:
                return await self._end(record, REFUSED, f"Feishu refused it: {exc.msg}")
            if isinstance(answer, DevicePending):
                interval += SLOW_DOWN_SECONDS if answer.slow_down else 0.0
                continue
            if answer.open_id != record.open_id:
                logger.warning(
                    "request %s of %s was confirmed by %s: refused, nothing stored",
                    record.id,
                    record.open_id,
                    answer.open_id,
                )
                return await self._end(record, REFUSED, SOMEONE_ELSE)
            transition = await p.consents.record(record, answer)
            return transition.record or record

    async def _end(
        self, record: AuthorizationRecord, state: AuthorizationState, note: str | None = None
    ) -> AuthorizationRecord:
        try:
            transition = await self._p.consents.close(record.id, state, note)
        except Exception:
            # The sweep closes it later; a stop must not wait on this.
            logger.exception("could not close authorisation request %s", record.id)
            return record
        return transition.record or record
