"""feishu_send_file and feishu_send_chart against the fake Feishu, over HTTP: what is
uploaded, what is posted where, and what is refused before anything is sent."""

from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import AsyncIterator
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openpyxl import load_workbook
from PIL import Image

from bot.config import FeishuConfig
from bot.engine import ReActAgent, Tool, ToolError
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from bot.engine.tools import ToolArgumentsError
from bot.feishu import FeishuClient
from bot.turn_context import TurnContext
from connectors.base import ConnectorContext
from connectors.feishu import FeishuWorkspace, FeishuWorkspaceSettings
from connectors.feishu.files import NAME_MAX_CHARS, check_file_name

from fakes.feishu_server import FakeFeishu, FakeMessage
from support.turns import look_alike, serving, turn_context

CHAT = "oc_fake_eng"
ASKED = "om_user_ask"  # the person's message the run answers
TABLE = {
    "columns": ["地区", "销售额", "备注"],
    "rows": [["华东", 1200.5, "含税"], ["华北", 980, None], ["西南", 0, "=HYPERLINK(1)"]],
}


def make_workspace(client: FeishuClient, **settings: Any) -> FeishuWorkspace:
    return FeishuWorkspace(FeishuWorkspaceSettings(**settings), ConnectorContext(feishu=client))


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        server.add_message(ASKED, chat_id=CHAT, chat_type="group")
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    config = FeishuConfig(
        app_id=fake.app_id,
        app_secret=fake.app_secret,
        verification_token="vt",
        encrypt_key="ek",
        domain=fake.domain,
    )
    async with FeishuClient(config, timeout=5.0) as feishu:
        yield feishu


@pytest.fixture
def tools(client: FeishuClient) -> dict[str, Tool]:
    return {tool.name: tool for tool in make_workspace(client).tools()}


def turn(message_id: str = ASKED, *, thread_id: str = "", chat_id: str = CHAT) -> TurnContext:
    """The runtime's turn context, as a tool reads it from the run."""
    return turn_context(
        chat_id=chat_id,
        chat_type="group",
        message_id=message_id,
        thread_id=thread_id,
        sender_open_id="ou_user",
    )


async def run(tools: dict[str, Tool], name: str, deps: Any = None, **arguments: Any) -> str:
    tool = tools[name]
    with serving(turn() if deps is None else deps):
        result = await tool.handler(**tool.validate_arguments(arguments))
    assert isinstance(result, str)
    return result


async def refused(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    with pytest.raises((ToolError, ToolArgumentsError)) as caught:
        await run(tools, name, **arguments)
    return str(caught.value)


def posted(fake: FakeFeishu) -> list[FakeMessage]:
    return [m for m in fake.sent if m.msg_type in ("file", "image")]


def nothing_sent(fake: FakeFeishu) -> bool:
    uploads = [r for r in fake.requests if r.path.endswith(("/im/v1/files", "/im/v1/images"))]
    return not uploads and not fake.uploaded_files and not fake.uploaded_images and not posted(fake)


# -- files -------------------------------------------------------------------------------


async def test_a_csv_table_keeps_chinese_for_excel(fake, tools) -> None:
    text = await run(tools, "feishu_send_file", file_name="销售.csv", table=TABLE)

    (message,) = posted(fake)
    upload = fake.uploaded_files[message.content["file_key"]]
    assert message.reply_to == ASKED and message.chat_id == CHAT
    assert (upload.file_name, upload.file_type) == ("销售.csv", "stream")
    assert upload.data.startswith(b"\xef\xbb\xbf")  # the BOM Excel reads UTF-8 by
    rows = list(csv.reader(io.StringIO(upload.data.decode("utf-8-sig"))))
    assert rows == [
        ["地区", "销售额", "备注"],
        ["华东", "1200.5", "含税"],
        ["华北", "980", ""],
        ["西南", "0", "'=HYPERLINK(1)"],  # a formula from a tool result stays text
    ]
    assert text == f"Sent 销售.csv ({len(upload.data)} B) to the conversation."


async def test_an_xlsx_table_opens_with_its_rows(fake, tools) -> None:
    text = await run(tools, "feishu_send_file", file_name="q3.xlsx", table=TABLE, format="xlsx")

    (message,) = posted(fake)
    upload = fake.uploaded_files[message.content["file_key"]]
    assert upload.file_type == "xls"
    sheet = load_workbook(io.BytesIO(upload.data)).active
    assert list(sheet.iter_rows(values_only=True)) == [
        ("地区", "销售额", "备注"),
        ("华东", 1200.5, "含税"),
        ("华北", 980, None),
        ("西南", 0, "=HYPERLINK(1)"),
    ]
    assert sheet["C4"].data_type == "s"  # text, not a formula
    assert text.startswith("Sent q3.xlsx (") and "KiB" in text


async def test_text_content_is_uploaded_byte_for_byte(fake, tools) -> None:
    content = "# 周报\n\n- shipped v2 ✅\n- `x = 1`\n"
    await run(tools, "feishu_send_file", file_name="weekly.md", content=content)
    (message,) = posted(fake)
    assert fake.uploaded_files[message.content["file_key"]].data == content.encode("utf-8")
    assert message.reply_in_thread is False and message.thread_id is None


async def test_a_reply_in_a_topic_stays_in_the_topic(fake, tools) -> None:
    fake.add_message("om_in_topic", chat_id=CHAT, chat_type="group", thread_id="omt_topic")
    deps = turn("om_in_topic", thread_id="omt_topic")
    await run(tools, "feishu_send_file", deps, file_name="a.txt", content="x")
    await run(tools, "feishu_send_chart", deps, title="t", labels=["a"], series=[{"values": [1]}])
    file, image = posted(fake)
    for message in (file, image):
        assert message.reply_to == "om_in_topic" and message.reply_in_thread
        assert message.thread_id == "omt_topic"


BAD_NAMES = [
    *("../x.csv", "a/b.csv", "a\\b.csv", "/etc/passwd.txt", "", "   ", "noextension", "trailing."),
    *(".env", "a\x00.csv", "a\nb.csv", "evil\u202etxt.exe", "a:b.csv", "x" * 300 + ".csv"),
    "名" * 100 + ".csv",  # 100 characters, but 300 bytes
]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_bad_file_names_are_refused_before_anything_is_sent(fake, tools, name) -> None:
    error = await refused(tools, "feishu_send_file", file_name=name, content="hello")
    assert "file_name" in error
    assert nothing_sent(fake)


@given(st.text(max_size=300))
def test_a_checked_name_never_holds_a_path_or_a_control_character(raw: str) -> None:
    try:
        name = check_file_name(raw)
    except ToolError:
        return
    assert "/" not in name and "\\" not in name and not name.startswith(".")
    assert all(unicodedata.category(c)[0] != "C" for c in name)
    assert 0 < len(name) <= NAME_MAX_CHARS and "." in name.strip(".")


async def test_oversized_content_is_refused_before_any_upload(fake, client) -> None:
    tools = {t.name: t for t in make_workspace(client, send_file_max_bytes=1000).tools()}
    error = await refused(tools, "feishu_send_file", file_name="big.txt", content="字" * 400)
    assert "1.2 KiB, over the limit of 1000 B" in error and "Nothing was sent" in error
    rows = {"columns": ["n"], "rows": [[n] for n in range(300)]}
    assert "over the limit" in await refused(
        tools, "feishu_send_file", file_name="n.csv", table=rows
    )
    assert nothing_sent(fake)


async def test_tables_over_the_row_cap_or_ragged_are_refused(fake, client) -> None:
    tools = {t.name: t for t in make_workspace(client, send_table_max_rows=2).tools()}
    error = await refused(tools, "feishu_send_file", file_name="q.csv", table=TABLE)
    assert "3 rows; at most 2" in error
    ragged = {"columns": ["a", "b"], "rows": [["x", 1], ["y"]]}
    error = await refused(tools, "feishu_send_file", file_name="q.csv", table=ragged)
    assert "row 2 has 1 cells but there are 2 columns" in error
    assert nothing_sent(fake)


async def test_what_does_not_make_a_file_is_refused(fake, tools) -> None:
    both = await refused(tools, "feishu_send_file", file_name="a.csv", content="x", table=TABLE)
    assert "exactly one" in both
    assert "exactly one" in await refused(tools, "feishu_send_file", file_name="a.csv")
    mismatch = await refused(
        tools, "feishu_send_file", file_name="a.csv", table=TABLE, format="xlsx"
    )
    assert "must end in .xlsx" in mismatch
    text_xlsx = await refused(tools, "feishu_send_file", file_name="a.xlsx", content="a,b")
    assert "cannot be written from text" in text_xlsx
    no_format = await refused(tools, "feishu_send_file", file_name="a.txt", table=TABLE)
    assert '"csv" or "xlsx"' in no_format
    assert nothing_sent(fake)


async def test_the_same_file_for_the_same_message_is_posted_once(fake, tools) -> None:
    for _ in range(2):
        await run(tools, "feishu_send_file", file_name="a.txt", content="same")
    assert len(posted(fake)) == 1


async def test_a_refused_post_is_a_tool_error(fake, tools) -> None:
    fake.fail("POST", r"/messages/om_user_ask/reply$", 230002, msg="bot not in chat")
    error = await refused(tools, "feishu_send_file", file_name="a.txt", content="x")
    assert error.startswith("Posting the file into the conversation failed")


# -- the conversation comes from the run ---------------------------------------------------


@pytest.mark.parametrize(
    "deps",
    [
        None,
        {"chat_id": CHAT, "message_id": ASKED},
        SimpleNamespace(chat_id=CHAT),
        turn(chat_id=""),
        turn(message_id=""),
        # Deps of another type with every field of a real turn: nobody's turn (the attacker's
        # look-alike), so nothing is posted where it says.
        look_alike(turn()),
    ],
    ids=["no_run", "a_dict", "some_object", "no_chat", "no_message", "look_alike"],
)
async def test_without_a_conversation_nothing_is_sent(fake, tools, deps) -> None:
    chart = {"title": "t", "labels": ["a"], "series": [{"values": [1]}]}
    for name, arguments in [
        ("feishu_send_file", {"file_name": "a.txt", "content": "x"}),
        ("feishu_send_chart", chart),
    ]:
        handler = tools[name].handler
        # deps None: no run at all, as when the tool is called outside the engine.
        with (
            serving(deps) if deps is not None else nullcontext(),
            pytest.raises(ToolError, match="not answering a message in a Feishu chat"),
        ):
            await handler(**arguments)
    assert nothing_sent(fake)


async def test_the_engine_hands_the_run_to_the_tool(fake, tools) -> None:
    call = tool_call("feishu_send_file", {"file_name": "a.txt", "content": "hi"}, id="c1")
    llm = ScriptedLLM([tool_calls_response(call), "sent"])
    agent = ReActAgent(llm, [tools["feishu_send_file"]])
    result = await agent.run("send it", deps=turn(), run_id="run-9")
    assert result.status == "completed"
    (message,) = posted(fake)
    assert message.reply_to == ASKED


# -- charts ------------------------------------------------------------------------------


def png_of(fake: FakeFeishu, message: FakeMessage) -> Image.Image:
    upload = fake.uploaded_images[message.content["image_key"]]
    assert upload.data.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(upload.data))
    image.load()
    return image


@pytest.mark.parametrize("kind", ["bar", "barh", "line", "scatter", "pie"])
async def test_each_kind_of_chart_is_a_png_reply(fake, tools, kind) -> None:
    series = [{"name": "收入", "values": [3, 5.5, None if kind != "pie" else 1, 2]}]
    if kind != "pie":
        series.append({"name": "成本", "values": [1, 2, 3, 4]})
    labels = ["Q1", "Q2", "Q3", "Q4"]
    chart = {"title": "季度收入", "kind": kind, "labels": labels, "series": series}
    text = await run(tools, "feishu_send_chart", **chart)
    (message,) = posted(fake)
    assert message.msg_type == "image" and message.reply_to == ASKED
    image = png_of(fake, message)
    assert image.format == "PNG" and image.size == (1200, 675)
    assert text.startswith(f'Sent the {kind} chart "季度收入" (1200×675 PNG, ')


async def test_a_chart_from_a_table(fake, tools) -> None:
    table = {"columns": ["day", "visits", "sign-ups"], "rows": [[d, d * 10, d] for d in range(30)]}
    await run(tools, "feishu_send_chart", title="Traffic", kind="line", table=table)
    await run(tools, "feishu_send_chart", title="Sign-ups", table=table, x="day", y=["sign-ups"])
    assert len(posted(fake)) == 2
    assert all(png_of(fake, m).size == (1200, 675) for m in posted(fake))


async def test_mismatched_lengths_are_refused(fake, tools) -> None:
    series = [{"name": "ok", "values": [1, 2, 3]}, {"name": "short", "values": [1, 2]}]
    error = await refused(
        tools, "feishu_send_chart", title="t", labels=["a", "b", "c"], series=series
    )
    assert "'short' has 2 values but there are 3 labels" in error
    assert nothing_sent(fake)


@pytest.mark.parametrize("bad", ["12", True, [1], {"v": 1}])
async def test_values_that_are_not_numbers_are_refused(fake, tools, bad) -> None:
    error = await refused(
        tools, "feishu_send_chart", title="t", labels=["a", "b"], series=[{"values": [1, bad]}]
    )
    assert "invalid arguments" in error and "series" in error
    cell = "n/a" if isinstance(bad, list | dict) else bad  # a table cell is never a list
    table = {"columns": ["x", "y"], "rows": [["a", 1], ["b", cell]]}
    error = await refused(tools, "feishu_send_chart", title="t", table=table)
    assert "column 'y' holds" in error and "row 2" in error and "not a number" in error
    assert nothing_sent(fake)


async def test_charts_that_cannot_be_drawn_are_refused(fake, client) -> None:
    tools = {t.name: t for t in make_workspace(client, chart_max_points=100).tools()}
    many = {"title": "t", "labels": list(range(60)), "series": [{"values": [1] * 60}] * 2}
    assert "120 points, over the limit of 100" in await refused(tools, "feishu_send_chart", **many)
    two = [{"values": [1, 2]}, {"values": [3, 4]}]
    pie = {"title": "t", "kind": "pie", "labels": ["a", "b"]}
    assert "one series" in await refused(tools, "feishu_send_chart", **pie, series=two)
    negative = [{"values": [1, -2]}]
    assert "zero or more" in await refused(tools, "feishu_send_chart", **pie, series=negative)
    nulls = {"title": "t", "labels": ["a"], "series": [{"values": [None]}]}
    assert "nothing to draw" in await refused(tools, "feishu_send_chart", **nulls)
    table = {"columns": ["x", "y"], "rows": [["a", 1]]}
    assert "no column 'z'" in await refused(
        tools, "feishu_send_chart", title="t", table=table, y=["z"]
    )
    assert "labels and series" in await refused(tools, "feishu_send_chart", title="t", labels=["a"])
    assert nothing_sent(fake)
