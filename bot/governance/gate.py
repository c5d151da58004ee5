"""FeishuGateHook: a tool call that needs approval waits for a human's click.

The hook posts an approval card in the conversation with the call's whole arguments (what
the approver reads is what runs: no hook after governance's may rewrite them, see
``bot/app.py``), marks the call as waiting on the live answer card, and waits until a
decision or the expiry. While it waits, the run gives up its run slot, so pending
approvals never hold up other people's questions. Approve: the call runs. Deny: the model
reads who denied it and goes on. Expiry counts as a deny and the card says so. A run that
is stopped cancels its wait, and the approval with it; read-only mode cancels it too.

A call is asked for by every asker of its run: everyone whose message is in it, since a
message sent while the bot works joins the running reply (``bot/askers.py``). So a session
grant lets the call go unasked only when every asker holds one; otherwise the card names
them all, and its approvers are those the approver rule allows for each of them alike. When
nobody is (each requester approves only their own calls, and several asked), the call is
refused at once, saying why, with no card. Someone may join while the card waits: the
approval covers only the askers it named, so the call runs only if nobody else joined.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from bot.askers import Askers, common
from bot.engine import HookResult
from bot.engine.hooks import ToolUse
from bot.feishu.errors import FeishuError
from bot.profiles import Profile
from bot.store.approvals import (
    APPROVED,
    CANCELLED,
    DENIED,
    EXPIRED,
    PENDING,
    READ_ONLY_NOTE,
    ApprovalRecord,
    ApprovalStore,
    NewApproval,
)
from bot.turn_context import TurnContext, turn_of

from .cards import ApprovalCards
from .config import ApproverRule, GovernanceConfig
from .person_wait import PersonWaits, call_key, hold, park
from .posting import post_card

logger = logging.getLogger(__name__)

STOPPED_NOTE = "the run was stopped before a decision"
# A resumed call that is not the one approved: its checkpoint was changed in the database.
TAMPERED_NOTE = "the call to run was not the one shown on this card"
# A resumed run meets an approval whose call was already let through once.
ALREADY_USED = (
    "{tool} did not run again: its approval was already used once, before the bot "
    "restarted, and whether it finished is not known. Check its effect before asking again."
)
# What the model reads (and relays) when no one may approve a call for all its askers.
NOBODY_APPROVES_FOR_ALL = (
    "{tool} did not run: {askers} asked in this one reply, and here each person approves "
    "only their own requests, so nobody may approve it for all of them. Each person should "
    "ask for it in a message of their own."
)
NOBODY_APPROVES = "{tool} did not run: nobody may approve it for {askers}."
# ... and when someone joined the reply while the approval waited.
JOINED_WHILE_WAITING = (
    "{tool} did not run: it was approved for {approved} only, and {joined} joined this "
    "reply while the approval waited. Ask for it again, so that the approval covers "
    "everyone whose message is in this reply."
)


class FeishuGateHook:
    def __init__(
        self,
        *,
        config: GovernanceConfig,
        store: ApprovalStore,
        waits: PersonWaits[ApprovalRecord],
        cards: ApprovalCards,
        connector_of: Callable[[str], str | None],
        owner: str,
        name_of: Callable[[str], Awaitable[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._store = store
        self._waits = waits
        self._cards = cards
        self._connector_of = connector_of
        self._owner = owner
        self._name_of = name_of
        self._clock = clock

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        connector = self._connector_of(call.name)
        if not self._config.rules.needs_approval(call.name, connector, call.side_effect):
            return HookResult()
        turn = turn_of(call.run)
        if turn is None:
            # Nobody to ask (a run outside a chat): a call that needs approval cannot run.
            return HookResult(False, f"{call.name} needs a human's approval, and no chat is open")
        # A run resumed from its checkpoint meets the approval it asked for before. (Only a
        # run that can be saved can be resumed: a plan's steps share their run's id.)
        key = call_key(call)
        earlier = await self._store.of_call(turn.run_id, key) if key is not None else None
        if earlier is not None:
            decided = await self._meet_again(earlier, call, turn)
        else:
            # Read now, not when the run began: more people may have joined since.
            askers = turn.askers()
            if self._config.rules.session_grants and await self._store.granted_to_all(
                turn.scope_key, turn.generation, call.name, askers.everyone
            ):
                return HookResult()
            approvers = self._approvers_for(askers, turn.profile)
            if not approvers:
                return HookResult(False, await self._nobody_approves(call.name, askers))
            await park(call, turn)  # before the card: a click must find the run resumable
            record = await self._store.create(
                NewApproval(
                    run_id=turn.run_id,
                    scope_key=turn.scope_key,
                    generation=turn.generation,
                    chat_id=turn.chat_id,
                    message_id=turn.message_id,
                    thread_id=turn.thread_id,
                    tool=call.name,
                    connector=connector,
                    arguments=readable_arguments(call.arguments),
                    reason=call.reason,
                    requester=askers.starter,
                    requesters=askers.everyone,
                    approvers=approvers,
                    owner=self._owner,
                    ttl_seconds=self._config.approval_ttl_seconds,
                    side_effect=call.side_effect,
                    call_id=key,
                    profile=turn.profile.name if turn.profile is not None else None,
                )
            )
            decided = await self._wait(record, call.call_id, turn)
        result = await self._result(decided)
        if not result.allow:
            return result
        still = await self._still_theirs(decided, turn.askers())
        if not still.allow:
            return still
        if not await self._store.use(decided.id):
            # A run resumed after its call was let through once (a crash after the click):
            # the approval is spent, and the call does not run a second time.
            logger.warning("approval %s was already used; %s not run again", decided.id, call.name)
            return HookResult(False, ALREADY_USED.format(tool=call.name))
        return still

    async def _meet_again(
        self, record: ApprovalRecord, call: ToolUse, turn: TurnContext
    ) -> ApprovalRecord:
        """The approval this call of this run asked for before its process stopped: what
        it holds is what may run. A call that differs from it (a checkpoint changed in the
        database) is refused, and the approval with it."""
        if record.tool != call.name or record.arguments != readable_arguments(call.arguments):
            logger.error(
                "run %s call %s: the resumed call differs from approval %s; refused",
                turn.run_id,
                call.call_id,
                record.id,
            )
            await self._cancel(record, TAMPERED_NOTE)
            current = await self._store.get(record.id)
            return replace(current or record, state=CANCELLED, note=TAMPERED_NOTE)
        if record.state != PENDING:
            return record
        # Saved again by this process: the card's place as it is now, and the message's
        # attempts started over (a process dying while a run waits crashed nothing).
        await park(call, turn)
        if record.card_message_id is None:  # stopped before its card went out: post it now
            return await self._wait(record, call.call_id, turn)
        return await self._hold(record, self._waits.register(record.id), call.call_id, turn)

    def _approvers_for(self, askers: Askers, profile: Profile | None) -> tuple[str, ...]:
        """Who may decide a call for every one of ``askers`` alike (never an unknown ""):
        the chat's profile's approvers when it names some, else the approver rule's."""
        rule, admins = self._config.approvers, self._config.admins
        if profile is not None and profile.approvers:
            rule = ApproverRule("list", profile.approvers)
        return tuple(a for a in common(askers, lambda a: rule.approvers(a, admins)) if a)

    async def _nobody_approves(self, tool: str, askers: Askers) -> str:
        names = await self._names(askers.everyone)
        text = NOBODY_APPROVES_FOR_ALL if askers.several else NOBODY_APPROVES
        logger.info("%s refused: no approver for every asker (%s)", tool, names)
        return text.format(tool=tool, askers=names)

    async def _still_theirs(self, record: ApprovalRecord, askers: Askers) -> HookResult:
        """An approval covers the askers it named: a call whose reply someone else joined
        while it waited does not run on it (the model may ask again, for everyone)."""
        joined = tuple(a for a in askers.everyone if a not in record.requesters)
        if not joined:
            return HookResult()
        logger.info(
            "approval %s: %d asker(s) joined while it waited; refused", record.id, len(joined)
        )
        return HookResult(
            False,
            JOINED_WHILE_WAITING.format(
                tool=record.tool,
                approved=await self._names(record.requesters),
                joined=await self._names(joined),
            ),
        )

    async def _names(self, open_ids: tuple[str, ...]) -> str:
        names = [await self._name_of(open_id) for open_id in open_ids]
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

    async def _wait(
        self, record: ApprovalRecord, call_id: str, turn: TurnContext
    ) -> ApprovalRecord:
        future = self._waits.register(record.id)
        pending = record

        async def stopped(message_id: str | None) -> None:
            # A /stop mid-post: the card shows "stopped" instead of live buttons.
            await self._cancel(replace(pending, card_message_id=message_id))

        try:
            card_message_id = await post_card(self._cards.post(record), if_cancelled=stopped)
        except FeishuError as exc:
            self._waits.discard(record.id)
            logger.error("could not post approval card %s: %s", record.id, exc)
            outcome = await self._store.cancel(record.id, f"the card could not be sent ({exc})")
            return outcome.record or record
        except BaseException:
            self._waits.discard(record.id)
            raise
        return await self._hold(
            replace(record, card_message_id=card_message_id), future, call_id, turn
        )

    async def _hold(
        self,
        record: ApprovalRecord,
        future: asyncio.Future[ApprovalRecord],
        call_id: str,
        turn: TurnContext,
    ) -> ApprovalRecord:
        try:
            return await hold(
                self._waits,
                future,
                remaining=record.expires_at - self._clock(),
                turn=turn,
                call_id=call_id,
                on_expiry=lambda: self._expire(record),
                on_stop=lambda: self._cancel(record),
            )
        finally:
            self._waits.discard(record.id)

    async def _expire(self, record: ApprovalRecord) -> ApprovalRecord:
        outcome = await self._store.expire(record.id)
        current = outcome.record or record
        if outcome.changed:
            await self._cards.refresh(current, record.card_message_id)
        return current

    async def _cancel(self, record: ApprovalRecord, note: str = STOPPED_NOTE) -> None:
        try:
            outcome = await self._store.cancel(record.id, note)
            if outcome.changed and outcome.record is not None:
                await self._cards.refresh(outcome.record, record.card_message_id)
        except Exception:
            # The orphan sweep closes it later; the run's stop must not wait on this.
            logger.exception("could not cancel approval %s", record.id)

    async def _result(self, record: ApprovalRecord) -> HookResult:
        if record.state == APPROVED:
            return HookResult()
        if record.state == DENIED:
            return HookResult(False, f"denied by {await self._name_of(record.decided_by or '')}")
        if record.state == EXPIRED:
            minutes = max(1, round(self._config.approval_ttl_seconds / 60))
            return HookResult(
                False, f"approval expired: nobody approved it within {minutes} minutes"
            )
        if record.state == CANCELLED and record.note == READ_ONLY_NOTE:
            return HookResult(
                False,
                "approval cancelled: an admin switched the organisation to read-only mode, "
                f"so {record.tool} did not run and no tool that writes can run now",
            )
        if record.state == CANCELLED:
            return HookResult(False, f"approval cancelled: {record.note or 'no decision'}")
        return HookResult(False, f"approval is {record.state}")


def readable_arguments(arguments: Mapping[str, Any]) -> str:
    """The whole arguments as a person reads them: indented JSON, never cut (the card
    decides how to show them; the console and the audit log hold them whole)."""
    return json.dumps(dict(arguments), ensure_ascii=False, indent=2, default=str)
