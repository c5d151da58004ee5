"""The history holds what was said, not its markup: an answer (and a question) is stored
and given back to the model as written, whatever characters card markdown acts on it
holds; only the card renders it."""

from __future__ import annotations

from typing import Any

from e2e.harness import answer_of
from fakes.openai_server import Reply

# What card escaping would turn into entities (approval_card.escape_markdown: & < > * _ ~ `
# [ ] | \), an apostrophe (what html.escape-style escaping turns into &#39;), and text
# that already looks like entities: a person may type "&amp;" and mean it.
ANSWER = "It's **bold** & <b>tags</b> [a](b) `x|y` ~z~ \\ — literally &amp; and &#39;"
QUESTION = "what does &amp; mean in HTML? and it's <b>?"


async def test_an_answer_is_remembered_as_written_and_given_back_so(bot):
    asked: list[list[dict[str, Any]]] = []

    def handler(body: dict[str, Any]) -> Reply:
        asked.append(body["messages"])
        return Reply(content=ANSWER)

    bot.llm_server.handler = handler
    await bot.say("om_1", QUESTION)
    await bot.reply("om_1")
    await bot.settle()
    (message,) = bot.replies_to("om_1")
    assert answer_of(message, bot.feishu) == ANSWER  # the card shows what the model wrote

    asked.clear()
    await bot.say("om_2", "say that again")
    await bot.reply("om_2")
    await bot.settle()
    seen = "\n".join(str(m.get("content") or "") for messages in asked for m in messages)
    assert ANSWER in seen and QUESTION in seen  # verbatim: nothing escaped, nothing undone
    assert "&amp;amp;" not in seen and "&#38;" not in seen
