"""UserAuthorizationGate: a tool that acts as the asker runs only with their consent.

A PreToolUse hook, so it can wait for a person (a tool's own call has a timeout). For a
tool declared ``acts_as="user"`` it makes sure the person whose turn it is has a usable
grant covering the tool's scopes: refreshed before it expires, or asked for with an
authorisation card when missing, too narrow, or refused by Feishu (then once a run). While
it waits, the run gives up its slot and the live card marks the call as waiting, as for an
approval. Consent: the call runs. No consent in time: the model reads why, and nothing is
done as the person.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext

from bot.engine import HookResult
from bot.engine.hooks import ToolUse
from bot.feishu.errors import FeishuError
from bot.store.user_authorizations import AUTHORISED, EXPIRED, REFUSED, AuthorizationRecord

from ..person_wait import park
from .ask import Asking, ConsentAsker, ConsentUnavailable
from .asker_of import asker_of
from .grants import UserGrants
from .reconsent import Reconsent

logger = logging.getLogger(__name__)

# The user-token scopes a tool needs, or None for a tool that does not act as anyone.
ScopesOf = Callable[[str], tuple[str, ...] | None]


class UserAuthorizationGate:
    def __init__(
        self,
        *,
        scopes_of: ScopesOf,
        grants: UserGrants,
        asker: ConsentAsker,
        reconsent: Reconsent,
        name_of: Callable[[str], Awaitable[str]],
        ttl_seconds: float,
    ) -> None:
        self._scopes_of = scopes_of
        self._grants = grants
        self._asker = asker
        self._reconsent = reconsent
        self._name_of = name_of
        self._ttl = ttl_seconds

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        scopes = self._scopes_of(call.name)
        if scopes is None:
            return HookResult()
        origin, refusal = asker_of(call.run)
        if origin is None:
            return HookResult(False, refusal)
        open_id, run_id = origin.sender_open_id, call.run.run_id
        withheld = self._reconsent.withheld(run_id, open_id) & set(scopes)
        if withheld:
            return HookResult(False, await self._narrowed(open_id, withheld))
        again = self._reconsent.wanted(run_id, open_id)
        try:
            if not again and await self._grants.usable(open_id, scopes) is not None:
                return HookResult()
            stored = await self._grants.stored(open_id)
        except FeishuError as exc:
            return HookResult(False, f"Feishu did not answer about the person's grant ({exc})")
        # Ask for what they granted before too: the new grant replaces the old one.
        wanted = sorted({*scopes, *(stored.scopes if stored is not None else ())})
        wanted = [scope for scope in wanted if scope != "offline_access"]
        self._reconsent.asked(run_id, open_id)
        asking = Asking(open_id, origin.chat_id, origin.message_id, origin.thread_id)
        # A restart resumes the run, which waits for this request again (or asks anew).
        saved = await park(call, origin) and origin.parking is not None
        live, slot = origin.live, origin.slot
        if live is not None:
            live.waiting(call.call_id)
        released: AbstractAsyncContextManager[None] = (
            slot.released() if slot is not None else nullcontext()
        )
        if saved and origin.parking is not None:
            origin.parking.holding(True)
        try:
            async with released:
                record = await self._asker.ask(asking, wanted, purpose_of(call))
        except ConsentUnavailable as exc:
            return HookResult(False, f"could not ask for the person's consent: {exc}")
        finally:
            if saved and origin.parking is not None:
                origin.parking.holding(False)
            if live is not None:
                live.resumed(call.call_id)
        # The wait took minutes: someone else's message may have joined the run meanwhile.
        _, refusal = asker_of(call.run)
        if refusal:
            return HookResult(False, refusal)
        return await self._result(record, scopes, run_id)

    async def _result(
        self, record: AuthorizationRecord, scopes: tuple[str, ...], run_id: str
    ) -> HookResult:
        if record.state == AUTHORISED:
            granted = await self._grants.stored(record.open_id)
            if granted is None:
                # Withdrawn (/logout, a revoke) right after the consent: not Feishu narrowing
                # the grant, and nothing an admin must fix.
                return HookResult(False, "authorisation withdrawn right after it was given")
            missing = frozenset(scopes) - granted.scopes
            if not missing:
                return HookResult()
            # Asking again would not help: Feishu grants only what the app may ask for.
            self._reconsent.withheld(run_id, record.open_id, missing)
            return HookResult(False, await self._narrowed(record.open_id, missing))
        who = await self._name_of(record.open_id)
        if record.state == EXPIRED:
            return HookResult(
                False,
                f"{who} did not authorise acting as them within {_span(self._ttl)}, so "
                "nothing was done as them. They can send /login, or ask again",
            )
        if record.state == REFUSED:
            return HookResult(False, f"authorisation refused: {record.note or 'no consent'}")
        return HookResult(False, f"authorisation cancelled: {record.note or 'no consent'}")

    async def _narrowed(self, open_id: str, missing: frozenset[str]) -> str:
        who = await self._name_of(open_id)
        return (
            f"{who} authorised, but Feishu's grant leaves out {', '.join(sorted(missing))}: "
            "an admin must add these user scopes to the app in the Feishu developer console "
            "(and publish a version). Nothing was done as them"
        )


def _span(seconds: float) -> str:
    count, unit = (round(seconds), "second") if seconds < 90 else (round(seconds / 60), "minute")
    return f"{count} {unit}{'' if count == 1 else 's'}"


def purpose_of(call: ToolUse) -> str:
    """What the card says the bot wants to do: the tool and the first line of its
    description (written by the tool's author, not by the model)."""
    first = (call.tool.description or "").strip().splitlines()
    summary = first[0].strip().rstrip(".") if first else ""
    if len(summary) > 120:
        summary = summary[:119].rstrip() + "…"
    return f"use {call.name}" + (f" ({summary})" if summary else "")
