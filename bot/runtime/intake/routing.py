"""From a claimed message to a job: normalise, apply the chat policy, run commands.

Ignored messages (from bots, from chats closed to the sender such as groups not on the
allowlist, group messages that do not mention the bot when a mention is required) are
recorded as dropped, so their redeliveries cost nothing. Whether a chat is closed, and
whether a question may start a run (budgets), is the admission's to say, the same one a
scheduled task's firing passes (``admission.py``). Commands are answered at once, outside
the conversation's queue, which is what lets ``/stop`` stop a run in progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from bot.agent_config import RunMode
from bot.config import ChatPolicy
from bot.conversations import ConversationWorkers, Job, ScopeInput, scope_key
from bot.feishu.events import InboundMessage, Rejected, parse_message_event
from bot.governance.admin import AdminCommands, AdminReply
from bot.runtime import texts
from bot.runtime.intake.admission import Admission, Closed, Entry
from bot.runtime.intake.bot_peers import BotPeers
from bot.runtime.intake.claims import InFlight
from bot.runtime.intake.commands import ChatCommand, ChatCommands
from bot.runtime.intake.identity import BotIdentity
from bot.runtime.intake.logins import Logins
from bot.runtime.intake.waiting_media import WaitingMedia
from bot.runtime.memory_cards import MemoryCards
from bot.runtime.replies import ReplyFailed, ReplySender, ReplyTarget
from bot.runtime.schedules.cards import ScheduleCards
from bot.runtime.schedules.views import Place
from bot.runtime.turn import TurnRunner
from bot.runtime.turn.questions import has_media
from bot.store import CheckpointStore, Claim, ConversationStore, MessageLedger, StoredCheckpoint

logger = logging.getLogger(__name__)

# The command that is a question: it runs as a turn (in a mode of its own), not at once.
PLAN_COMMAND = "/plan"
# The reply to a message its conversation had no room for: a run in progress has taken
# in all it may, and as many messages as may wait for later turns are waiting.
CONVERSATION_FULL = (
    "I am still working through earlier messages in this conversation and too many are "
    "waiting, so I did not take this one. Please send it again once I have answered."
)
NOT_MENTIONED = "group message that does not mention the bot"


class MessageHandler:
    def __init__(
        self,
        *,
        ledger: MessageLedger,
        identity: BotIdentity,
        policy: ChatPolicy,
        workers: ConversationWorkers,
        conversations: ConversationStore,
        replies: ReplySender,
        turns: TurnRunner,
        in_flight: InFlight,
        owner: str,
        admission: Admission,
        admin: AdminCommands | None = None,
        admin_help: Callable[[str], str | None] | None = None,
        waiting: WaitingMedia | None = None,
        schedules: ScheduleCards | None = None,
        logins: Logins | None = None,
        checkpoints: CheckpointStore | None = None,
        peers: BotPeers | None = None,
        memories: MemoryCards | None = None,
    ) -> None:
        # /memory: the card of what the bot remembers here (None: memory is off).
        self._memories = memories
        # Other bots' messages: which are answered, and the loop guard (None: none are).
        self._peers = peers
        # Runs saved while they waited for a person, found again when their message is
        # taken over (None: runs are not saved).
        self._checkpoints = checkpoints
        # /login and /logout (None: per-user authorisation is off).
        self._logins = logins
        # /schedules: the card of the sender's scheduled tasks (None: not enabled).
        self._schedules = schedules
        # Files posted in groups without a mention, kept for the sender's next question.
        self._waiting = waiting or WaitingMedia()
        self._admin = admin
        # What /help adds for this sender (admins: the month's Feishu API use), or None.
        self._admin_help = admin_help
        # Whether the sender's chat is open to them, and a question may start a run.
        self._admission = admission
        self._ledger = ledger
        self._identity = identity
        self._policy = policy
        self._workers = workers
        self._conversations = conversations
        self._replies = replies
        self._turns = turns
        self._in_flight = in_flight
        self._owner = owner
        self.commands = ChatCommands(self._declared_commands())

    def _declared_commands(self) -> list[ChatCommand]:
        """Every chat command: its name, how /help shows it, its handler, who may use it."""
        return [
            ChatCommand(
                PLAN_COMMAND,
                "/plan <question>",
                "answers with a plan: I split the question into steps, run the independent "
                "ones at the same time and show them as a checklist while they run.",
                None,
            ),
            ChatCommand("/stop", "/stop", "stops the reply in progress.", self._stop),
            ChatCommand(
                "/reset",
                "/reset",
                "starts a new conversation (I forget the earlier messages).",
                self._reset,
            ),
            ChatCommand(
                "/schedules",
                "/schedules",
                "lists your scheduled tasks, with buttons to cancel them.",
                self._schedules_card,
            ),
            ChatCommand(
                "/memory",
                "/memory [clear]",
                "shows what I remember for you here, with buttons to forget; "
                "`/memory clear` forgets everything I keep for you.",
                self._memory_card,
            ),
            ChatCommand(
                "/login",
                "/login",
                "authorises ahead of time the tools that act as you in Feishu.",
                self._login,
            ),
            ChatCommand("/logout", "/logout", "withdraws that authorisation.", self._logout),
            ChatCommand("/help", "/help", "shows this message.", self._help),
            ChatCommand(
                "/readonly",
                "/readonly on|off|status",
                "switches every tool that writes off or on for the whole organisation.",
                self._readonly,
                who="admins",
            ),
            ChatCommand(
                "/admin", "/admin", "shows the admin card.", self._admin_card, who="admins"
            ),
        ]

    async def __call__(self, claim: Claim) -> None:
        if claim.state == "replied":
            # Taken over from a process that sent the reply and died before finishing.
            await self._finish(claim.message_id)
            return
        parsed = parse_message_event(claim.payload, bot_open_id=await self._identity.open_id())
        if isinstance(parsed, Rejected):
            logger.warning("dropping message %s: %s", claim.message_id, parsed.reason)
            await self._drop(claim.message_id, parsed.reason)
            return
        # A message taken over from a process that stopped or died may have a run that was
        # saved while it waited for a person: that run goes on, not a new one.
        parked = None
        if claim.outcome == "taken_over" and self._checkpoints is not None:
            parked = await self._checkpoints.for_message(claim.message_id)
        ignored = await self._ignore_reason(parsed)
        if parked is not None:
            self._resume(parsed, parked, refused=ignored is not None)
            return
        if ignored is not None:
            if ignored == NOT_MENTIONED and self._waiting.keep(parsed):
                ignored += "; its files wait for the sender's question"
            logger.info("ignoring message %s: %s", parsed.message_id, ignored)
            await self._drop(parsed.message_id, ignored)
            return
        key = scope_key(
            ScopeInput(
                parsed.chat_type,
                parsed.chat_id,
                parsed.sender_open_id,
                parsed.message_id,
                parsed.root_id,
            ),
            self._policy.group_scope(parsed.chat_id),
            self._policy.app,
        )
        if not await self._past_the_loop_guard(parsed):
            return
        # A bot asks questions; it runs no command (a /reset of a person's conversation).
        command = self.commands.parse(parsed.text) if parsed.sender_type == "user" else None
        mode: RunMode | None = None
        if command is not None and command.name == PLAN_COMMAND:
            parsed = replace(parsed, text=plan_question(parsed.text))
            if not parsed.text:  # a plan needs a goal, even with a file attached
                await self._notice(parsed, texts.PLAN_USAGE)
                return
            mode = "dag"
        elif command is not None and command.handler is not None:
            await command.handler(parsed, key)
            return
        # Every message past the commands, words or not: one without words still starts a
        # run (its files, the message it replies to) or joins one, making its sender an
        # asker whose budget the run spends (bot/askers.py).
        refusal = await self._admission.admit(Entry.of_message(parsed), spends=True)
        if refusal is not None:
            logger.info("message %s not run: %s", parsed.message_id, refusal.text)
            if isinstance(refusal, Closed) or not refusal.tell:
                # Closed: the door let it in a moment ago; told: already, this window.
                await self._drop(parsed.message_id, f"refused: {refusal.text}")
            else:
                await self._notice(parsed, refusal.text)
            return
        earlier = self._waiting.take(parsed) if parsed.chat_type != "p2p" else ()
        if not parsed.text.strip() and not has_media(parsed) and not earlier:
            await self._help(parsed, key)  # only a mention
            return
        run = self._turns.runner_for(parsed, key, earlier=earlier, mode=mode)
        job = Job(key, parsed.message_id, parsed.text, run=run, sender=parsed.sender_open_id)
        outcome = self._workers.submit(job)
        logger.info("message %s %s conversation %s", parsed.message_id, outcome, key)
        if outcome == "refused":
            await self._notice(parsed, CONVERSATION_FULL)

    def _resume(self, message: InboundMessage, parked: StoredCheckpoint, *, refused: bool) -> None:
        """Go on with the saved run in its conversation's lane; a chat the bot no longer
        answers in ends it, saying so on its card."""
        notice = texts.NOT_ALLOWED_ANY_MORE if refused else None
        run = self._turns.resumer_for(message, parked.scope_key, parked, notice=notice)
        job = Job(
            parked.scope_key,
            message.message_id,
            message.text,
            run=run,
            sender=message.sender_open_id,
            joins=False,
        )
        outcome = self._workers.submit(job)
        logger.info("message %s: saved run %s %s", message.message_id, parked.run_id, outcome)

    async def _past_the_loop_guard(self, message: InboundMessage) -> bool:
        """Counts the message in its thread's run of bots' messages; False when it is a
        bot's past the cap (dropped, or the chat told of the cutoff once)."""
        if self._peers is None:
            return True
        verdict = await self._peers.count(message)
        if verdict.answer:
            return True
        logger.info("message %s not answered: %s", message.message_id, verdict.reason)
        if verdict.tell is not None:
            await self._notice(message, verdict.tell)
        else:
            await self._drop(message.message_id, verdict.reason)
        return False

    async def _ignore_reason(self, message: InboundMessage) -> str | None:
        if message.sender_type != "user":
            if self._peers is None or not self._peers.on:
                return f"sent by a {message.sender_type or 'non-user'}"
            refused = self._peers.refusal(message, await self._identity.open_id())
            if refused is not None:
                return refused
        # At the door nothing is spent yet: a command in an open chat costs no budget.
        closed = await self._admission.admit(Entry.of_message(message), spends=False)
        if closed is not None:
            return closed.text
        if message.chat_type == "p2p":
            return None
        if self._policy.mention_required(message.chat_id) and not message.mentions_bot:
            return NOT_MENTIONED
        return None

    # -- the commands' handlers (declared in _declared_commands) ---------------------------

    async def _help(self, message: InboundMessage, key: str) -> None:
        extra = self._admin_help(message.sender_open_id) if self._admin_help else None
        text = texts.help_text(self.commands.help_lines())
        await self._notice(message, text + (extra or ""))

    async def _stop(self, message: InboundMessage, key: str) -> None:
        result = self._workers.stop(key, "stopped by /stop")
        for job in result.dropped:
            await self._finish(job.message_id)
        await self._notice(message, texts.STOPPED if result.stopped else texts.NOTHING_TO_STOP)

    async def _reset(self, message: InboundMessage, key: str) -> None:
        result = self._workers.stop(key, "stopped by /reset")
        for job in result.dropped:
            await self._finish(job.message_id)
        await self._conversations.reset(key)
        await self._notice(message, texts.RESET)

    async def _readonly(self, message: InboundMessage, key: str) -> None:
        if self._admin is None:
            await self._help(message, key)
            return
        args = message.text.split()[1:]
        reply = await self._admin.readonly(
            args, actor=message.sender_open_id, chat_id=message.chat_id
        )
        await self._card_reply(message, reply)

    async def _admin_card(self, message: InboundMessage, key: str) -> None:
        if self._admin is None:
            await self._help(message, key)
            return
        reply = await self._admin.admin_card(actor=message.sender_open_id, chat_id=message.chat_id)
        await self._card_reply(message, reply)

    async def _login(self, message: InboundMessage, key: str) -> None:
        if self._logins is None:
            await self._notice(message, texts.LOGIN_OFF)
            return
        reply = await self._logins.login(message)
        if reply.card_message_id:
            await self._finish(message.message_id, reply_message_id=reply.card_message_id)
        else:
            await self._notice(message, reply.text)

    async def _logout(self, message: InboundMessage, key: str) -> None:
        if self._logins is None:
            await self._notice(message, texts.LOGIN_OFF)
        else:
            await self._notice(message, await self._logins.logout(message))

    async def _schedules_card(self, message: InboundMessage, key: str) -> None:
        if self._schedules is None:
            await self._notice(message, "Scheduled tasks are not enabled here.")
            return
        place = Place(message.chat_id, message.chat_type)
        card = await self._schedules.card(message.sender_open_id, place)
        await self._card_reply(message, AdminReply("Your scheduled tasks", card=card))

    async def _memory_card(self, message: InboundMessage, key: str) -> None:
        if self._memories is None:
            await self._notice(message, texts.MEMORY_OFF)
            return
        words = message.text.split()
        if words[1:2] == ["clear"]:
            card = await self._memories.clear_card(message.sender_open_id, message.chat_id)
            await self._card_reply(message, AdminReply("Forget everything?", card=card))
            return
        card = await self._memories.card(message.sender_open_id, message.chat_id, message.chat_type)
        await self._card_reply(message, AdminReply("What I remember", card=card))

    async def _card_reply(self, message: InboundMessage, reply: AdminReply) -> None:
        if reply.card is None:
            await self._notice(message, reply.text)
            return
        target = ReplyTarget(message.message_id, in_thread=bool(message.thread_id))
        try:
            sent = await self._replies.card(target, reply.card, fallback_text=reply.text)
        except ReplyFailed:
            await self._finish(message.message_id)
            return
        await self._finish(message.message_id, reply_message_id=sent.message_id)

    async def _notice(self, message: InboundMessage, text: str) -> None:
        target = ReplyTarget(message.message_id, in_thread=bool(message.thread_id))
        try:
            sent = await self._replies.notice(target, text)
        except ReplyFailed:
            await self._finish(message.message_id)
            return
        await self._finish(message.message_id, reply_message_id=sent.message_id)

    async def _drop(self, message_id: str, reason: str) -> None:
        await self._ledger.drop(message_id, reason=reason, owner=self._owner)
        self._in_flight.done(message_id)

    async def _finish(self, message_id: str, *, reply_message_id: str | None = None) -> None:
        await self._ledger.complete(
            message_id, owner=self._owner, reply_message_id=reply_message_id
        )
        self._in_flight.done(message_id)


def plan_question(text: str) -> str:
    """The question of a ``/plan <question>`` message (its lines kept: a list is a plan)."""
    return text.strip()[len(PLAN_COMMAND) :].strip()
