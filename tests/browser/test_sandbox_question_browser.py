"""``larkgate dev``'s chat page in a real browser answers question cards: an option's button,
and a form whose text survives the transcript changing while it is typed, sent with the
card's Send button. (``support.questions.QuestionDesk`` stands in for ``ask_user``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.app import SERVICES
from bot.feishu.question_card import ANSWER_FIELD
from bot.sandbox.people import USER
from bot.sandbox.runner import Sandbox

from fakes.openai_server import FakeOpenAIServer
from support.env import clear_settings
from support.questions import QuestionDesk
from support.sandbox import model, running_sandbox


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, keep=["LARKGATE_UPDATE_SCREENSHOTS"])


@pytest.fixture
async def sandbox(tmp_path, deployer) -> AsyncIterator[Sandbox]:
    async with FakeOpenAIServer() as llm_server:
        llm_server.handler = model
        async with running_sandbox(tmp_path, llm_server, deployer) as running:
            yield running


async def test_sandbox_answers_a_question_by_option_and_by_form(sandbox, browser_page, shoot):
    desk = QuestionDesk(sandbox.bot_app[SERVICES])
    page = browser_page
    await page.goto(sandbox.page_url)
    await page.get_by_text("model: fake-model").wait_for()
    await page.select_option("#user", USER.key)
    await page.select_option("#chat", "dm")

    await desk.ask(USER.dm_chat_id(), "Deploy where?", asker=USER.open_id, options=("a", "b"))
    option = page.get_by_role("button", name="b", exact=True)
    await option.wait_for()
    await shoot(page, "sandbox-question-options")
    await option.click()
    await page.locator(".card-header", has_text="Answered").wait_for()
    assert [click.option for click in desk.answered] == [1]

    await desk.ask(USER.dm_chat_id(), "What should the notes say?\nTwo lines.", asker=USER.open_id)
    field = page.locator(f"textarea[name={ANSWER_FIELD}]")
    await field.wait_for()
    shown = await page.locator(".plain").all_inner_texts()
    assert "What should the notes say?\nTwo lines." in shown
    await field.click()
    await page.keyboard.type("Faster start-up")
    # The transcript changes while the answer is typed: the page draws it again, and the
    # text and the caret stay.
    # (A message in the same chat, and the bot's streamed answer to it.)
    await page.evaluate(
        """(user) => fetch("/api/messages", {method: "POST",
            headers: {"Content-Type": "application/json"},
            body: JSON.stringify({user, chat: "dm", text: "meanwhile"})})""",
        USER.key,
    )
    await page.locator(".card", has_text="All done here").wait_for()
    await page.keyboard.type(", fewer cards")
    assert await field.input_value() == "Faster start-up, fewer cards"
    await shoot(page, "sandbox-question-form")

    await page.get_by_role("button", name="Send answer").click()
    await page.locator(".card-header", has_text="Answered").nth(1).wait_for()
    assert desk.answered[-1].text == "Faster start-up, fewer cards"
    assert await page.locator(f"textarea[name={ANSWER_FIELD}]").count() == 0
