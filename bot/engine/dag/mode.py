"""Auto mode: ReAct or a plan, chosen cheaply per question.

A rule decides first, at no cost: several independent sub-questions (a numbered or
bulleted list, two questions or more, an enumeration of three items or more: "Paris,
London and Tokyo", "北京、上海和广州") mean a plan; a short question with one question
in it means ReAct. Only what the rule leaves open (a long question, or two items
joined by "and") costs one small classification call, on the fast model. So a single
lookup costs at most one extra small call, and a short one none at all.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from ..llm import LLM
from ..messages import ZERO_USAGE, Message, Usage
from ..structured import structured_llm_call
from .prompts import MODE_PROMPT, MODE_SCHEMA

logger = logging.getLogger(__name__)

Mode = Literal["react", "dag"]
ChoiceSource = Literal["rule", "model", "default"]

# A short question in characters; a CJK character carries about a word, so it counts more.
SHORT_QUESTION = 120
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LIST_ITEM = re.compile(r"^\s*(?:\d{1,2}[.)、:]|[（(]\d{1,2}[)）]|[-*•·])\s*\S", re.MULTILINE)
_QUESTION_MARKS = re.compile(r"[?？]+")
_WORD = re.compile(r"\w")
# Separators between the items of an enumeration.
_SEPARATORS = re.compile(r"、|以及|;|；|\band\b|\bas well as\b|[,，]", re.IGNORECASE)
# "A, B and C": three or more short items, the last joined by a conjunction. The middle
# items are bounded: an unbounded repeat backtracks quadratically on "word, word, …"
# with no conjunction at the end (a long list still matches from a later start).
_WORD_LIST = re.compile(
    r"\b[\w'-]{1,40}(?: [\w'-]{1,40})?, (?:[\w'-]{1,40}(?: [\w'-]{1,40})?, ){0,12}"
    r"[\w'-]{1,40}(?: [\w'-]{1,40})?,? (?:and|or) \w",
    re.IGNORECASE,
)
_CJK_LIST = re.compile(r"、[^、，,。？?]{1,12}(?:和|及|以及|与|或)|(?:、[^、，,。？?]{1,12}){2}")


@dataclass(frozen=True, slots=True)
class ModeChoice:
    mode: Mode
    source: ChoiceSource
    reason: str
    usage: Usage = ZERO_USAGE


def rule_mode(question: str) -> ModeChoice | None:
    """The mode the rule decides for ``question``, or None when it cannot tell."""
    items = len(_LIST_ITEM.findall(question))
    if items >= 2:
        return ModeChoice("dag", "rule", f"a list of {items} items")
    questions = _questions(question)
    if questions >= 2:
        return ModeChoice("dag", "rule", f"{questions} questions")
    if _WORD_LIST.search(question) or _CJK_LIST.search(question):
        return ModeChoice("dag", "rule", "an enumeration of three items or more")
    if _weighted_length(question) <= SHORT_QUESTION and len(_SEPARATORS.findall(question)) <= 1:
        return ModeChoice("react", "rule", "a short single question")
    return None


class ModeSelector:
    """Chooses the mode of each question: the rule, else one call to ``llm`` (fast)."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    async def choose(self, question: str) -> ModeChoice:
        decided = rule_mode(question)
        if decided is not None:
            return decided
        try:
            result = await structured_llm_call(
                self.llm,
                [Message.user(MODE_PROMPT.format(question=question))],
                MODE_SCHEMA,
                function_name="choose_mode",
                parse_fn=_mode,
                default_value=None,
            )
        except Exception:  # choosing is an optimisation: ReAct always works
            logger.warning("mode classification failed; using ReAct", exc_info=True)
            return ModeChoice("react", "default", "the classification failed")
        if result.value is None:
            return ModeChoice("react", "default", "no usable classification", result.usage)
        return ModeChoice(result.value, "model", "classified by the model", result.usage)


async def choose_mode(llm: LLM, question: str) -> Mode:
    """``"react"`` or ``"dag"`` for ``question`` (see ``ModeSelector``)."""
    return (await ModeSelector(llm).choose(question)).mode


def _mode(data: dict[str, object]) -> Mode | None:
    value = data.get("mode")
    if value == "dag":
        return "dag"
    if value == "react":
        return "react"
    return None


def _questions(text: str) -> int:
    """Question marks that end a question with words in it ("really??" is one)."""
    asked = _QUESTION_MARKS.split(text)[:-1]  # the text after the last mark asks nothing
    return sum(1 for part in asked if _WORD.search(part))


def _weighted_length(text: str) -> int:
    return len(text) + len(_CJK.findall(text))
