"""The emulator's user-token endpoints on the wire: Feishu's answer shapes (golden, in
``tests/fixtures/api/as_user/``), each person's data only, and the gateway's refusals of
a wrong, unknown, expired or under-scoped token.

Tokens are real: a person consents through the fake OAuth over HTTP
(:class:`support.user_tokens.EmulatorUserTokens`), and requests go over HTTP as raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.feishu import FeishuClient
from bot.feishu.errors import FeishuUserScopeMissing, error_for

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.user_tokens import EmulatorUserTokens

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "api" / "as_user"
ALICE, BOB = "ou_fake_alice", "ou_fake_bob"
EVERYTHING = (
    "calendar:calendar:read",
    "calendar:calendar.event:read",
    "calendar:calendar.event:create",
    "calendar:calendar.free_busy:read",
    "task:task:read",
    "task:task:write",
    "search:docs:read",
    "search:message",
    "im:message.group_msg:get_as_user",
)
TASKS = "/open-apis/task/v2/tasks"
DOCS = "/open-apis/search/v2/doc_wiki/search"
MESSAGES = "/open-apis/search/v2/message"
MGET = "/open-apis/im/v1/messages/mget"
FREEBUSY = "/open-apis/calendar/v4/freebusy/batch"
PRIMARY = "/open-apis/calendar/v4/calendars/primary"


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


async def token_of(fake: FakeFeishu, client: FeishuClient, open_id: str, *scopes: str) -> str:
    tokens = await EmulatorUserTokens(fake, client, open_id).consent(scopes or EVERYTHING)
    return tokens.access_token


@pytest.fixture
async def alice(fake, client) -> str:
    return await token_of(fake, client, ALICE)


@pytest.fixture
async def bob(fake, client) -> str:
    return await token_of(fake, client, BOB)


async def call(
    fake: FakeFeishu,
    method: str,
    path: str,
    token: str | None,
    *,
    body: Any = None,
    params: Any = None,
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, fake.domain + path, json=body, params=params, headers=headers
        ) as answer,
    ):
        return answer.status, await answer.json()


def golden(name: str) -> dict[str, Any]:
    loaded = json.loads((GOLDEN / f"{name}.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def assert_shape(ours: Any, theirs: Any, where: str = "$") -> None:
    """Every field of Feishu's answer is in ours, with the same JSON type, all the way
    down (the first item of each list stands for the rest)."""
    assert type(ours) is type(theirs) or {type(ours), type(theirs)} <= {int, float}, (
        f"{where}: {type(ours).__name__} where Feishu has {type(theirs).__name__}"
    )
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            assert key in ours, f"{where}.{key} is missing"
            assert_shape(ours[key], value, f"{where}.{key}")
    elif isinstance(theirs, list) and theirs:
        assert ours, f"{where} is empty where Feishu has items"
        assert_shape(ours[0], theirs[0], f"{where}[0]")


# -- Feishu's shapes -------------------------------------------------------------------------


async def test_each_answer_has_feishus_shape(fake, client, alice) -> None:
    status, primary = await call(fake, "POST", PRIMARY, alice)
    assert status == 200
    assert_shape(primary, golden("calendar_primary"))
    calendar = primary["data"]["calendars"][0]["calendar"]["calendar_id"]
    assert primary["data"]["calendars"][0]["user_id"] == ALICE
    params = {"start_time": "0", "end_time": str(2**40)}
    _, events = await call(
        fake, "GET", f"/open-apis/calendar/v4/calendars/{calendar}/events", alice, params=params
    )
    assert_shape(events, golden("calendar_events"))
    times = {"time_min": "2000-01-01T00:00:00+08:00", "time_max": "2100-01-01T00:00:00+08:00"}
    _, busy = await call(fake, "POST", FREEBUSY, alice, body={**times, "user_ids": [ALICE]})
    assert_shape(busy, golden("freebusy_batch"))
    _, tasks = await call(fake, "GET", TASKS, alice, params={"type": "my_tasks"})
    assert_shape(tasks, golden("task_list_mine"))
    guid = tasks["data"]["items"][0]["guid"]
    patch = {"task": {"completed_at": "1675742789470"}, "update_fields": ["completed_at"]}
    _, patched = await call(fake, "PATCH", f"{TASKS}/{guid}", alice, body=patch)
    assert_shape(patched, golden("task_patch"))
    assert patched["data"]["task"]["status"] == "done"
    search = {"query": "on-call", "doc_filter": {}, "wiki_filter": {}}
    _, docs = await call(fake, "POST", DOCS, alice, body=search)
    assert_shape(docs, golden("doc_wiki_search"))
    _, found = await call(fake, "POST", MESSAGES, alice, body={"query": "migration"})
    assert_shape(found, golden("message_search"))
    _, read = await call(fake, "GET", MGET, alice, params={"message_ids": found["data"]["items"]})
    assert_shape(read, golden("messages_mget"))


async def test_a_missing_user_scope_is_answered_as_feishu_answers_it(fake, client) -> None:
    reader = await token_of(fake, client, ALICE, "task:task:read")
    status, body = await call(fake, "POST", TASKS, reader, body={"summary": "x"})
    assert status == 400
    expected = golden("user_scope_missing")
    assert body["code"] == expected["code"] == 99991679
    assert body["msg"] == expected["msg"]
    assert body["error"]["permission_violations"] == expected["error"]["permission_violations"]
    # The client reads the scopes out of it for the person to grant.
    error = error_for(body["code"], body["msg"], endpoint="task.task.create", error=body["error"])
    assert isinstance(error, FeishuUserScopeMissing)
    assert error.scopes == ("task:task:write", "task:task:writeonly")


# -- each person's own data ------------------------------------------------------------------


async def test_a_person_reads_no_one_elses_calendar(fake, client, alice, bob) -> None:
    bobs = fake.workspace.user_calendar(BOB).calendar_id
    path = f"/open-apis/calendar/v4/calendars/{bobs}/events"
    status, body = await call(fake, "GET", path, alice)
    assert (status, body["code"]) == (400, 191002)
    assert (await call(fake, "GET", path, bob))[1]["code"] == 0
    # The app's tenant token has no access to a person's calendar either.
    tenant = await client.tokens.get()
    assert (await call(fake, "GET", path, tenant))[1]["code"] == 191002
    # Nor may Alice write on Bob's calendar.
    event = {"summary": "x", "start_time": {"timestamp": "1"}, "end_time": {"timestamp": "2"}}
    created = await call(fake, "POST", path, alice, body=event)
    assert created[1]["code"] == 191002


async def test_my_tasks_are_mine_and_bobs_are_his(fake, alice, bob) -> None:
    def summaries(answer: tuple[int, dict[str, Any]]) -> set[str]:
        return {t["summary"] for t in answer[1]["data"]["items"]}

    mine = summaries(await call(fake, "GET", TASKS, alice))
    his = summaries(await call(fake, "GET", TASKS, bob))
    assert "Write the migration plan" in mine and "Review Q3 budget" not in mine
    assert "Review Q3 budget" in his and not his & mine
    open_ones = summaries(await call(fake, "GET", TASKS, alice, params={"completed": "false"}))
    assert "Submit expense report" not in open_ones
    bobs = next(t for t in fake.workspace.tasks.values() if t.summary == "Review Q3 budget")
    patch = {"task": {"completed_at": "1"}, "update_fields": ["completed_at"]}
    refused = await call(fake, "PATCH", f"{TASKS}/{bobs.guid}", alice, body=patch)
    assert refused[1]["code"] == 1470403 and bobs.completed_ms == 0


async def test_search_finds_only_what_the_person_may_open(fake, alice, bob) -> None:
    search = {"query": "on-call", "doc_filter": {}, "wiki_filter": {}}
    theirs = {
        who: {u["result_meta"]["token"] for u in body["data"]["res_units"]}
        for who, token in (("alice", alice), ("bob", bob))
        for _, body in [await call(fake, "POST", DOCS, token, body=search)]
    }
    assert "doxcnFakeSecret" in theirs["bob"] and "doxcnFakeSecret" not in theirs["alice"]
    # Without a filter Feishu searches nothing (the official clients send empty ones).
    bare = await call(fake, "POST", DOCS, alice, body={"query": "on-call"})
    assert bare[1]["data"]["res_units"] == []
    salary = await call(fake, "POST", MESSAGES, alice, body={"query": "salary"})
    assert salary[1]["data"]["items"] == []
    assert (await call(fake, "POST", MESSAGES, bob, body={"query": "salary"}))[1]["data"][
        "items"
    ] == ["om_fake_hist_5"]
    # Reading a message of a chat Alice is not in, by id, gives nothing either.
    read = await call(fake, "GET", MGET, alice, params={"message_ids": ["om_fake_hist_5"]})
    assert read[1]["data"]["items"] == []


# -- the gateway's refusals ------------------------------------------------------------------


async def test_the_wrong_kind_of_token_is_refused(fake, client, alice) -> None:
    tenant = await client.tokens.get()
    for method, path, body in (
        ("GET", TASKS, None),
        ("POST", DOCS, {"query": "x", "doc_filter": {}}),
        ("POST", MESSAGES, {"query": "x"}),
    ):
        status, answer = await call(fake, method, path, tenant, body=body)
        assert (status, answer["code"]) == (400, 99991668), path
    # A user token where Feishu takes only the tenant token.
    status, answer = await call(fake, "GET", "/open-apis/im/v1/chats", alice)
    assert (status, answer["code"]) == (400, 99991663)
    # Routes that take both answer the tenant token as the app.
    assert (await call(fake, "POST", PRIMARY, tenant))[1]["code"] == 0


async def test_unknown_expired_revoked_or_missing_user_tokens_are_refused(fake, alice) -> None:
    assert (await call(fake, "GET", TASKS, None))[1]["code"] == 99991661
    assert (await call(fake, "GET", TASKS, "u-not-a-token"))[1]["code"] == 99991668
    assert (await call(fake, "GET", TASKS, "garbage"))[1]["code"] == 99991663
    fake.expire_user_tokens(ALICE)
    status, answer = await call(fake, "GET", TASKS, alice)
    assert (status, answer["code"]) == (400, 99991677)
    fake.revoke_user_grant(ALICE)
    assert (await call(fake, "GET", TASKS, alice))[1]["code"] == 99991668


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "code"),
    [
        (
            "POST",
            FREEBUSY,
            {"time_min": "soon", "time_max": "later", "user_ids": [ALICE]},
            None,
            99992402,
        ),
        (
            "POST",
            FREEBUSY,
            {
                "time_min": "2030-01-02T00:00:00+08:00",
                "time_max": "2030-01-01T00:00:00+08:00",
                "user_ids": [ALICE],
            },
            None,
            99992402,
        ),
        (
            "POST",
            FREEBUSY,
            {
                "time_min": "2030-01-01T00:00:00+08:00",
                "time_max": "2030-01-02T00:00:00+08:00",
                "user_ids": ["ou_nobody"],
            },
            None,
            190002,
        ),
        (
            "POST",
            FREEBUSY,
            {
                "time_min": "2030-01-01T00:00:00+08:00",
                "time_max": "2030-01-02T00:00:00+08:00",
                "user_ids": [ALICE] * 11,
            },
            None,
            99992402,
        ),
        ("POST", DOCS, {"query": "x" * 51, "doc_filter": {}}, None, 99992402),
        ("POST", DOCS, {"query": "x", "page_size": 21, "doc_filter": {}}, None, 99992402),
        ("POST", DOCS, {"query": "x", "doc_filter": "all"}, None, 99992402),
        ("POST", MESSAGES, {"query": "x", "chat_type": "channel"}, None, 99992402),
        ("POST", MESSAGES, {"query": "x", "start_time": "yesterday"}, None, 99992402),
        ("POST", MESSAGES, {"query": "x", "start_time": "20", "end_time": "10"}, None, 99992402),
        ("POST", MESSAGES, {"query": 7}, None, 99992402),
        ("POST", MESSAGES, {"query": "x", "chat_ids": "oc_fake_eng"}, None, 99992402),
        ("GET", MGET, None, {"message_ids": [f"om_{i}" for i in range(51)]}, 99992402),
        ("GET", TASKS, None, {"type": "followed"}, 99992402),
    ],
)
async def test_bad_requests_get_feishus_codes(fake, alice, method, path, body, params, code):
    status, answer = await call(fake, method, path, alice, body=body, params=params)
    assert (status, answer["code"]) == (400, code)


async def test_a_patch_that_changes_nothing_known_is_refused(fake, alice) -> None:
    mine = next(t for t in fake.workspace.tasks.values() if t.summary == "Write the migration plan")
    path = f"{TASKS}/{mine.guid}"
    for body in (
        {"task": {}, "update_fields": []},
        {"task": {"completed_at": "soon"}, "update_fields": ["completed_at"]},
        {"task": {"priority": 1}, "update_fields": ["priority"]},
        {"task": {"summary": ""}, "update_fields": ["summary"]},
    ):
        assert (await call(fake, "PATCH", path, alice, body=body))[1]["code"] == 1470400
    reopened = {"task": {"completed_at": "0", "summary": "Plan"}, "update_fields": ["summary"]}
    assert (await call(fake, "PATCH", path, alice, body=reopened))[1]["code"] == 0
    assert mine.summary == "Plan"
    gone = await call(fake, "PATCH", f"{TASKS}/nope", alice, body=reopened)
    assert gone[1]["code"] == 1470404


async def test_mget_is_not_taken_for_a_message_id(fake, client) -> None:
    tenant = await client.tokens.get()
    status, read = await call(
        fake, "GET", MGET, tenant, params={"message_ids": ["om_fake_hist_1", "om_fake_hist_5"]}
    )
    # The bot is in Engineering but not in HR: the app reads only the first.
    assert status == 200
    assert [m["message_id"] for m in read["data"]["items"]] == ["om_fake_hist_1"]
