"""One turn of a conversation: run the agent, reply in the chat, remember it.

The turn owns the claims of its message and of the messages that joined it while it
ran; it completes them only once the reply is out (or deliberately not sent: a
``/stop``), so a crash at any point before leaves them to be taken over. Its end is
one write: history, run row and completed claims go in together (``TurnJournal``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from bot.agent_config import RunMode
from bot.askers import Askers
from bot.conversations.workers import Turn
from bot.engine import AgentResult, ChatAgent, ReActAgent, model_deadline
from bot.feishu.card_writer import LiveReply, ReplyOutcome
from bot.feishu.content import Attachment
from bot.feishu.events import InboundMessage
from bot.logs import bind_log_context, log_scope
from bot.profiles import Profile, Profiles
from bot.runtime import texts
from bot.runtime.intake.claims import InFlight
from bot.runtime.turn.live import LiveAnswer
from bot.runtime.turn.media import MediaReader
from bot.runtime.turn.parking import (
    Checkpoints,
    TurnFacts,
    TurnParking,
    UnusableCheckpoint,
    decode,
)
from bot.runtime.turn.questions import Question, build_question, problems_text
from bot.runtime.turn.records import (
    Extras,
    Ran,
    Started,
    answer_footer,
    context_of_turn,
    end_cards,
    error_text,
    facts_of,
    fan_out,
    finished_turn,
    log_finished,
    nothing_to_run,
    profile_name,
)
from bot.runtime.turn.run_events import RunEventHub, RunPublisher
from bot.store import (
    ConversationStore,
    FinishedTurn,
    MessageLedger,
    StoredCheckpoint,
    TurnJournal,
)

logger = logging.getLogger(__name__)


# Makes the agent for a new run (async: what it may use depends on the org's mode), in
# the mode given (``/plan`` forces one) or, with None, the configured one.
# The agent of a run: the mode /plan forced (or None), the chat's profile (or None), the
# recalled memories' section of its instructions ("" for none).
AgentFactory = Callable[[RunMode | None, Profile | None, str], Awaitable[ChatAgent]]
# The memories a run recalls, as that section: for the message, its question's text.
MemoryRecall = Callable[[InboundMessage, str], Awaitable[str]]
# Makes the live card writer for the reply to a message.
LiveReplyFactory = Callable[[InboundMessage], LiveReply]
# Counts a run's tokens against the budget of each of its askers (everyone whose message it
# answered) and of the chat; returns a usage line for the footer.
UsageRecorder = Callable[[InboundMessage, Askers, int], Awaitable[str]]
# Told of each run that ended: its status ("failed" when the turn raised) and wall seconds.
RunObserver = Callable[[str, float], None]


class TurnRunner:
    def __init__(
        self,
        *,
        agent_factory: AgentFactory,
        ledger: MessageLedger,
        conversations: ConversationStore,
        journal: TurnJournal,
        live_reply: LiveReplyFactory,
        in_flight: InFlight,
        owner: str,
        history_messages: int,
        record_usage: UsageRecorder | None = None,
        clock: Callable[[], float] = time.time,
        on_run: RunObserver | None = None,
        events: RunEventHub | None = None,
        media: MediaReader | None = None,
        model_deadline_seconds: float | None = None,
        checkpoints: Checkpoints | None = None,
        profiles: Profiles | None = None,
        recall: MemoryRecall | None = None,
    ) -> None:
        # The memories put into a run's instructions (None: memory is off).
        self._recall = recall
        # Which agent each chat gets (its profile; none: the default agent).
        self._profiles = profiles if profiles is not None else Profiles()
        # Where runs that wait for a person are saved, to be resumed by any process (None:
        # such a run waits in this process only, and a restart starts it over).
        self._checkpoints = checkpoints
        # How long a turn keeps trying a model that fails (LARKGATE_TURN_DEADLINE_SECONDS):
        # one deadline for every model call of the turn, its retries included.
        self._model_deadline = model_deadline_seconds
        # Reads the images and files of a message (None: the bot reads only text).
        self._media = media
        self._on_run = on_run
        # Every run's events (steps, answer deltas, done), for the web console.
        self._events = events if events is not None else RunEventHub(clock=clock)
        self._record_usage = record_usage
        self._agent_factory = agent_factory
        self._ledger = ledger
        self._conversations = conversations
        self._journal = journal
        self._clock = clock
        self._live_reply = live_reply
        self._in_flight = in_flight
        self._owner = owner
        self._history_messages = history_messages

    @property
    def checkpoints(self) -> Checkpoints | None:
        return self._checkpoints

    def runner_for(
        self,
        message: InboundMessage,
        key: str,
        *,
        earlier: Sequence[tuple[str, Attachment]] = (),
        scheduled_task: str = "",
        on_status: Callable[[str | None], None] | None = None,
        mode: RunMode | None = None,
    ) -> Callable[[Turn], Awaitable[None]]:
        """The job's run. ``earlier``: files the sender posted for this question before it
        (message id, attachment); ``scheduled_task``: the task this run fires for (its
        hooks and tools can tell); ``on_status`` hears how it ended (None: stopped before
        it started; "failed" when it raised or was cancelled); ``mode``: the agent mode
        this question must run in (``/plan``), else the configured one."""
        extras = Extras(tuple(earlier), scheduled_task, mode)

        def body(
            turn: Turn, opened: list[RunPublisher], cards: list[LiveAnswer]
        ) -> Awaitable[str | None]:
            return self._run(turn, message, key, opened, cards, extras)

        return self._guarded(message, body, on_status)

    def resumer_for(
        self,
        message: InboundMessage,
        key: str,
        stored: StoredCheckpoint,
        *,
        notice: str | None = None,
        on_status: Callable[[str | None], None] | None = None,
    ) -> Callable[[Turn], Awaitable[None]]:
        """The job that goes on with a run another process saved while it waited for a
        person (``parking.py``), from ``stored``, its checkpoint; with ``notice``, the job
        that ends it instead, its card saying ``notice``."""

        def body(
            turn: Turn, opened: list[RunPublisher], cards: list[LiveAnswer]
        ) -> Awaitable[str | None]:
            return self._resume(turn, message, key, stored, opened, cards, notice)

        return self._guarded(message, body, on_status)

    def _guarded(
        self,
        message: InboundMessage,
        body: Callable[[Turn, list[RunPublisher], list[LiveAnswer]], Awaitable[str | None]],
        on_status: Callable[[str | None], None] | None,
    ) -> Callable[[Turn], Awaitable[None]]:
        async def run(turn: Turn) -> None:
            began = time.monotonic()
            opened: list[RunPublisher] = []  # the run's event stream, once it started
            cards: list[LiveAnswer] = []  # the turn's card, once it was posted
            status: str | None = "failed"
            # The ids the run binds label every line of the turn, and only of this turn; every
            # model call of the turn shares its one deadline.
            with log_scope(), model_deadline(self._model_deadline):
                try:
                    status = await body(turn, opened, cards)
                except Exception:
                    logger.exception("turn for message %s failed", message.message_id)
                    self._ran("failed", began)
                    await end_cards(cards)
                    await self._release(turn)
                    raise
                except asyncio.CancelledError:  # shutting down: a later start answers it
                    await end_cards(cards)
                    raise
                finally:  # raised or cancelled: the stream still ends (no-op after done)
                    for publisher in opened:
                        publisher.done(status="failed", error="the turn ended before its run")
                    if on_status is not None:
                        on_status(status)
                if status is not None:
                    self._ran(status, began)

        return run

    def _ran(self, status: str, began: float) -> None:
        if self._on_run is not None:
            self._on_run(status, time.monotonic() - began)

    async def _run(
        self,
        turn: Turn,
        message: InboundMessage,
        key: str,
        opened: list[RunPublisher],
        cards: list[LiveAnswer],
        extras: Extras,
    ) -> str | None:
        """Run the turn; its run's status (None: it was stopped before it started)."""
        if turn.stopped_before_start:
            await self._complete(turn)
            return None
        # The card goes up at once: reading the question's files and the model's first
        # words may take a minute, and the person must see meanwhile that the bot is on it.
        live = LiveAnswer(self._live_reply(message))
        live.show_at_once()
        cards.append(live)
        run_id = uuid.uuid4().hex
        bind_log_context(conversation=key, run=run_id, message=message.message_id)
        started_at = self._clock()
        loaded = await self._conversations.load(key, history_limit=self._history_messages)
        # Messages that arrived while this turn waited for a slot are part of its question.
        early = turn.interrupts.drain()
        # A /stop while the question's files are read cancels the reading (and the reader
        # processes with it), not only what comes after.
        question = await turn.before_start(
            build_question(message, early, loaded, self._media, earlier=extras.earlier)
        )
        profile = self._profiles.for_chat(message.chat_id, message.chat_type)
        agent = None
        if question is not None:
            memories = await self._memories(message, question.query, profile)
            agent = await self._agent_factory(extras.mode, profile, memories)
        if question is None or agent is None or turn.stopped_before_start:
            # A /stop while the question was read (downloads) or the agent made: the run
            # has not bound the queue yet, so the stop was left here for it.
            await live.end_unanswered(texts.STOPPED_CARD)
            await self._complete(turn)
            return None
        model = getattr(agent.llm, "model", None) or ""
        start = Started(run_id, key, started_at, loaded, model, profile_name(profile))
        events = self._events.open(
            run_id,
            conversation_id=loaded.conversation_id,
            scope_key=key,
            message_id=message.message_id,
            model=start.model,
            started_at=started_at,
        )
        opened.append(events)
        live.on_answer = events.answer
        if question.problems:  # what could not be read is said first, whatever follows
            live.add_answer(problems_text(question.problems) + "\n\n")
        if not question.answerable:
            turn.close()
            result = nothing_to_run(run_id, start.model)
            answer, outcome = live.reply.view.answer.strip(), await live.reply.finish()
            finished = finished_turn(
                turn, message, question, start, result, answer, outcome, self._owner
            )
            await self._record(finished, result, events)
            return result.status
        parking = None
        if not extras.scheduled_task:  # a scheduled run has no claim to be taken over by
            parking = self._parking(turn, live, facts_of(message, start, question.remembered))
        result = await agent.run(
            question.query,
            history=question.history,
            images=question.images,
            interrupt_queue=turn.interrupts,
            on_event=fan_out(events.on_event, live.on_event),
            deps=context_of_turn(
                message, start, live, turn, extras.scheduled_task, parking, profile
            ),
            run_id=run_id,
        )
        ran = Ran(agent, question, start, result, live, events, parking)
        return await self._conclude(turn, message, ran, scheduled=bool(extras.scheduled_task))

    async def _memories(self, message: InboundMessage, query: str, profile: Profile | None) -> str:
        """The run's memory section: none where memory is off (the settings, the profile),
        and none when the recall fails (the question is answered without them)."""
        if self._recall is None or (profile is not None and not profile.memory):
            return ""
        try:
            return await self._recall(message, query)
        except Exception:
            logger.exception("recalling memories failed; answering without them")
            return ""

    async def _conclude(
        self, turn: Turn, message: InboundMessage, ran: Ran, *, scheduled: bool = False
    ) -> str:
        """After the run: the answer on the card, then the turn on record."""
        # The agent reads no more interrupts: later messages start the next turn.
        turn.close()
        # Those it answered: the messages it never read went back to the queue.
        joined_before = ran.parking.joined_before if ran.parking is not None else ()
        askers = Askers.of(
            message.sender_open_id,
            tuple(j.sender for j in joined_before) + turn.joined_senders(),
        )
        answer, outcome = await self._answer(
            message, askers, ran.agent, ran.question, ran.result, ran.live, ran.start
        )
        finished = finished_turn(
            turn,
            message,
            ran.question,
            ran.start,
            ran.result,
            answer,
            outcome,
            self._owner,
            joined_before=joined_before,
        )
        if scheduled:  # its message is our own header: no claim to complete
            finished = replace(finished, completed_message_ids=())
        if ran.parking is not None and ran.parking.saved:
            settled = ran.parking.settled
            finished = replace(
                finished,
                checkpointed=True,
                completed_message_ids=tuple(
                    i for i in finished.completed_message_ids if i not in settled
                ),
            )
        await self._record(finished, ran.result, ran.events)
        if finished.checkpointed and self._checkpoints is not None:
            # A saved run may end with a wait its resumed run never met again (the call's
            # tool not offered any more: read-only mode, a tool gone): its card closes too.
            try:
                await self._checkpoints.abandoned(finished.run_id, texts.RUN_ENDED_WITHOUT_IT)
            except Exception:
                logger.exception("closing what run %s left waiting failed", finished.run_id)
        return ran.result.status

    def _parking(self, turn: Turn, live: LiveAnswer, facts: TurnFacts) -> TurnParking | None:
        if self._checkpoints is None:
            return None
        return TurnParking(
            store=self._checkpoints.store,
            seal=self._checkpoints.seal,
            owner=self._owner,
            facts=facts,
            turn=turn,
            live=live,
        )

    async def _resume(
        self,
        turn: Turn,
        message: InboundMessage,
        key: str,
        stored: StoredCheckpoint,
        opened: list[RunPublisher],
        cards: list[LiveAnswer],
        notice: str | None,
    ) -> str | None:
        """Go on with a saved run (see ``resumer_for``); its status."""
        assert self._checkpoints is not None, "resumed runs need checkpoints"
        bind_log_context(conversation=key, run=stored.run_id, message=message.message_id)
        live = LiveAnswer(self._live_reply(message))
        cards.append(live)
        try:
            parked = decode(stored, self._checkpoints.seal)
        except UnusableCheckpoint as exc:
            return await self._abandon(turn, message, stored, live, texts.cannot_resume(str(exc)))
        if parked.card is not None:
            live.reply.adopt(parked.card)  # the same card, where Feishu still lets us
        live.restore(parked.engine.steps)
        live.show_at_once()
        if notice is not None:
            return await self._abandon(turn, message, stored, live, notice)
        if turn.stopped_before_start:
            return await self._abandon(turn, message, stored, live, texts.STOPPED_CARD)
        loaded = await self._conversations.load(key, history_limit=self._history_messages)
        if loaded.generation != parked.generation:
            return await self._abandon(turn, message, stored, live, texts.RESET_WHILE_WAITING)
        # The chat's profile as configured now: a profile that lost a tool meanwhile
        # refuses the call it waited for.
        profile = self._profiles.for_chat(message.chat_id, message.chat_type)
        # Only a ReAct run is saved (not a plan).
        agent = await self._agent_factory("react", profile, "")
        if not isinstance(agent, ReActAgent):
            return await self._abandon(turn, message, stored, live, texts.cannot_resume("no agent"))
        start = Started(
            parked.run_id, key, parked.started_at, loaded, parked.model, profile_name(profile)
        )
        events = self._events.open(
            parked.run_id,
            conversation_id=loaded.conversation_id,
            scope_key=key,
            message_id=message.message_id,
            model=start.model,
            started_at=start.started_at,
        )
        opened.append(events)
        live.on_answer = events.answer
        facts = facts_of(message, start, parked.remembered, joined_before=parked.joined_before)
        parking = self._parking(turn, live, facts)
        if parking is not None:
            parking.saved = True  # its checkpoint is in the database: the finish deletes it
        logger.info("resuming run %s, saved by %s", parked.run_id, stored.owner)
        result = await agent.resume(
            parked.engine,
            interrupt_queue=turn.interrupts,
            on_event=fan_out(events.on_event, live.on_event),
            deps=context_of_turn(message, start, live, turn, "", parking, profile),
        )
        question = Question(parked.engine.query, [], remembered=parked.remembered)
        ran = Ran(agent, question, start, result, live, events, parking)
        return await self._conclude(turn, message, ran)

    async def _abandon(
        self,
        turn: Turn,
        message: InboundMessage,
        stored: StoredCheckpoint,
        live: LiveAnswer,
        notice: str,
    ) -> str:
        """A saved run that cannot go on: its card says why, what it waited for is closed,
        and its message is done (never silently)."""
        assert self._checkpoints is not None
        logger.warning("run %s not resumed: %s", stored.run_id, notice)
        turn.close()
        try:
            await self._checkpoints.abandoned(stored.run_id, notice)
        except Exception:
            logger.exception("closing what run %s waited for failed", stored.run_id)
        live.show_at_once()
        await live.end_unanswered(notice)
        finished = FinishedTurn(
            scope_key=stored.scope_key,
            generation=stored.generation,
            run_id=stored.run_id,
            message_id=message.message_id,
            status="cancelled",
            model="",
            error=notice,
            started_at=stored.created_at,
            completed_message_ids=tuple(job.message_id for job in (turn.job, *turn.joined)),
            owner=self._owner,
            checkpointed=True,
        )
        await self._journal.finish_turn(finished)
        for message_id in finished.completed_message_ids:
            self._in_flight.done(message_id)
        return "cancelled"

    async def _record(
        self, finished: FinishedTurn, result: AgentResult, events: RunPublisher
    ) -> None:
        log_finished(finished, result)
        conversation_id = await self._journal.finish_turn(finished)
        # After the answer finished and the run is on record: a console that sees ``done``
        # finds the run in ``GET /api/runs`` too.
        events.done(
            status=result.status,
            iterations=result.iterations,
            usage=result.total_usage.as_dict(),
            tool_calls=len(result.steps),
            error=result.error,
            conversation_id=conversation_id,
        )
        for message_id in finished.completed_message_ids:
            self._in_flight.done(message_id)

    async def _answer(
        self,
        message: InboundMessage,
        askers: Askers,
        agent: ChatAgent,
        question: Question,
        result: AgentResult,
        live: LiveAnswer,
        start: Started,
    ) -> tuple[str | None, ReplyOutcome | None]:
        """Stream the answer into the live card; returns the answer text and the outcome."""
        if result.status in ("cancelled", "error"):  # no answer is streamed: count it now
            await self._usage(message, askers, result)
        if result.status == "cancelled":
            if not live.started:
                return None, None  # nothing was shown; the /stop reply says it all
            live.stopped(texts.STOPPED_CARD)
            return None, await live.reply.finish()
        if result.status == "error":
            logger.error("run %s ended with an error: %s", result.run_id, result.error)
            text = error_text(result, self._model_deadline)
            live.add_answer(text)
            return text, await live.reply.finish()
        if not result.answer_streamed:
            # No final reply streamed in as the answer (JSON mode, plan mode, a run cut
            # short, LARKGATE_SYNTHESIS=always): synthesis writes it now. Otherwise it is
            # on the card already, from the run's answer events.
            async for delta in agent.stream_answer(question.query, result):
                live.add_answer(delta)
        answer = live.reply.view.answer.strip()
        if not answer:  # synthesis said nothing at all: show what the run found
            answer = result.answer
            live.add_answer(answer)
        # After the answer streamed, so its tokens count too (``total_usage`` includes them).
        usage_line = await self._usage(message, askers, result)
        footer = answer_footer(result, self._clock() - start.started_at, start.model)
        if usage_line:
            footer = f"{footer} · {usage_line}"
        return answer, await live.reply.finish(footer)

    async def _usage(self, message: InboundMessage, askers: Askers, result: AgentResult) -> str:
        if self._record_usage is None:
            return ""
        try:
            return await self._record_usage(message, askers, result.total_usage.total_tokens)
        except Exception:  # a budget counter must not cost the user the answer
            logger.exception("recording usage for %s failed", message.message_id)
            return ""

    async def _complete(self, turn: Turn) -> None:
        for job in (turn.job, *turn.joined):
            await self._ledger.complete(job.message_id, owner=self._owner)
            self._in_flight.done(job.message_id)

    async def _release(self, turn: Turn) -> None:
        for job in (turn.job, *turn.joined):
            try:
                await self._ledger.release(job.message_id, owner=self._owner)
            except Exception:
                logger.exception("releasing %s failed", job.message_id)
            self._in_flight.done(job.message_id)
