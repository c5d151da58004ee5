"""What ``GET /metrics`` shows: the bot's counters and gauges in Prometheus text format.

One :class:`Metrics` per app, on a registry of its own (not prometheus-client's global
one: tests start many apps in one process, and two apps must not share counts). The
layers do not import this module: the composition root hands each one a plain callback
(``FeishuClient(on_call=...)``, ``EventIntake(on_duplicate=...)``, ``TurnRunner(on_run=...)``,
``ApprovalStore(on_outcome=...)``) or wraps what it owns (:class:`MeteredLLM`).

Every counter is per process; a fleet is summed by Prometheus. Approval outcomes are
counted by the process whose conditional update won, so each approval ends exactly
once across the fleet.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from bot.engine.llm import LLM, LLMResponse, StreamDelta
from bot.engine.messages import Usage

# The classic text format, understood by every Prometheus: our names are all legacy-valid,
# so the body is the same whatever prometheus-client calls its latest (1.0.0 in recent ones).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EVENT_KINDS = ("message", "card", "other")
# The engine's run statuses, and "failed": the turn itself raised (its message is
# handed back to be retried).
RUN_STATUSES = ("completed", "max_iterations", "cycle_stopped", "cancelled", "error", "failed")
LLM_KINDS = ("loop", "stream")
TOKEN_TYPES = ("prompt", "completion")
APPROVAL_OUTCOMES = ("approved", "approved_session", "denied", "expired", "cancelled")
# Runs include the tool loop, approvals (up to their TTL) and the streamed answer.
RUN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class Metrics:
    """The bot's metrics, with one small method per thing that happens."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.events_received = Counter(
            "larkgate_events_received_total",
            "Verified Feishu pushes, redeliveries included, by kind.",
            ["kind"],
            registry=registry,
        )
        self.duplicate_events = Counter(
            "larkgate_duplicate_events_total",
            "Message events dropped by the dedup claim (redeliveries and replays).",
            registry=registry,
        )
        self.runs = Counter(
            "larkgate_runs_total",
            "Agent runs that ended, by status.",
            ["status"],
            registry=registry,
        )
        self.run_duration = Histogram(
            "larkgate_run_duration_seconds",
            "Wall time of a turn: the agent run, approvals and the streamed answer.",
            buckets=RUN_BUCKETS,
            registry=registry,
        )
        self.llm_calls = Counter(
            "larkgate_llm_calls_total",
            "Calls to the model: loop (whole replies: structured calls, a loop that does not "
            "stream) or stream (streamed replies: the tool loop in native mode, synthesis).",
            ["kind"],
            registry=registry,
        )
        self.llm_errors = Counter(
            "larkgate_llm_errors_total",
            "Model calls that raised (after the provider's own retries).",
            ["kind"],
            registry=registry,
        )
        self.llm_tokens = Counter(
            "larkgate_llm_tokens_total",
            "Tokens the model reported, by type.",
            ["type"],
            registry=registry,
        )
        self.feishu_calls = Counter(
            "larkgate_feishu_api_calls_total",
            'Feishu OpenAPI HTTP attempts by endpoint and code ("0" success, '
            '"transport" no usable answer).',
            ["endpoint", "code"],
            registry=registry,
        )
        self.approvals = Counter(
            "larkgate_approvals_total",
            "Approvals that ended, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.read_only = Gauge(
            "larkgate_read_only",
            "1 while the organisation is in read-only mode.",
            registry=registry,
        )
        self.in_flight = Gauge(
            "larkgate_in_flight_messages",
            "Messages this process has claimed and not finished.",
            registry=registry,
        )
        self.feishu_api_calls_month = Gauge(
            "larkgate_feishu_api_calls_month",
            "Feishu API calls this month, by every process (the ledger, plus this process's"
            " calls since its last flush).",
            registry=registry,
        )
        self.feishu_api_budget_level = Gauge(
            "larkgate_feishu_api_budget_level",
            "The Feishu API budget step answers are delivered at: 0 live, 1 fewer updates,"
            " 2 finished cards, 3 text only.",
            registry=registry,
        )
        self.long_connection = Gauge(
            "larkgate_long_connection_state",
            "The Feishu long connection (ws event mode): 1 for its current state.",
            ["state"],
            registry=registry,
        )
        self._connection_states: set[str] = set()
        # A message counts ~10 series, and prometheus-client's inc() validates and takes a
        # lock each time (~1.5 µs): the hot counts add up in a plain dict, by series, and
        # reach the counters when they are read (`render`). Everything counts on the event
        # loop's thread, as render does, so nothing is counted between the two.
        self._pending: dict[tuple[Counter, tuple[str, ...]], float] = {}
        self._children: dict[tuple[Counter, tuple[str, ...]], Any] = {}
        # Known label values start at 0, so a rate() has a series from the first scrape.
        for kind in EVENT_KINDS:
            self.events_received.labels(kind)
        for status in RUN_STATUSES:
            self.runs.labels(status)
        for kind in LLM_KINDS:
            self.llm_calls.labels(kind)
            self.llm_errors.labels(kind)
        for token_type in TOKEN_TYPES:
            self.llm_tokens.labels(token_type)
        for outcome in APPROVAL_OUTCOMES:
            self.approvals.labels(outcome)

    # -- what happened ------------------------------------------------------------------

    def _inc(self, metric: Counter, *labels: str, amount: float = 1) -> None:
        series = (metric, labels)
        pending = self._pending
        pending[series] = pending.get(series, 0) + amount

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for series, amount in pending.items():
            child = self._children.get(series)
            if child is None:  # labels() validates the values once per series
                metric, labels = series
                child = self._children[series] = metric.labels(*labels) if labels else metric
            child.inc(amount)

    def event_received(self, kind: str) -> None:
        self._inc(self.events_received, kind if kind in EVENT_KINDS else "other")

    def duplicate_event(self) -> None:
        self._inc(self.duplicate_events)

    def run_finished(self, status: str, seconds: float) -> None:
        self._inc(self.runs, status)
        self.run_duration.observe(max(0.0, seconds))

    def llm_call(self, kind: str) -> None:
        self._inc(self.llm_calls, kind)

    def llm_error(self, kind: str) -> None:
        self._inc(self.llm_errors, kind)

    def llm_usage(self, usage: Usage) -> None:
        # A provider's counts are whatever it sent: a negative one is not counted (a
        # counter only goes up, and prometheus-client raises on the attempt).
        if usage.prompt_tokens > 0:
            self._inc(self.llm_tokens, "prompt", amount=usage.prompt_tokens)
        if usage.completion_tokens > 0:
            self._inc(self.llm_tokens, "completion", amount=usage.completion_tokens)

    def feishu_call(self, endpoint: str, code: str) -> None:
        """``FeishuClient``'s ``on_call``: one HTTP attempt and how it ended."""
        self._inc(self.feishu_calls, endpoint, code)

    def approval_outcome(self, outcome: str) -> None:
        """``ApprovalStore``'s ``on_outcome``: an approval ended (one count per approval)."""
        self._inc(self.approvals, outcome)

    def set_read_only(self, on: bool) -> None:
        self.read_only.set(1 if on else 0)

    def track_api_usage(self, calls: Callable[[], int], level: Callable[[], int]) -> None:
        """Read the month's Feishu API calls (every process's) and the budget step at each
        scrape."""
        self.feishu_api_calls_month.set_function(lambda: float(calls()))
        self.feishu_api_budget_level.set_function(lambda: float(level()))

    def track_in_flight(self, count: Callable[[], int]) -> None:
        """Read the in-flight count at each scrape."""
        self.in_flight.set_function(lambda: float(count()))

    def set_long_connection_state(self, state: str) -> None:
        """The long connection's state (e.g. connecting, connected, reconnecting, closed):
        its series is 1, every state seen before is 0."""
        self._connection_states.add(state)
        for known in self._connection_states:
            self.long_connection.labels(known).set(1 if known == state else 0)

    # -- exposition ---------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type, for ``GET /metrics``."""
        self._flush()
        return generate_latest(self.registry), CONTENT_TYPE


class MeteredLLM:
    """An LLM that counts its calls and tokens; everything else is the wrapped LLM's.

    ``chat`` counts as ``loop`` (the tool loop, tool selection and structured calls),
    ``stream_chat`` as ``stream`` (the streamed answer). Tokens come from each response's
    ``usage`` (a stream reports it on its last delta).
    """

    def __init__(self, llm: LLM, metrics: Metrics) -> None:
        self.wrapped = llm
        self._metrics = metrics

    @property
    def model(self) -> str:
        return self.wrapped.model

    @property
    def abilities(self) -> Mapping[str, bool]:
        return self.wrapped.abilities

    async def chat(self, messages: Sequence[Any], **options: Any) -> LLMResponse:
        self._metrics.llm_call("loop")
        try:
            response = await self.wrapped.chat(messages, **options)
        except Exception:
            self._metrics.llm_error("loop")
            raise
        self._metrics.llm_usage(response.usage)
        return response

    async def stream_chat(
        self, messages: Sequence[Any], **options: Any
    ) -> AsyncIterator[StreamDelta]:
        self._metrics.llm_call("stream")
        stream = None
        try:
            stream = self.wrapped.stream_chat(messages, **options)
            async for delta in stream:
                if delta.usage is not None:
                    self._metrics.llm_usage(delta.usage)
                yield delta
        except Exception:
            self._metrics.llm_error("stream")
            raise
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    def __getattr__(self, name: str) -> Any:
        # Anything else the wrapped LLM offers (its settings, aclose, ...).
        if name == "wrapped":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)
