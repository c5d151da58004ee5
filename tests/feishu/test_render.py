"""Answers as cards: nothing lost, fences kept whole, size and table limits respected."""

from __future__ import annotations

import json

from bot.feishu.render import (
    CARD_BYTES,
    ELEMENT_CHARS,
    TABLES_PER_CARD,
    answer_cards,
    notice_card,
    split_markdown,
)


def card_text(cards) -> str:
    parts = []
    for card in cards:
        for element in card["body"]["elements"]:
            if element["element_id"].startswith("part_"):
                parts.append(element["content"])
    return "\n".join(parts)


def test_a_short_answer_is_one_json2_card():
    (card,) = answer_cards("**Hello** there", footer="2 steps · 120 tokens · 1.2 s")
    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    elements = card["body"]["elements"]
    assert elements[0] == {"tag": "markdown", "element_id": "part_0", "content": "**Hello** there"}
    assert elements[-1]["element_id"] == "footer"
    assert card["config"]["summary"]["content"] == "Hello there"


def test_long_answers_lose_no_text_and_respect_limits():
    paragraphs = [f"Paragraph {i}: " + "词语 and words " * 40 for i in range(200)]
    text = "\n\n".join(paragraphs)
    cards = answer_cards(text)
    assert len(cards) > 1
    for card in cards:
        assert len(json.dumps(card, ensure_ascii=False).encode()) < 30_000
        for element in card["body"]["elements"]:
            assert len(element["content"]) <= ELEMENT_CHARS
    joined = card_text(cards)
    for paragraph in paragraphs:
        assert paragraph.strip() in joined
    assert cards[1]["config"]["summary"]["content"] == "(continued)"


def test_code_blocks_are_never_cut_open():
    code = "\n".join(f"line_{i} = {i}" for i in range(600))
    text = "Before\n\n```python\n" + code + "\n```\n\nAfter"
    chunks = split_markdown(text, 1000)
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.count("```") % 2 == 0, chunk[:80]
    rejoined = "\n".join(chunks)
    for i in range(600):
        assert f"line_{i} = {i}" in rejoined


def test_a_single_huge_line_is_wrapped_not_dropped():
    line = "x" * 10_000
    chunks = split_markdown(line, 3000)
    assert "".join(chunks) == line
    assert all(len(c) <= 3000 for c in chunks)


def test_tables_beyond_the_card_limit_become_preformatted():
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    text = "\n\n".join(f"Table {i}\n\n{table}" for i in range(TABLES_PER_CARD + 2))
    (card,) = answer_cards(text)
    content = card_text([card])
    assert content.count("|---|---|") == TABLES_PER_CARD + 2
    assert content.count("```\n| a | b |") == 2


def test_notice_card():
    card = notice_card("Stopped.")
    assert card["body"]["elements"][0]["content"] == "Stopped."
    assert CARD_BYTES < 30_000
