"""GET /metrics end to end: what a message, a redelivery, a click and a mode switch count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.engine import LLMResponse, StreamDelta
from bot.engine.llm import LLMTransientError
from bot.engine.messages import Usage
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.metrics import MeteredLLM, Metrics

from e2e.harness import Bot, running_bot, settings_for
from fakes.openai_server import FakeOpenAIServer, Reply
from support.cards import nodes
from support.deploy import Deployer, deploying
from support.feishu import feishu_config
from support.model_calls import is_synthesis

ADMIN = "ou_admin"


@pytest.fixture
def llm_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.handler = answering
    return fake_openai


def answering(body: Mapping[str, Any]) -> Reply:
    """The loop's streamed call, whose final reply is the answer (11 + 3 tokens); synthesis
    (9 + 4 tokens) only with LARKGATE_SYNTHESIS=always."""
    if is_synthesis(body):
        return Reply(content="Here it is", usage={"prompt_tokens": 9, "completion_tokens": 4})
    return Reply(content="Here", usage={"prompt_tokens": 11, "completion_tokens": 3})


class Scrape:
    """One parsed exposition: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def labelled(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


async def scrape(bot: Bot) -> Scrape:
    async with bot.session.get(bot.url + "/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return Scrape(await response.text())


async def test_a_message_and_its_redelivery(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server) as bot:
        before = await scrape(bot)
        assert before.value("larkgate_events_received_total", kind="message") == 0
        assert before.value("larkgate_runs_total", status="completed") == 0
        assert before.value("larkgate_read_only") == 0

        assert await bot.say("om_1", "hello") == 200
        await bot.reply("om_1")
        await bot.settle()
        assert await bot.say("om_1", "hello") == 200  # Feishu redelivers it
        await bot.settle()
        metrics = await scrape(bot)

    assert metrics.value("larkgate_events_received_total", kind="message") == 2
    assert metrics.value("larkgate_events_received_total", kind="card") == 0
    assert metrics.value("larkgate_duplicate_events_total") == 1
    assert metrics.value("larkgate_runs_total", status="completed") == 1
    assert metrics.value("larkgate_run_duration_seconds_count") == 1
    assert metrics.value("larkgate_run_duration_seconds_sum") > 0
    # One streamed call: the loop's final reply is the answer.
    assert metrics.value("larkgate_llm_calls_total", kind="loop") == 0
    assert metrics.value("larkgate_llm_calls_total", kind="stream") == 1
    assert metrics.value("larkgate_llm_tokens_total", type="prompt") == 11
    assert metrics.value("larkgate_llm_tokens_total", type="completion") == 3
    assert metrics.value("larkgate_in_flight_messages") == 0
    feishu_calls = metrics.labelled("larkgate_feishu_api_calls_total")
    by_endpoint = {dict(labels)["endpoint"]: dict(labels)["code"] for labels in feishu_calls}
    assert by_endpoint["im.message.reply"] == "0"
    assert by_endpoint["auth.tenant_token"] == "0"
    assert metrics.value(
        "larkgate_feishu_api_calls_total", endpoint="im.message.reply", code="0"
    ) == len(bot.replies_to("om_1"))
    assert all(dict(labels)["code"] == "0" for labels in feishu_calls)
    # Nothing secret or per-user in the exposition.
    assert not any("ou_user" in str(labels) for labels in metrics.samples)


async def test_an_approval_click_counts_its_outcome(tmp_path, feishu, llm_server):
    llm_server.handler = deploying(["api"])
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server, tools=[Deployer().tool()]) as bot:
        await bot.say("om_a", "deploy api")
        await bot.wait_for(lambda: bool(approval_buttons(bot, "om_a")))
        card, value = approval_buttons(bot, "om_a")[0]
        answer = await bot.click(value, by=ADMIN, card_message_id=card)
        assert answer["toast"]["type"] == "success"
        await bot.reply("om_a")
        await bot.settle()
        metrics = await scrape(bot)

    assert metrics.value("larkgate_events_received_total", kind="card") == 1
    assert metrics.value("larkgate_approvals_total", outcome="approved") == 1
    assert metrics.value("larkgate_approvals_total", outcome="denied") == 0
    assert metrics.value("larkgate_runs_total", status="completed") == 1


def approval_buttons(bot: Bot, message_id: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for message in bot.replies_to(message_id):
        for element in nodes(message.content):
            value = element.get("value")
            if isinstance(value, dict) and value.get("decision") == "approve":
                found.append((message.message_id, value))
    return found


async def test_the_read_only_gauge_follows_the_admin_switch(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        assert (await scrape(bot)).value("larkgate_read_only") == 0
        await bot.say("om_r1", "/readonly on", sender_open_id=ADMIN)
        await bot.wait_for(lambda: bool(bot.replies_to("om_r1")))
        assert (await scrape(bot)).value("larkgate_read_only") == 1
        await bot.say("om_r2", "/readonly off", sender_open_id=ADMIN)
        await bot.wait_for(lambda: bool(bot.replies_to("om_r2")))
        assert (await scrape(bot)).value("larkgate_read_only") == 0


async def test_feishu_failures_are_counted_by_code(feishu):
    metrics = Metrics()
    config = feishu_config(feishu, verification_token="", encrypt_key="")
    async with FeishuClient(config, on_call=metrics.feishu_call) as client:
        await client.bot_info()
        feishu.fail("POST", r"/reply$", 230011)
        with pytest.raises(FeishuError):
            await client.reply_message("om_x", msg_type="text", content='{"text": "hi"}')
        feishu.fail("POST", r"/reply$", 0, http_status=502, raw_body="<html>bad gateway</html>")
        with pytest.raises(FeishuError):
            await client.reply_message("om_x", msg_type="text", content='{"text": "hi"}')
    scraped = Scrape(metrics.render()[0].decode())
    calls = "larkgate_feishu_api_calls_total"
    assert scraped.value(calls, endpoint="bot.info", code="0") == 1
    assert scraped.value(calls, endpoint="auth.tenant_token", code="0") == 1
    assert scraped.value(calls, endpoint="im.message.reply", code="230011") == 1
    assert scraped.value(calls, endpoint="im.message.reply", code="transport") == 1


class ScriptedLLM:
    model = "scripted"
    abilities: Mapping[str, bool] = {"tool_call": True}

    def __init__(self) -> None:
        self.fail = False
        self.closed = False

    async def chat(self, messages, **options) -> LLMResponse:
        if self.fail:
            raise LLMTransientError("down")
        return LLMResponse(content="ok", usage=Usage(5, 2, 7))

    async def stream_chat(self, messages, **options):
        yield StreamDelta(content="a")
        yield StreamDelta(content="b", usage=Usage(3, 1, 4))

    async def aclose(self) -> None:
        self.closed = True


async def test_metered_llm_counts_calls_tokens_and_errors():
    metrics, inner = Metrics(), ScriptedLLM()
    llm = MeteredLLM(inner, metrics)
    assert llm.model == "scripted" and llm.abilities["tool_call"]
    assert (await llm.chat([])).content == "ok"
    assert [d.content async for d in llm.stream_chat([])] == ["a", "b"]
    inner.fail = True
    with pytest.raises(LLMTransientError):
        await llm.chat([])
    await llm.aclose()  # anything else is the wrapped LLM's
    assert inner.closed
    scraped = Scrape(metrics.render()[0].decode())
    assert scraped.value("larkgate_llm_calls_total", kind="loop") == 2
    assert scraped.value("larkgate_llm_calls_total", kind="stream") == 1
    assert scraped.value("larkgate_llm_errors_total", kind="loop") == 1
    assert scraped.value("larkgate_llm_tokens_total", type="prompt") == 8
    assert scraped.value("larkgate_llm_tokens_total", type="completion") == 3


async def test_token_counts_a_provider_got_wrong_do_not_break_the_answer_or_the_scrape():
    class NegativeUsage(ScriptedLLM):
        async def stream_chat(self, messages, **options):
            yield StreamDelta(content="a", usage=Usage(-3, -1, -4))

    metrics = Metrics()
    llm = MeteredLLM(NegativeUsage(), metrics)
    assert [d.content async for d in llm.stream_chat([])] == ["a"]
    assert (await llm.chat([])).content == "ok"
    scraped = Scrape(metrics.render()[0].decode())
    assert scraped.value("larkgate_llm_tokens_total", type="prompt") == 5
    assert scraped.value("larkgate_llm_tokens_total", type="completion") == 2
    assert scraped.value("larkgate_llm_errors_total", kind="stream") == 0


def test_counts_between_two_scrapes_are_added_once():
    metrics = Metrics()
    metrics.event_received("message")
    metrics.feishu_call("im.message.reply", "0")
    first = Scrape(metrics.render()[0].decode())
    metrics.event_received("message")
    metrics.event_received("nonsense")
    second = Scrape(metrics.render()[0].decode())
    third = Scrape(metrics.render()[0].decode())
    received = "larkgate_events_received_total"
    assert first.value(received, kind="message") == 1
    assert second.value(received, kind="message") == 2
    assert second.value(received, kind="other") == 1
    assert third.value(received, kind="message") == 2
    calls = "larkgate_feishu_api_calls_total"
    assert third.value(calls, endpoint="im.message.reply", code="0") == 1


def test_registries_are_per_app_and_the_connection_state_is_one_hot():
    first, second = Metrics(), Metrics()
    first.duplicate_event()
    first.set_long_connection_state("connecting")
    first.set_long_connection_state("connected")
    one, two = Scrape(first.render()[0].decode()), Scrape(second.render()[0].decode())
    assert one.value("larkgate_duplicate_events_total") == 1
    assert two.value("larkgate_duplicate_events_total") == 0
    assert one.value("larkgate_long_connection_state", state="connected") == 1
    assert one.value("larkgate_long_connection_state", state="connecting") == 0
    assert two.labelled("larkgate_long_connection_state") == {}
