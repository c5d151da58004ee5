"""The emulator's answers about who may see what, on the wire through lark-oapi's builders:
a chat's members and facts, a document's or Base's collaborators and owner, an event's
attendees and a tasklist's members, with Feishu's refusals where the app may not ask."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import lark_oapi as lark
import pytest
from lark_oapi.api.bitable.v1 import GetAppRequest
from lark_oapi.api.calendar.v4 import ListCalendarEventAttendeeRequest
from lark_oapi.api.drive.v1 import (
    BatchQueryMetaRequest,
    ListPermissionMemberRequest,
    MetaRequest,
    RequestDoc,
)
from lark_oapi.api.im.v1 import GetChatMembersRequest, GetChatRequest
from lark_oapi.api.task.v2 import GetTasklistRequest

from bot.feishu import FeishuClient, FeishuError

from fakes.feishu_server import BOT_CALENDAR_ID, FakeFeishu
from support.feishu import feishu_config

ALICE, BOB, PARTNER = "ou_fake_alice", "ou_fake_bob", "ou_fake_partner"


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


async def data(client: FeishuClient, request: lark.BaseRequest) -> dict[str, Any]:
    body = await client.call("probe", request)
    assert body["code"] == 0
    return dict(body["data"])


async def code_of(client: FeishuClient, request: lark.BaseRequest) -> tuple[int, int | None]:
    with pytest.raises(FeishuError) as caught:
        await client.call("probe", request)
    return caught.value.code or 0, caught.value.http_status


def members(chat_id: str, **fields: Any) -> lark.BaseRequest:
    request = GetChatMembersRequest.builder().chat_id(chat_id)
    for name, value in fields.items():
        getattr(request, name)(value)
    return request.build()


def collaborators(token: str, kind: str | None, fields: str | None = None) -> lark.BaseRequest:
    request = ListPermissionMemberRequest.builder().token(token)
    if kind is not None:
        request.type(kind)
    if fields is not None:
        request.fields(fields)
    return request.build()


def metas(*docs: tuple[str, str]) -> lark.BaseRequest:
    wanted = [RequestDoc.builder().doc_token(t).doc_type(k).build() for t, k in docs]
    body = MetaRequest.builder().request_docs(wanted).with_url(False).build()
    return BatchQueryMetaRequest.builder().user_id_type("open_id").request_body(body).build()


# -- chats -------------------------------------------------------------------------------


async def test_a_chats_members_are_paged_without_its_bots(fake, client) -> None:
    fake.workspace.chats["oc_fake_eng"].members.add("ou_fake_zhang")
    first = await data(client, members("oc_fake_eng", member_id_type="open_id", page_size=2))
    assert first["member_total"] == 3 and first["has_more"] is True
    assert [m["member_id"] for m in first["items"]] == [ALICE, BOB]
    assert first["items"][0] == {
        "member_id_type": "open_id",
        "member_id": ALICE,
        "name": "Alice Wang",
        "tenant_key": "fake_tenant",
    }
    rest = await data(client, members("oc_fake_eng", page_size=2, page_token=first["page_token"]))
    assert [m["member_id"] for m in rest["items"]] == ["ou_fake_zhang"]
    assert rest["has_more"] is False and rest["page_token"] == ""
    assert fake.bot_open_id not in str(first) + str(rest)

    by_union = await data(client, members("oc_fake_board", member_id_type="union_id"))
    assert [m["member_id"] for m in by_union["items"]] == ["on_fake_bob"]


async def test_an_external_chat_says_so_and_lists_the_other_tenant(client) -> None:
    partners = await data(client, members("oc_fake_partners"))
    assert {m["member_id"]: m["tenant_key"] for m in partners["items"]} == {
        ALICE: "fake_tenant",
        PARTNER: "partner_tenant",
    }
    facts = await data(client, GetChatRequest.builder().chat_id("oc_fake_partners").build())
    assert facts["external"] is True and facts["user_count"] == "2"
    inner = await data(client, GetChatRequest.builder().chat_id("oc_fake_eng").build())
    assert inner["external"] is False and inner["name"] == "Engineering"


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (members("oc_fake_hr"), 232011),  # the bot is not in it
        (members("oc_nowhere"), 232006),
        (members("oc_fake_eng", member_id_type="email"), 232015),
        (members("oc_fake_eng", page_size=101), 99992402),
        (GetChatRequest.builder().chat_id("oc_fake_hr").build(), 232011),
    ],
    ids=["not_in_chat", "unknown_chat", "id_type", "page_size", "facts_not_in_chat"],
)
async def test_chat_refusals(client, request_, code) -> None:
    assert (await code_of(client, request_))[0] == code


# -- documents and Bases -------------------------------------------------------------------


async def test_a_documents_direct_collaborators_leave_the_owner_out(client) -> None:
    found = await data(client, collaborators("doxcnFakeHandbook", "docx"))
    assert found["items"] == [
        {
            "member_type": "openid",
            "member_id": ALICE,
            "perm": "view",
            "perm_type": "container",
            "type": "user",
        },
        {
            "member_type": "openchat",
            "member_id": "oc_fake_eng",
            "perm": "view",
            "perm_type": "container",
            "type": "chat",
        },
    ]
    named = await data(client, collaborators("doxcnFakeHandbook", "docx", fields="name"))
    assert [m["name"] for m in named["items"]] == ["Alice Wang", "Engineering"]
    base = await data(client, collaborators("bascnFakeProjects", "bitable"))
    assert {m["member_id"] for m in base["items"]} == {BOB, "oc_fake_eng"}  # Alice owns it


async def test_metas_name_the_owner_and_fail_what_the_app_may_not_read(client) -> None:
    found = await data(
        client,
        metas(
            ("doxcnFakeBudget", "docx"),
            ("bascnFakeProjects", "bitable"),
            ("doxcnFakeSecret", "docx"),
            ("doxcnNope", "docx"),
        ),
    )
    assert {m["doc_token"]: m["owner_id"] for m in found["metas"]} == {
        "doxcnFakeBudget": BOB,
        "bascnFakeProjects": ALICE,
    }
    assert found["metas"][0]["title"] == "Budget 2026"
    assert found["failed_list"] == [
        {"token": "doxcnFakeSecret", "code": 970003},
        {"token": "doxcnNope", "code": 970005},
    ]


@pytest.mark.parametrize(
    ("request_", "code", "status"),
    [
        (collaborators("doxcnFakeSecret", "docx"), 1063002, 403),  # the app has no access
        (collaborators("doxcnNope", "docx"), 1063001, 400),
        (collaborators("doxcnFakeHandbook", "bitable"), 1063001, 400),  # not a Base
        (collaborators("doxcnFakeHandbook", None), 99992402, 400),
        (GetAppRequest.builder().app_token("bascnFakeLocked").build(), 91403, 403),
    ],
    ids=["no_access", "unknown", "wrong_type", "no_type", "base_no_access"],
)
async def test_share_refusals(client, request_, code, status) -> None:
    assert await code_of(client, request_) == (code, status)


async def test_a_base_says_whether_it_has_advanced_permissions(client) -> None:
    plain = await data(client, GetAppRequest.builder().app_token("bascnFakeProjects").build())
    assert plain["app"]["is_advanced"] is False and plain["app"]["name"] == "Projects"
    levels = await data(client, GetAppRequest.builder().app_token("bascnFakeLevels").build())
    assert levels["app"]["is_advanced"] is True


# -- events and tasklists ------------------------------------------------------------------


async def test_an_events_attendees_are_listed_in_the_id_type_asked(fake, client) -> None:
    events = {e.summary: e for e in fake.workspace.calendars[BOT_CALENDAR_ID].events}

    def attendees(summary: str, id_type: str = "open_id") -> lark.BaseRequest:
        return (
            ListCalendarEventAttendeeRequest.builder()
            .calendar_id(BOT_CALENDAR_ID)
            .event_id(events[summary].event_id)
            .user_id_type(id_type)
            .page_size(50)
            .build()
        )

    sync = await data(client, attendees("Weekly sync"))
    assert [(a["type"], a["chat_id"]) for a in sync["items"]] == [("chat", "oc_fake_eng")]
    review = await data(client, attendees("Design review", "union_id"))
    assert [a["user_id"] for a in review["items"]] == ["on_fake_alice", "on_fake_bob"]
    assert review["items"][0]["display_name"] == "Alice Wang"
    gone = (
        ListCalendarEventAttendeeRequest.builder()
        .calendar_id(BOT_CALENDAR_ID)
        .event_id("nope_0")
        .build()
    )
    assert (await code_of(client, gone))[0] == 193001


async def test_a_tasklist_names_its_members(client) -> None:
    launch = await data(
        client,
        GetTasklistRequest.builder().tasklist_guid("fake-tasklist-launch").build(),
    )
    assert launch["tasklist"]["members"] == [
        {"id": "oc_fake_launch", "type": "chat", "role": "viewer"}
    ]
    secret = GetTasklistRequest.builder().tasklist_guid("fake-tasklist-secret").build()
    assert (await code_of(client, secret))[0] == 1470403
