"""The endpoint probe against fake servers that behave as real ones do (native tool
calls, tools ignored or refused, JSON mode refused, a hung server, a context length said
in /models), over the real openai SDK; and the model whose abilities come from it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from bot.engine.llm import DEFAULT_ABILITIES
from bot.engine.messages import Message
from bot.engine.openai_compat import OpenAICompatibleLLM
from bot.engine.probe import PROBE_HEADER, EndpointReport, probe_endpoint
from bot.engine.probed_llm import ProbedLLM, chosen_abilities, fitted_budget

from fakes.openai_server import FakeOpenAIServer, Reply

MODEL = "local-model"


async def probe(server: FakeOpenAIServer, **options: Any) -> EndpointReport:
    return await probe_endpoint(server.base_url, "sk-test", MODEL, **options)


def playing(server: FakeOpenAIServer, answer) -> None:
    """The server answers the probe's requests itself, as ``answer(body)`` says."""
    server.answers_probes = False
    server.handler = answer


def tool_call(body: dict) -> Reply:
    name = body["tools"][0]["function"]["name"]
    return Reply(tool_calls=[("call_1", name, {"city": "Paris"})])


def vllm_error(message: str) -> Reply:
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    return Reply(status=400, body=body)


# -- what the probe finds -----------------------------------------------------------------------


async def test_a_server_with_native_tool_calls(fake_openai):
    def server(body):
        if body.get("tools"):
            return tool_call(body)
        return Reply(content='{"ok": true}')

    playing(fake_openai, server)
    report = await probe(fake_openai)
    assert (report.tool_calls, report.json_mode, report.notes) == ("native", "accepted", ())
    sent = [r.body for r in fake_openai.requests]
    assert len(sent) == 2  # one tool request (not forced, as the loop sends), one JSON request
    tool_request = next(b for b in sent if b.get("tools"))
    assert "tool_choice" not in tool_request and tool_request["max_tokens"] <= 256
    assert next(b for b in sent if not b.get("tools"))["response_format"] == {"type": "json_object"}
    marked = [{k.lower() for k in r.headers} for r in fake_openai.requests]
    assert all(PROBE_HEADER.lower() in headers for headers in marked)


async def test_the_fake_answers_the_probe_natively_without_touching_the_script(fake_openai):
    fake_openai.push_text("for a question")
    report = await probe(fake_openai)
    assert (report.tool_calls, report.json_mode) == ("native", "accepted")
    assert fake_openai.pending == 1 and fake_openai.requests == []
    assert len(fake_openai.probes) == 2


async def test_a_server_that_ignores_tools_and_answers_in_text(fake_openai):
    playing(fake_openai, lambda body: Reply(content="It is 3 pm in Paris."))
    report = await probe(fake_openai)
    assert (report.tool_calls, report.json_mode) == ("ignored", "accepted")
    forced = [r.body.get("tool_choice") for r in fake_openai.requests if r.body.get("tools")]
    assert forced == [None, {"type": "function", "function": {"name": "get_current_time"}}]
    assert chosen_abilities(report, "auto")["tool_call"] is False


async def test_a_server_that_calls_tools_only_when_forced(fake_openai):
    # vLLM started without --enable-auto-tool-choice: the loop's requests would all fail.
    def vllm(body):
        if body.get("tools") and not body.get("tool_choice"):
            return vllm_error(
                '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set"
            )
        return tool_call(body) if body.get("tools") else Reply(content="{}")

    playing(fake_openai, vllm)
    report = await probe(fake_openai)
    assert report.tool_calls == "forced"
    assert "--enable-auto-tool-choice" in report.describe()
    assert chosen_abilities(report, "auto")["tool_call"] is False


@pytest.mark.parametrize(
    "refusal",
    [
        Reply.error(400, "registry.ollama.ai/library/gemma3:4b does not support tools"),
        # llama.cpp built before --jinja was on by default, started without it: a 500.
        Reply(
            status=500,
            body={
                "error": {
                    "code": 500,
                    "message": "tools param requires --jinja flag",
                    "type": "server_error",
                }
            },
        ),
    ],
    ids=["ollama", "llama.cpp without --jinja"],
)
async def test_a_server_that_refuses_tools(fake_openai, refusal):
    playing(fake_openai, lambda body: refusal if body.get("tools") else Reply(content="{}"))
    report = await probe(fake_openai)
    assert report.tool_calls == "refused"
    assert chosen_abilities(report, "auto")["tool_call"] is False


async def test_a_server_that_rejects_json_mode(fake_openai):
    def server(body):
        if body.get("response_format"):
            return Reply.error(400, "'response_format' of type 'json_object' is not supported")
        return tool_call(body)

    playing(fake_openai, server)
    report = await probe(fake_openai)
    assert (report.tool_calls, report.json_mode) == ("native", "refused")
    assert chosen_abilities(report, "auto") == {
        "tool_call": True,
        "tool_choice": True,
        "json_mode": False,
    }


async def test_a_hung_server_is_given_up_on_at_the_timeout(fake_openai):
    release = asyncio.Event()

    async def hung(body):
        await release.wait()
        return Reply(content="too late")

    playing(fake_openai, hung)
    try:
        report = await probe(fake_openai, request_timeout=0.2)
    finally:
        release.set()
    assert (report.tool_calls, report.json_mode) == ("unknown", "unknown")
    assert not report.answered and "timed out" in report.describe()
    assert chosen_abilities(report, "auto") == {
        "tool_call": True,
        "tool_choice": True,
        "json_mode": True,
    }  # what the probe could not tell keeps the defaults


async def test_an_unreachable_server_is_a_report_not_an_exception():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = await probe_endpoint(f"http://127.0.0.1:{port}/v1", "sk-test", MODEL)
    assert not report.answered and "could not connect" in report.describe()


async def test_a_reasoning_model_that_refuses_the_probes_limits_is_asked_without_them(
    fake_openai,
):
    # OpenAI's reasoning models: a refused sampling parameter says nothing about tools.
    refused = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this "
            "model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }

    def reasoning_model(body):
        if "max_tokens" in body or "temperature" in body:
            return Reply(status=400, body=refused)
        return tool_call(body) if body.get("tools") else Reply(content='{"ok": true}')

    playing(fake_openai, reasoning_model)
    report = await probe(fake_openai)
    assert (report.tool_calls, report.json_mode) == ("native", "accepted")
    assert all(r.body.get("max_completion_tokens") == 256 for r in fake_openai.requests[-2:])


async def test_a_reply_cut_at_max_tokens_tells_nothing(fake_openai):
    playing(fake_openai, lambda body: Reply(content="Let me think", finish_reason="length"))
    report = await probe(fake_openai)
    assert report.tool_calls == "unknown" and "max_tokens" in report.describe()


@pytest.mark.parametrize(
    ("listing", "props", "length", "source"),
    [
        ([{"id": MODEL, "object": "model", "max_model_len": 8192}], None, 8192, "max_model_len"),
        (
            [{"id": "other"}, {"id": MODEL, "context_length": 131072, "top_provider": {}}],
            None,
            131072,
            "context_length",
        ),
        ([{"id": MODEL, "context_window": 32768}], None, 32768, "context_window"),
        # llama.cpp lists its model by file and says only the trained length; /props has the
        # length the server was started with (-c).
        (
            [{"id": "/models/q.gguf", "owned_by": "llamacpp", "meta": {"n_ctx_train": 32768}}],
            {"default_generation_settings": {"n_ctx": 4096}},
            4096,
            "/props",
        ),
        (
            [{"id": "/models/q.gguf", "owned_by": "llamacpp", "meta": {"n_ctx_train": 32768}}],
            None,
            32768,
            "n_ctx_train",
        ),
        ([{"id": "a"}, {"id": "b"}], None, None, ""),
        ([], None, None, ""),
    ],
    ids=["vllm", "openrouter", "groq", "llama.cpp", "llama.cpp without /props", "not ours", "none"],
)
async def test_the_context_length_a_server_reports(fake_openai, listing, props, length, source):
    fake_openai.models = listing
    fake_openai.props = props
    report = await probe(fake_openai)
    assert report.context_length == length
    assert source in report.context_source


# -- the model whose abilities come from the probe ---------------------------------------------


class ScriptedProbe:
    """A probe that returns what the test gives it, when the test says."""

    def __init__(self, *reports: EndpointReport) -> None:
        self.reports = list(reports)
        self.calls = 0
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self) -> EndpointReport:
        self.calls += 1
        await self.release.wait()
        return self.reports.pop(0)


NATIVE = EndpointReport("native", "accepted")
IGNORED = EndpointReport("ignored", "accepted")
UNANSWERED = EndpointReport(notes=("could not connect",))


def probed(fake_openai, scripted, **options) -> tuple[ProbedLLM, OpenAICompatibleLLM]:
    inner = OpenAICompatibleLLM(fake_openai.base_url, "sk-test", MODEL, max_retries=0)
    return ProbedLLM(inner, scripted, **options), inner


@pytest.mark.parametrize(
    ("report", "setting", "native"),
    [
        (NATIVE, "auto", True),
        (IGNORED, "auto", False),
        (EndpointReport("forced", "accepted"), "auto", False),
        (EndpointReport("refused", "accepted"), "auto", False),
        (UNANSWERED, "auto", True),  # the defaults
        (IGNORED, "native", True),  # LLM_TOOL_CALLS=native overrides the probe
        (NATIVE, "json", False),  # LLM_TOOL_CALLS=json too
    ],
)
async def test_abilities_follow_the_probe_unless_the_setting_says(
    fake_openai, report, setting, native
):
    model, inner = probed(fake_openai, ScriptedProbe(report), tool_calls=setting)
    if setting == "auto":
        assert dict(model.abilities) == dict(DEFAULT_ABILITIES)  # before any probe
    await model.start(wait=5)
    await inner.aclose()
    assert model.abilities["tool_call"] is native
    assert model.abilities["streaming"] is True  # the rest is the wrapped model's
    assert ("JSON mode" in model.reason) is not native


async def test_start_up_does_not_wait_for_a_slow_probe(fake_openai):
    scripted = ScriptedProbe(IGNORED)
    scripted.release.clear()
    model, inner = probed(fake_openai, scripted)
    assert await model.start(wait=0.01) is None  # still probing: started on the defaults
    assert model.abilities["tool_call"] is True
    scripted.release.set()
    assert await model.settled() == IGNORED
    assert model.abilities["tool_call"] is False  # from the next run on
    await model.aclose()
    await inner.aclose()


async def test_an_endpoint_that_did_not_answer_is_probed_again_on_a_later_call(fake_openai):
    now = [0.0]
    scripted = ScriptedProbe(UNANSWERED, IGNORED)
    model, inner = probed(fake_openai, scripted, retry_after=60, clock=lambda: now[0])
    fake_openai.handler = lambda body: Reply(content="hello")
    await model.start(wait=5)
    assert model.abilities["tool_call"] is True

    await model.chat([Message.user("hi")])  # too soon to ask again
    assert scripted.calls == 1
    now[0] = 61.0
    await model.chat([Message.user("hi")])  # the call does not wait for the probe
    assert await model.settled() == IGNORED and scripted.calls == 2
    assert model.abilities["tool_call"] is False
    now[0] = 1000.0
    await model.chat([Message.user("hi")])  # answered: never asked again
    assert scripted.calls == 2
    await inner.aclose()


async def test_a_failing_probe_leaves_the_defaults(fake_openai):
    async def broken() -> EndpointReport:
        raise RuntimeError("boom")

    model, inner = probed(fake_openai, broken)
    report = await model.start(wait=5)
    await inner.aclose()
    assert report is not None and not report.answered and "RuntimeError" in report.describe()
    assert model.abilities["tool_call"] is True


@pytest.mark.parametrize(
    ("configured", "length", "budget"),
    [
        (96_000, None, 96_000),
        (96_000, 4096, 3072),  # a quarter left for the answer
        (96_000, 32_768, 24_576),
        (96_000, 131_072, 96_000),  # the configured budget fits already
        (2_000, 8192, 2_000),  # a smaller configured budget is kept
        (96_000, 512, 256),  # the guard's minimum
    ],
)
def test_the_context_budget_fits_what_the_server_holds(configured, length, budget):
    assert fitted_budget(configured, length) == budget
