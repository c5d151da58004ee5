"""The hub: which connectors are on, isolation of failures, the registry, the call log."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from bot.engine import ReActAgent, ToolError
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from bot.store import CallEntry
from connectors import hub as hub_module
from connectors.base import Connector, ConnectorContext, ConnectorSettings, action
from connectors.call_log import CallLogHook, arguments_digest
from connectors.config import ConnectorsConfig, merge_environment
from connectors.hub import ConnectorHub, enabled, load_connector_class


class EchoSettings(ConnectorSettings):
    prefix: str = ""


class Echo(Connector):
    name = "echo"
    Settings = EchoSettings

    @action(side_effect="read")
    async def echo_say(self, text: str) -> str:
        """Say something back."""
        return self.settings.prefix + text

    @action(side_effect="write")
    async def echo_store(self, text: str) -> str:
        """Store something."""
        if text == "boom":
            raise ToolError("backend said no")
        return "stored"


class Broken(Connector):
    name = "broken"

    async def start(self) -> None:
        raise ConnectionError("backend down")


class Clash(Connector):
    name = "clash"

    @action(side_effect="read")
    async def echo_say(self, text: str) -> str:
        """Same name as echo's."""
        return text


CLASSES = {"echo": Echo, "broken": Broken, "clash": Clash}


def test_environment_overrides_any_setting():
    sections = merge_environment(
        {"sql": {"url": "sqlite:///a.db", "max_rows": 10}},
        {
            "SQL_CONNECTOR_URL": "sqlite:///b.db",
            "HTTP_CONNECTOR_ALLOWED_HOSTS": "a.com",
            "PATH": "/",
        },
    )
    assert sections == {
        "sql": {"url": "sqlite:///b.db", "max_rows": 10},
        "http": {"allowed_hosts": "a.com"},
    }


def test_without_a_connectors_table_settings_decide():
    config = ConnectorsConfig({"sql": {"url": "sqlite:///x.db"}, "http": {"timeout_seconds": "3"}})
    assert set(enabled(config, feishu_credentials=True)) == {"utilities", "feishu", "sql"}
    assert set(enabled(config, feishu_credentials=False)) == {"utilities", "sql"}


def test_a_connectors_table_decides_alone():
    config = ConnectorsConfig(
        {"sql": {"url": "sqlite:///x.db"}, "http": {"enabled": False, "allowed_hosts": "a"}},
        explicit=True,
    )
    assert enabled(config, feishu_credentials=True) == {"sql": {"url": "sqlite:///x.db"}}


async def test_one_failing_connector_does_not_stop_the_others(caplog):
    config = ConnectorsConfig(
        {"echo": {"prefix": "> "}, "broken": {}, "missing": {}, "clash": {}}, explicit=True
    )
    hub = await ConnectorHub.build(
        config, ConnectorContext(), feishu_credentials=False, classes=CLASSES
    )
    assert hub.registry.names() == ["echo_say", "echo_store"]
    assert hub.connector_of("echo_say") == "echo"
    assert "backend down" in hub.failures["broken"]
    assert "missing" in hub.failures
    assert [t.name for t in hub.tools("write")] == ["echo_store"]
    statuses = {s.name: s for s in await hub.check()}
    assert statuses["echo"].ok and statuses["echo"].tools == 2
    assert not statuses["broken"].ok
    assert "clashes" in caplog.text
    await hub.aclose()


async def test_invalid_settings_are_reported_by_name():
    config = ConnectorsConfig({"echo": {"prefix": 3, "unknown": True}}, explicit=True)
    hub = await ConnectorHub.build(
        config, ConnectorContext(), feishu_credentials=False, classes=CLASSES
    )
    assert "invalid settings" in hub.failures["echo"]
    assert "unknown" in hub.failures["echo"]


def test_plugins_register_through_entry_points(monkeypatch):
    point = EntryPoint("echo", f"{Echo.__module__}:Echo", hub_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(hub_module, "entry_points", lambda group: [point])
    assert load_connector_class("echo") is Echo
    monkeypatch.setattr(hub_module, "entry_points", lambda group: [])
    with pytest.raises(LookupError):
        load_connector_class("nothing")


async def test_every_call_is_logged_with_a_digest_not_the_arguments():
    hub = ConnectorHub([Echo(EchoSettings(), ConnectorContext())], {})
    records = []

    async def sink(**fields):
        records.append(CallEntry(**fields))

    llm = ScriptedLLM(
        [
            tool_calls_response(
                tool_call("echo_say", {"text": "secret"}, id="a"),
                tool_call("echo_store", {"text": "boom"}, id="b"),
            ),
            "done",
        ]
    )
    agent = ReActAgent(llm, hub.registry, hooks=[CallLogHook(sink, hub.connector_of)])
    result = await agent.run("go", run_id="run-7")
    assert [s.status for s in result.steps] == ["ok", "error"]
    by_tool = {r.tool: r for r in records}
    assert by_tool["echo_say"].ok and by_tool["echo_say"].connector == "echo"
    assert by_tool["echo_store"].error == "backend said no" and not by_tool["echo_store"].ok
    assert all(r.run_id == "run-7" and r.duration_ms >= 0 for r in records)
    assert by_tool["echo_say"].arguments_digest == arguments_digest({"text": "secret"})
    assert "secret" not in repr(records)


async def test_a_failing_log_never_hides_the_result():
    async def sink(**fields):
        raise RuntimeError("database down")

    hook = CallLogHook(sink, lambda name: "echo")
    hub = ConnectorHub([Echo(EchoSettings(), ConnectorContext())], {})
    llm = ScriptedLLM([tool_calls_response(tool_call("echo_say", {"text": "hi"})), "done"])
    result = await ReActAgent(llm, hub.registry, hooks=[hook]).run("go")
    assert result.steps[0].observation == "hi"
