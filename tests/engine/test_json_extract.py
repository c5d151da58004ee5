"""extract_json: the first JSON object in whatever a model wrote."""

from __future__ import annotations

import pytest

from bot.engine import extract_json


def test_plain_object() -> None:
    assert extract_json('{"a": 1, "b": [1, 2], "c": null}') == {"a": 1, "b": [1, 2], "c": None}


def test_plain_object_with_surrounding_whitespace() -> None:
    assert extract_json('\n\n  {"a": true}  \n') == {"a": True}


def test_json_code_fence() -> None:
    text = 'Here you go:\n```json\n{"type": "final_answer", "answer": "42"}\n```\nDone.'
    assert extract_json(text) == {"type": "final_answer", "answer": "42"}


def test_bare_code_fence() -> None:
    text = '```\n{"tools": ["search", "fetch"]}\n```'
    assert extract_json(text) == {"tools": ["search", "fetch"]}


def test_uppercase_json_fence_on_one_line() -> None:
    assert extract_json('```JSON {"x": 1}```') == {"x": 1}


def test_fence_without_an_object_falls_back_to_the_text() -> None:
    text = '```python\nprint("hi")\n```\nResult: {"ok": true}'
    assert extract_json(text) == {"ok": True}


def test_prose_before_and_after() -> None:
    text = (
        'Sure! I will call the tool now. {"tool": "search", "arguments": {"q": "x"}} Hope it helps.'
    )
    assert extract_json(text) == {"tool": "search", "arguments": {"q": "x"}}


def test_nested_braces() -> None:
    text = 'Answer: {"a": {"b": {"c": {"d": 1}}}, "e": [{"f": 2}, {"g": {}}]} end'
    assert extract_json(text) == {"a": {"b": {"c": {"d": 1}}}, "e": [{"f": 2}, {"g": {}}]}


def test_braces_and_quotes_inside_strings() -> None:
    text = 'Result: {"code": "if (x) { return \'}\'; }", "note": "a { b"} trailing }'
    assert extract_json(text) == {"code": "if (x) { return '}'; }", "note": "a { b"}


def test_escaped_quotes_inside_strings() -> None:
    text = r'reply {"say": "he said \"hi {there}\" and left", "n": 1} ok'
    assert extract_json(text) == {"say": 'he said "hi {there}" and left', "n": 1}


def test_escaped_backslash_before_closing_quote() -> None:
    text = r'{"path": "C:\\dir\\", "n": 2}'
    assert extract_json(text) == {"path": "C:\\dir\\", "n": 2}


def test_first_object_wins_when_there_are_several() -> None:
    text = 'First {"pick": 1} then {"pick": 2} and {"pick": 3}'
    assert extract_json(text) == {"pick": 1}


def test_first_object_wins_when_the_text_starts_with_one() -> None:
    assert extract_json('{"pick": 1}\n{"pick": 2}') == {"pick": 1}


def test_first_fenced_object_wins_among_fences() -> None:
    text = '```json\n{"pick": 1}\n```\nor\n```json\n{"pick": 2}\n```'
    assert extract_json(text) == {"pick": 1}


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"x"', "42", "true", "null", "[]", "```json\n[1, 2]\n```", "no json at all"],
)
def test_non_objects_are_ignored(text: str) -> None:
    assert extract_json(text) is None


def test_invalid_json_then_valid_json_later() -> None:
    text = '{not: valid, json} and then the real one: {"ok": true}'
    assert extract_json(text) == {"ok": True}


def test_truncated_object_then_valid_object() -> None:
    text = '{"a": 1, "b": \n... sorry, let me retry:\n{"a": 1, "b": 2}'
    assert extract_json(text) == {"a": 1, "b": 2}


def test_truncated_object_alone_is_none() -> None:
    assert extract_json('{"a": 1, "b": [1, 2') is None


def test_a_fragment_of_a_broken_object_is_not_returned() -> None:
    text = '{"answer": {"b": 1}, } Fixed: {"answer": 2}'
    assert extract_json(text) == {"answer": 2}


@pytest.mark.parametrize("text", [None, "", "   ", "\n"])
def test_none_and_empty_input(text: str | None) -> None:
    assert extract_json(text) is None


def test_cjk_content() -> None:
    text = '好的，我来回答：{"答案": "北京是中国的首都", "来源": ["百科"]} 希望有帮助。'
    assert extract_json(text) == {"答案": "北京是中国的首都", "来源": ["百科"]}


def test_cjk_in_fence_with_full_width_punctuation_around() -> None:
    text = '结果如下：\n```json\n{"城市": "杭州", "温度": 21}\n```\n（以上）'
    assert extract_json(text) == {"城市": "杭州", "温度": 21}


def test_brace_in_prose_before_the_real_object() -> None:
    text = 'Use the {placeholder} syntax, like {this}. Answer: {"value": "x"}'
    assert extract_json(text) == {"value": "x"}


def test_lone_open_brace_in_prose_before_the_real_object() -> None:
    text = 'The set { is open. {"value": 3}'
    assert extract_json(text) == {"value": 3}


def test_object_inside_prose_that_starts_with_a_brace_and_has_trailing_text() -> None:
    assert extract_json('{"a": 1} is my answer') == {"a": 1}


def test_empty_object() -> None:
    assert extract_json("result: {}") == {}
