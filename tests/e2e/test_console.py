"""The web console end to end: run events over SSE and the JSON API, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from bot.engine import tool_from_function

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_approvals import ADMIN, USER, first_card, header
from e2e.test_budgets import MENTION
from fakes.openai_server import Reply
from support.deploy import Deployer, deploying
from support.model_calls import is_synthesis
from support.waiting import wait_until

TOKEN = "t"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Gate:
    """A read tool that holds its call until the test opens the gate."""

    def __init__(self) -> None:
        self.open = asyncio.Event()

    def tool(self):
        async def lookup(service: str) -> str:
            """Look a service up."""
            await self.open.wait()
            return f"{service} is healthy"

        return tool_from_function(lookup, side_effect="read")


def looking_up(body: dict[str, Any]) -> Reply:
    """Calls ``lookup`` once, then answers (the answer streams in several deltas)."""
    assert not is_synthesis(body)  # the final reply is the answer
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply(tool_calls=[("c1", "lookup", {"service": "api"})], usage={"prompt_tokens": 5})
    return Reply(
        content="The api service is healthy.", chunk_interval=0.01, usage={"prompt_tokens": 7}
    )


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def console(tmp_path, feishu, llm_server, gate):
    def start(**overrides: Any):
        llm_server.handler = looking_up
        values = {"larkgate_console_token": TOKEN, "larkgate_admins": ADMIN, **overrides}
        settings = settings_for(tmp_path, feishu, llm_server, **values)
        return running_bot(settings, feishu, llm_server, tools=[gate.tool()])

    return start


async def get_json(bot: Bot, path: str, *, status: int = 200) -> dict[str, Any]:
    async with bot.session.get(bot.url + path, headers=AUTH) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def post_json(bot: Bot, path: str, body: Any = None, *, status: int = 200) -> dict[str, Any]:
    async with bot.session.post(bot.url + path, json=body, headers=AUTH) as response:
        assert response.status == status, await response.text()
        return await response.json()


@asynccontextmanager
async def events_stream(
    bot: Bot, run_id: str, *, last_event_id: int | None = None
) -> AsyncIterator[aiohttp.ClientResponse]:
    headers = dict(AUTH)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with bot.session.get(f"{bot.url}/api/runs/{run_id}/events", headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        yield resp


async def read_events(resp: aiohttp.ClientResponse, count: int | None = None) -> list[dict]:
    """Parse SSE blocks until the stream ends (or ``count`` events were read)."""
    events: list[dict] = []
    block: list[str] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line:
            block.append(line)
            continue
        fields = dict(part.split(": ", 1) for part in block if not part.startswith(":"))
        block = []
        if fields:
            events.append(
                {
                    "type": fields["event"],
                    "id": int(fields["id"]),
                    "data": json.loads(fields["data"]),
                }
            )
            if count is not None and len(events) == count:
                break
    return events


async def live_run(bot: Bot) -> str:
    """The id of the run in progress, as the console lists it."""

    async def live() -> list[dict[str, Any]]:
        return [r for r in (await get_json(bot, "/api/runs"))["runs"] if r["live"]]

    return (await wait_until(live, 15.0, every=0.02, failure="no live run"))[0]["id"]


async def pending_approvals(bot: Bot) -> list[dict[str, Any]]:
    """The approvals waiting for a decision, once there is one."""

    async def pending() -> list[dict[str, Any]]:
        return (await get_json(bot, "/api/approvals"))["approvals"]

    return await wait_until(pending, 15.0, every=0.02, failure="no approval was asked for")


def check_run_events(events: list[dict]) -> None:
    """step (started, finished) → answer deltas → done, with ids 1..n."""
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["step", "step"] and types[-1] == "done"
    assert set(types[2:-1]) == {"answer"} and len(types[2:-1]) >= 2
    started, finished = events[0]["data"], events[1]["data"]
    assert (started["phase"], started["tool"], started["arguments"]) == (
        "started",
        "lookup",
        {"service": "api"},
    )
    assert (finished["phase"], finished["status"]) == ("finished", "ok")
    assert finished["observation"] == "api is healthy"
    answer = "".join(e["data"]["delta"] for e in events if e["type"] == "answer")
    assert answer == "The api service is healthy."
    done = events[-1]["data"]
    assert done["status"] == "completed" and done["model"] == "fake-model"
    assert done["iterations"] >= 2 and done["tool_calls"] == 1
    assert done["usage"]["total_tokens"] > 0 and done["elapsed"] >= 0


async def test_a_live_run_streams_step_answer_done_and_a_late_client_gets_the_replay(console, gate):
    async with console() as bot:
        await bot.say("om_1", "is api healthy?")
        run_id = await live_run(bot)
        async with events_stream(bot, run_id) as resp:
            first = await read_events(resp, 1)  # the step started before we connected: replayed
            assert first[0]["type"] == "step" and first[0]["data"]["phase"] == "started"
            gate.open.set()
            rest = await read_events(resp)  # the stream ends after done
        live = first + rest
        check_run_events(live)
        await bot.settle()
        # A late client gets the same events from the hub's memory.
        async with events_stream(bot, run_id) as resp:
            assert await read_events(resp) == live
        # The run is listed, finished, with what it cost.
        (run,) = (await get_json(bot, "/api/runs"))["runs"]
        assert run["id"] == run_id and run["live"] is False
        assert run["status"] == live[-1]["data"]["status"]
        assert run["conversation_id"] and run["model"] == "fake-model"
        assert run["tokens"]["total"] == live[-1]["data"]["usage"]["total_tokens"]


async def test_reconnecting_with_last_event_id_resumes_without_duplicates(console, gate):
    async with console() as bot:
        await bot.say("om_1", "is api healthy?")
        run_id = await live_run(bot)
        async with events_stream(bot, run_id) as resp:
            head = await read_events(resp, 1)
        gate.open.set()
        async with events_stream(bot, run_id, last_event_id=head[-1]["id"]) as resp:
            tail = await read_events(resp)
        check_run_events(head + tail)
        # Resuming after done: nothing more, and the stream closes.
        async with events_stream(bot, run_id, last_event_id=tail[-1]["id"]) as resp:
            assert await read_events(resp) == []
        # Mid-way, from a late client.
        async with events_stream(bot, run_id, last_event_id=3) as resp:
            assert [e["id"] for e in await read_events(resp)] == [e["id"] for e in tail[2:]]


async def test_runs_are_listed_newest_first(console, gate):
    gate.open.set()
    async with console() as bot:
        for n in (1, 2):
            await bot.say(f"om_{n}", f"question {n}", chat_id=f"oc_{n}")
            await bot.reply(f"om_{n}")
            await bot.settle()
        runs = (await get_json(bot, "/api/runs"))["runs"]
        assert len(runs) == 2 and runs[0]["started_at"] >= runs[1]["started_at"]
        assert {r["message_id"] for r in runs} == {"om_1", "om_2"}
        assert runs[0]["message_id"] == "om_2"
        assert all(
            {"id", "conversation_id", "status", "finished_at", "live"} <= r.keys() for r in runs
        )
        assert len((await get_json(bot, "/api/runs?limit=1"))["runs"]) == 1


async def test_a_run_not_in_memory_is_served_from_the_runs_table(console, gate):
    gate.open.set()
    async with console() as bot:
        await bot.say("om_1", "is api healthy?")
        await bot.reply("om_1")
        await bot.settle()
        (run,) = (await get_json(bot, "/api/runs"))["runs"]
    async with console() as restarted:  # same database, a fresh process's memory
        async with events_stream(restarted, run["id"]) as resp:
            (done,) = await read_events(resp)
        assert (done["type"], done["id"]) == ("done", 1)
        assert done["data"]["status"] == run["status"]
        assert done["data"]["usage"]["total_tokens"] == run["tokens"]["total"]
        async with events_stream(restarted, run["id"], last_event_id=1) as resp:
            assert await read_events(resp) == []


async def test_every_console_route_needs_the_token(console):
    async with console() as bot:
        paths = ["/api/runs", "/api/runs/x/events", "/api/approvals", "/api/readonly"]
        paths += ["/api/audit", "/api/usage", "/api/schedules", "/api/profiles"]
        for path in paths:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                async with bot.session.get(bot.url + path, headers=headers) as resp:
                    assert resp.status == 401, path
                    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        for path in ("/api/approvals/x/approve", "/api/readonly", "/api/schedules/x/cancel"):
            async with bot.session.post(bot.url + path, json={"on": True}) as resp:
                assert resp.status == 401
        # The token is not taken from the URL.
        async with bot.session.get(f"{bot.url}/api/runs?token={TOKEN}") as resp:
            assert resp.status == 401
        await get_json(bot, "/api/runs/nope/events", status=404)


async def test_without_a_token_the_console_is_off(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token="")
    async with running_bot(settings, feishu, llm_server) as bot:
        for path in ("/console", "/api/runs", "/api/runs/x/events", "/api/approvals"):
            async with bot.session.get(bot.url + path, headers={"Authorization": "Bearer "}) as r:
                assert r.status == 404, path
        async with bot.session.post(bot.url + "/api/readonly", json={"on": True}) as r:
            assert r.status in (404, 405)


async def test_approving_in_the_console_releases_the_waiting_tool(tmp_path, feishu, llm_server):
    deployer = Deployer()
    llm_server.handler = deploying(["api"])
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_console_token=TOKEN, larkgate_admins=ADMIN
    )
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        await bot.say("om_1", "deploy api please")
        (approval,) = await pending_approvals(bot)
        assert approval["tool"] == "deploy" and approval["requester"] == USER
        assert approval["requesters"] == [USER]
        assert deployer.runs == []
        card = await first_card(bot, "om_1")
        decided = await post_json(bot, f"/api/approvals/{approval['id']}/approve")
        assert decided["outcome"] == "decided" and decided["approval"]["state"] == "approved"
        assert decided["approval"]["decided_by"] == ADMIN
        await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == ["api"]
        # The card in the chat was rewritten, like after a click.
        assert header(bot.feishu.message_by_id[card.message_id].content) == "Approved"
        assert (await get_json(bot, "/api/approvals"))["approvals"] == []
        # A second decision changes nothing.
        again = await post_json(bot, f"/api/approvals/{approval['id']}/deny", status=409)
        assert again["outcome"] == "closed" and again["approval"]["state"] == "approved"
        await post_json(bot, "/api/approvals/nope/approve", status=404)
        audit = (await get_json(bot, "/api/audit?action=approval."))["entries"]
        assert [(a["action"], a["actor"], a["detail"]["via"]) for a in audit] == [
            ("approval.approved", ADMIN, "console")
        ]


async def test_denying_without_an_admin_is_refused(tmp_path, feishu, llm_server):
    deployer = Deployer()
    llm_server.handler = deploying(["api"])
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token=TOKEN)
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        await bot.say("om_1", "deploy api")
        pending = await pending_approvals(bot)
        refused = await post_json(bot, f"/api/approvals/{pending[0]['id']}/deny", status=403)
        assert refused["outcome"] == "forbidden"
        refused = await post_json(bot, "/api/readonly", {"on": True}, status=403)
        assert "LARKGATE_ADMINS" in refused["error"]
        assert (await get_json(bot, "/api/readonly"))["on"] is False


async def test_read_only_mode_is_switched_as_the_admin_and_audited(console):
    async with console() as bot:
        assert (await get_json(bot, "/api/readonly"))["on"] is False
        switched = await post_json(bot, "/api/readonly", {"on": True})
        assert switched["on"] is True and switched["changed"] is True
        assert switched["changed_by"] == ADMIN
        assert (await get_json(bot, "/api/readonly"))["on"] is True
        assert (await post_json(bot, "/api/readonly", {"on": True}))["changed"] is False
        assert (await bot.services.governance.org.read_only()).on
        await post_json(bot, "/api/readonly", {"on": "yes"}, status=400)
        await post_json(bot, "/api/readonly", None, status=400)
        await post_json(bot, "/api/readonly", {"on": False})
        audit = (await get_json(bot, "/api/audit"))["entries"]
        actions = [(a["action"], a["actor"], a["detail"].get("via")) for a in audit]
        assert actions == [
            ("readonly.off", ADMIN, "console"),
            ("admin.readonly_unchanged", ADMIN, "console"),
            ("readonly.on", ADMIN, "console"),
        ]


async def test_usage_today_per_user_and_group(console, gate):
    gate.open.set()
    async with console(larkgate_user_daily_tokens=100_000) as bot:
        await bot.say("om_1", "@_user_1 hi", chat_type="group", chat_id="oc_team", mentions=MENTION)
        await bot.reply("om_1")
        await bot.settle()
        usage = await get_json(bot, "/api/usage")
        assert usage["counting"] is True and usage["timezone"] == "UTC"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", usage["day"])
        by_subject = {s["subject"]: s for s in usage["subjects"]}
        assert set(by_subject) == {f"user:{USER}", "group:oc_team"}
        (run,) = (await get_json(bot, "/api/runs"))["runs"]
        user = by_subject[f"user:{USER}"]
        assert (user["kind"], user["id"], user["messages"]) == ("user", USER, 1)
        assert user["tokens"] == run["tokens"]["total"] > 0
        assert usage["limits"]["user_daily_tokens"] == 100_000


async def test_the_page_is_served_and_uses_only_existing_endpoints(console):
    async with console() as bot:
        async with bot.session.get(bot.url + "/console") as resp:  # no token needed for the page
            assert resp.status == 200 and resp.content_type == "text/html"
            assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
            page = await resp.text()
        assert 'id="signin-form"' in page and "sessionStorage" in page
        assert "new EventSource" not in page and "token=" not in page
        # Every /api path the page names (template parts as placeholders) is a route.
        named = {
            re.sub(r"\$\{[^}]*\}", "{x}", m).split("?")[0]
            for m in re.findall(r"[`\"](/api/[^`\"]*)[`\"]", page)
        }
        assert named >= {"/api/runs", "/api/approvals", "/api/readonly", "/api/audit"}
        assert named >= {"/api/schedules", "/api/schedules/{x}/cancel"}
        routes = [
            (route.method, route.resource.canonical)
            for route in bot.app.router.routes()
            if route.resource is not None
        ]
        for path in named:
            pattern = re.sub(r"\{x\}", "[^/]+", path)
            matching = [c for _, c in routes if re.fullmatch(pattern, re.sub(r"\{[^}]+\}", "y", c))]
            assert matching, path
        for path in ("/api/runs", "/api/approvals", "/api/readonly", "/api/audit", "/api/usage"):
            await get_json(bot, path)
        assert await get_json(bot, "/api/profiles") == {"profiles": []}
        await get_json(bot, "/api/schedules")
