"""The connector hub inside the running bot: 33 real tools, so tool selection runs."""

from __future__ import annotations

import sqlite3

from bot.store import CallLogStore, RunStore
from connectors.config import ConnectorsConfig

from e2e.harness import running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

ALL_TOOLS = {
    # The bot's own: scheduled tasks, asking the person a question, memory.
    "schedule_task",
    "list_scheduled_tasks",
    "cancel_scheduled_task",
    "ask_user",
    "remember",
    "forget",
    "calculator",
    "current_time",
    "sql_list_tables",
    "sql_describe_table",
    "sql_query",
    "sql_execute",
    "http_get",
    "http_post",
    "feishu_search_users",
    "feishu_list_chats",
    "feishu_get_chat_history",
    "feishu_send_message",
    "feishu_list_calendar_events",
    "feishu_create_calendar_event",
    "feishu_list_tasks",
    "feishu_create_task",
    "feishu_search_bitable_records",
    "feishu_create_bitable_record",
    "feishu_read_document",
    "feishu_create_document",
    "feishu_send_file",
    "feishu_send_chart",
    "feishu_my_calendar_events",
    "feishu_my_free_busy",
    "feishu_my_create_event",
    "feishu_my_tasks",
    "feishu_my_create_task",
    "feishu_my_complete_task",
    "feishu_my_search_docs",
    "feishu_my_search_messages",
}


def all_connectors(tmp_path) -> ConnectorsConfig:
    orders = tmp_path / "orders.db"
    with sqlite3.connect(orders) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        db.executemany("INSERT INTO orders (total) VALUES (?)", [(10.5,), (20.0,), (4.5,)])
    return ConnectorsConfig(
        sections={
            "utilities": {},
            "sql": {"url": f"sqlite:///{orders}"},
            "http": {"allowed_hosts": "status.example.com"},
            "feishu": {},
        },
        explicit=True,
    )


async def test_selection_sends_the_catalogue_then_only_the_chosen_tools(
    tmp_path, feishu, llm_server
):
    def handler(body):
        assert not is_synthesis(body)  # the loop's final reply is the answer
        if [t["function"]["name"] for t in body.get("tools") or ()] == ["select_tools"]:
            return Reply(
                tool_calls=[("sel", "select_tools", {"tools": ["sql_query", "calculator"]})]
            )
        if not any(m["role"] == "tool" for m in body["messages"]):
            sql = "SELECT count(*) AS n, sum(total) AS total FROM orders"
            return Reply(tool_calls=[("q1", "sql_query", {"sql": sql})])
        return Reply(content="3 orders, 35.0")

    llm_server.handler = handler
    settings = settings_for(tmp_path, feishu, llm_server)
    connectors = all_connectors(tmp_path)
    async with running_bot(settings, feishu, llm_server, connectors=connectors) as bot:
        assert set(bot.services.tools.names()) == ALL_TOOLS
        await bot.say("om_orders", "How many orders do we have and what are they worth?")
        await bot.reply("om_orders")
        await bot.settle()
        (run,) = [
            r for r in await RunStore(bot.services.database).recent() if r.message_id == "om_orders"
        ]
        (logged,) = await CallLogStore(bot.services.database).for_run(run.id)
        assert (logged.tool, logged.connector, logged.ok) == ("sql_query", "sql", True)
        assert "SELECT" not in repr(logged)  # a digest of the arguments, not the arguments

    bodies = [r.body for r in llm_server.requests]
    menu = bodies[0]
    # The first call carries the compact catalogue in its system prompt (names and one line
    # each, no schemas), with select_tools the one tool offered.
    (selector,) = menu["tools"]
    assert selector["function"]["name"] == "select_tools"
    prompt = menu["messages"][0]["content"]
    assert all(name in prompt for name in ALL_TOOLS)
    assert '"properties"' not in prompt and "sql" in prompt
    # Every main-loop call then offers exactly the chosen tools, with their schemas.
    loop_calls = [b for b in bodies[1:] if not is_synthesis(b) and "tools" in b]
    assert loop_calls
    for body in loop_calls:
        names = sorted(t["function"]["name"] for t in body["tools"])
        assert names == ["calculator", "sql_query"]
        assert all("properties" in t["function"]["parameters"] for t in body["tools"])
    # The tool really ran against the SQLite file, and its compact table reached the model.
    observation = next(m for m in loop_calls[-1]["messages"] if m["role"] == "tool")["content"]
    assert "35.0" in observation and "3" in observation
