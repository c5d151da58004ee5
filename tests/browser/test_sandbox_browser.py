"""``larkgate dev``'s chat page in a real browser: a streamed DM answer, an approval card in
the group refused for the ordinary user and approved by the admin, ``/readonly on``; an
image and a file attached, shown in the transcript, and answered."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image, ImageDraw

from bot.feishu.live_card import THINKING
from bot.runtime.texts import STOPPED_CARD
from bot.sandbox.people import ADMIN, USER
from bot.sandbox.runner import Sandbox

from fakes.openai_server import FakeOpenAIServer
from support.deploy import Deployer
from support.env import clear_settings
from support.sandbox import model, running_sandbox


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, keep=["LARKGATE_UPDATE_SCREENSHOTS"])


@pytest.fixture
async def sandbox(tmp_path, deployer) -> AsyncIterator[tuple[Sandbox, Deployer]]:
    async with FakeOpenAIServer() as llm_server:
        llm_server.handler = model
        async with running_sandbox(tmp_path, llm_server, deployer) as running:
            yield running, deployer


async def send(page: Any, text: str) -> None:
    await page.fill("#text", text)
    await page.click("#send")


async def test_sandbox_dm_approval_and_readonly(sandbox, browser_page, shoot):
    sandbox, deployer = sandbox
    page = browser_page
    await page.goto(sandbox.page_url)
    await page.get_by_text("model: fake-model").wait_for()

    # Bob's DM: the answer streams into a live card, then the card closes.
    await page.select_option("#user", USER.key)
    await page.select_option("#chat", "dm")
    await send(page, "hello there")
    await page.locator(".msg.mine .bubble", has_text="hello there").wait_for()
    streaming = page.locator(".card-body.streaming", has_text="All done")
    await streaming.wait_for()
    await shoot(page, "sandbox-dm-streaming")
    await streaming.wait_for(state="detached")
    answer = page.locator(".card", has_text="All done here: nothing to do.")
    await answer.wait_for()
    await shoot(page, "sandbox-dm")

    # In the group Bob asks for a deploy: an approval card; Bob may not approve it himself.
    await page.select_option("#chat", "group")
    await send(page, "please deploy web")
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    assert "deploy" in await page.locator(".card", has=approve).inner_text()
    await shoot(page, "sandbox-approval")
    await approve.click()
    await page.locator("#toast").wait_for()
    assert deployer.runs == []
    await shoot(page, "sandbox-approval-refused")

    # Alice, the admin, presses Approve: the tool runs and the answer comes.
    await page.select_option("#user", ADMIN.key)
    await approve.wait_for()
    await approve.click()
    await page.locator(".card", has_text="All done here: web deployed.").wait_for()
    await page.locator(".card-header", has_text="Approved").wait_for()
    assert await approve.count() == 0
    assert deployer.runs == ["web"]
    # Mentions show as names, the way Feishu renders them.
    approved = await page.locator(".card", has_text="Approval ID").inner_text()
    assert "<at" not in approved and "@Alice Wang" in approved
    await shoot(page, "sandbox-approved")

    # Alice switches read-only mode on by typing the command in her DM.
    await page.locator("#toast").wait_for(state="hidden")  # (so the screenshot is clean)
    await page.select_option("#chat", "dm")
    await page.get_by_role("button", name="/readonly on", exact=True).click()
    assert await page.input_value("#text") == "/readonly on"
    await page.click("#send")
    reply = page.locator(".msg:not(.mine)", has_text="read-only")
    await reply.wait_for()
    assert "on" in (await reply.inner_text()).lower()
    await shoot(page, "sandbox-readonly")


async def paste_image(page: Any, name: str) -> None:
    """Paste a file named ``name`` into the message box, as a browser does from the clipboard."""
    await page.evaluate(
        """(name) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array([137, 80, 78, 71])], name,
                                    { type: "image/png" }));
            document.getElementById("text").dispatchEvent(
                new ClipboardEvent("paste", { clipboardData: data, bubbles: true }));
        }""",
        name,
    )


def chart(width: int, height: int) -> bytes:
    """A PNG bar chart, so the screenshot shows a thumbnail that looks like one."""
    image = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for i, share in enumerate((0.4, 0.7, 0.55, 0.9)):
        left = 12 + i * (width - 24) // 4
        draw.rectangle(
            (left, height - 8 - share * (height - 16), left + 24, height - 8), fill=(51, 112, 255)
        )
    return _png(image)


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


async def test_sandbox_attach_an_image_and_a_file(sandbox, browser_page, shoot):
    sandbox, _ = sandbox
    page = browser_page
    await page.goto(sandbox.page_url)
    await page.get_by_text("model: fake-model").wait_for()
    await page.select_option("#user", USER.key)
    await page.select_option("#chat", "dm")

    # A pasted image waits next to the box; its ✕ (a labelled button) takes it away.
    await paste_image(page, "pasted.png")
    await page.locator("#pending", has_text="pasted.png").wait_for()
    await page.get_by_role("button", name="Remove the attachment").press("Enter")
    await page.locator("#pending").wait_for(state="hidden")

    # The attach button opens the file input; the chosen image goes with a caption.
    attach = page.get_by_role("button", name="Attach an image or a file")
    async with page.expect_file_chooser() as chooser:
        await attach.press("Enter")  # usable from the keyboard
    await (await chooser.value).set_files(
        {"name": "chart.png", "mimeType": "image/png", "buffer": chart(160, 90)}
    )
    await page.locator("#pending", has_text="chart.png").wait_for()
    assert await page.get_attribute("#text", "placeholder") == "Add a caption (optional)…"
    await page.fill("#text", "what does this chart show?")
    await page.press("#text", "Enter")

    mine = page.locator(".msg.mine .bubble", has_text="what does this chart show?")
    thumb = mine.locator("img.thumb")
    await thumb.wait_for()
    await page.wait_for_function(
        "() => document.querySelector('.msg.mine img.thumb')?.naturalWidth === 160"
    )
    assert await page.locator("#pending").is_hidden()
    await page.locator(".card", has_text="All done here: nothing to do.").wait_for()
    await page.locator(".card-body.streaming").wait_for(state="detached")

    # A file through the input itself: its name, size and a download link in the bubble.
    await page.set_input_files(
        "#file", {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"42 widgets\n"}
    )
    await page.click("#send")
    link = page.locator(".msg.mine a.file", has_text="notes.txt · 11 B")
    await link.wait_for()
    assert await link.get_attribute("download") == "notes.txt"
    # Both answers on the page (the wait is the check: the transcript is redrawn as it
    # polls, so a second count right after could catch it mid-redraw).
    await page.wait_for_function(
        "() => [...document.querySelectorAll('.card')]"
        ".filter((c) => c.textContent.includes('All done here')).length === 2"
    )
    await page.locator(".card-body.streaming").wait_for(state="detached")
    await shoot(page, "sandbox-attachments")


async def test_the_page_shows_underscore_italics_as_the_card_does(sandbox, browser_page):
    """``_x_`` is italics on a Feishu card (the bot's "_Stopped._", "_Thinking…_"); a word
    with underscores inside it, code and a link's address keep theirs."""
    sandbox, _ = sandbox
    page = browser_page
    await page.goto(sandbox.page_url)
    await page.get_by_text("model: fake-model").wait_for()

    cases = {
        STOPPED_CARD: "<i>Stopped.</i>",
        THINKING: "<i>Thinking…</i>",
        "call _it_ now, _x_, _y_.": "call <i>it</i> now, <i>x</i>, <i>y</i>.",
        "**_both_**": "<b><i>both</i></b>",
        "_foo_bar_": "<i>foo_bar</i>",
        "snake_case_words and my_var": "snake_case_words and my_var",
        "5_000_000 and __init__": "5_000_000 and __init__",
        "`_kept_`": "<code>_kept_</code>",
        "_ spaced _": "_ spaced _",
        "_see [the doc](https://x.example/a_b_) now": (
            '_see <a href="https://x.example/a_b_" target="_blank">the doc</a> now'
        ),
    }
    rendered = await page.evaluate(
        "(sources) => sources.map((source) => markdown(source))", list(cases)
    )
    assert dict(zip(cases, rendered, strict=True)) == cases
    # A card as the transcript draws it: the markdown element's text in italics.
    italic = await page.evaluate(
        """(content) => renderCard({ body: { elements: [{ tag: "markdown", content }] } })
            .querySelector(".md i")?.textContent""",
        STOPPED_CARD,
    )
    assert italic == "Stopped."
