"""Auto mode's choice: the rule where it can tell, one small call where it cannot."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import LLMResponse, ModeSelector, Usage, choose_mode, rule_mode
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response


@pytest.mark.parametrize(
    "question",
    [
        "Weather in Paris, London and Tokyo?",
        "Compare the prices of AAPL, MSFT, GOOG, and AMZN",
        "北京、上海和广州今天的天气怎么样？",
        "查一下北京、上海、深圳的人口",
        "What is the capital of Peru? And what is its population?",
        "今天星期几？明天呢？",
        "Please check:\n1. the build status\n2. open incidents\n3. the on-call rota",
        "Todo:\n- renew the certificate\n- rotate the keys",
        "请帮我查：\n1、销售额\n2、利润",
    ],
)
def test_the_rule_plans_several_independent_questions(question: str):
    choice = rule_mode(question)
    assert choice is not None and choice.mode == "dag" and choice.source == "rule"


@pytest.mark.parametrize(
    "question",
    [
        "What's the weather in Paris?",
        "北京今天天气怎么样？",
        "Hi, what time is it in Tokyo?",
        "Summarise the last release notes",
        "Is the API up and running?",
        "really??",
    ],
)
def test_the_rule_sends_a_short_single_question_to_react(question: str):
    choice = rule_mode(question)
    assert choice is not None and choice.mode == "react"


@pytest.mark.parametrize(
    "question",
    [
        "Look at the sales and the costs, then tell me whether we should hire someone this "
        "quarter given how the pipeline looks",
        "我想了解一下我们团队在过去三个月里的项目进展情况以及主要遇到的问题和可能的解决办法，请详细说明",
    ],
)
def test_the_rule_leaves_a_long_question_open(question: str):
    assert rule_mode(question) is None


async def test_an_open_question_costs_one_small_call():
    llm = ScriptedLLM([tool_calls_response(tool_call("choose_mode", {"mode": "dag"}))])
    question = "Look at the sales and the costs, then tell me whether we should hire " * 2
    choice = await ModeSelector(llm).choose(question)
    assert (choice.mode, choice.source, choice.usage) == ("dag", "model", Usage(10, 5, 15))
    assert len(llm.calls) == 1
    assert llm.calls[0].tool_choice == {"type": "function", "function": {"name": "choose_mode"}}
    assert question in llm.calls[0].messages[0].content


async def test_a_short_question_costs_nothing():
    llm = ScriptedLLM([])
    assert await choose_mode(llm, "What's the weather in Paris?") == "react"
    assert llm.calls == []


async def test_a_classification_that_fails_means_react():
    llm = ScriptedLLM([LLMResponse(content="no idea")] * 5)
    choice = await ModeSelector(llm).choose("Look at the sales and the costs and think " * 4)
    assert (choice.mode, choice.source) == ("react", "default")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_the_rule_never_fails(question: str):
    choice = rule_mode(question)
    assert choice is None or choice.mode in ("react", "dag")


def test_the_rule_is_cheap_on_a_long_message():
    hostile = ("word, " * 2000) + ("a " * 4000) + ("、" * 2000)
    started = time.perf_counter()
    rule_mode(hostile)
    # Generous: a backtracking regex would take seconds on this.
    assert time.perf_counter() - started < 1.0
