"""Approval and admin cards: golden JSON for every state, and properties of any card.

Each ``tests/fixtures/cards/<name>.json`` is exactly what the builder returns for the
fixed view of the same name in ``GOLDEN`` below. To (re)write them after a deliberate
change, run with ``LARKGATE_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.feishu.admin_card import (
    ADMIN_ACTION,
    MODE_OFF,
    MODE_ON,
    AdminCardView,
    admin_button_value,
    admin_card,
)
from bot.feishu.approval_card import (
    APPROVAL_ACTION,
    DECISIONS,
    ApprovalCardView,
    approvable_from_card,
    approval_card,
    button_value,
    escape_markdown,
    format_time,
    mention,
)

from support.cards import buttons as _buttons
from support.cards import nodes as _nodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cards"
CARD_LIMIT_BYTES = 30 * 1024  # what Feishu (and the emulator) accepts for a card
UPDATE = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"

T0 = 1741932000.0  # 2025-03-14 06:00:00 UTC (14:00 in Asia/Shanghai)

PENDING = ApprovalCardView(
    approval_id="apr_01JPX7",
    tool="sql_execute",
    arguments=json.dumps(
        {"connector": "warehouse", "sql": "DELETE FROM orders WHERE status = 'test'"}, indent=2
    ),
    requester="ou_requester",
    reason="Remove the test orders the user asked about",
    approvers=("ou_admin_a", "ou_admin_b"),
    expires_at=T0 + 600,
)

SEVERAL = ("ou_requester", "ou_carol")

GOLDEN: dict[str, Callable[[], dict[str, Any]]] = {
    "approval_pending": lambda: approval_card(PENDING),
    "approval_approved": lambda: approval_card(
        replace(PENDING, state="approved", decided_by="ou_admin_a", decided_at=T0 + 300)
    ),
    "approval_approved_session": lambda: approval_card(
        replace(
            PENDING,
            state="approved",
            session=True,
            decided_by="ou_admin_b",
            decided_at=T0 + 120,
            timezone="Asia/Shanghai",
        )
    ),
    "approval_denied": lambda: approval_card(
        replace(PENDING, state="denied", decided_by="ou_admin_b", decided_at=T0 + 45)
    ),
    "approval_expired": lambda: approval_card(
        replace(PENDING, state="expired", decided_at=T0 + 601, timezone="Asia/Shanghai")
    ),
    "approval_cancelled": lambda: approval_card(
        replace(PENDING, state="cancelled", decided_at=T0 + 90, note="the run was stopped")
    ),
    # Long: the whole call in a collapsible panel of several code blocks.
    "approval_pending_long": lambda: approval_card(
        replace(
            PENDING,
            arguments=json.dumps(
                {"rows": [{"id": n, "note": f"row {n} of the import"} for n in range(120)]},
                indent=2,
            ),
        )
    ),
    # Too long for any card: what is not shown, and the console that shows it.
    "approval_pending_hidden": lambda: approval_card(
        replace(
            PENDING,
            arguments=json.dumps({"sql": "SELECT 1;" * 4_000}, indent=2),
            console_url="https://bot.example.com/console",
        )
    ),
    # A write that runs with the requester's own Feishu account: the card says as whom.
    "approval_pending_as_user": lambda: approval_card(replace(PENDING, acts_as_user=True)),
    # Carol's message joined the requester's reply: the call is asked for by both.
    "approval_pending_several": lambda: approval_card(replace(PENDING, requesters=SEVERAL)),
    "approval_approved_session_several": lambda: approval_card(
        replace(
            PENDING,
            requesters=SEVERAL,
            state="approved",
            session=True,
            decided_by="ou_admin_a",
            decided_at=T0 + 60,
        )
    ),
    "admin_off": lambda: admin_card(
        AdminCardView(
            read_only=False,
            changed_by="ou_admin_a",
            changed_at=T0 - 86_400,
            admins=("ou_admin_a", "ou_admin_b"),
        )
    ),
    "admin_on": lambda: admin_card(
        AdminCardView(
            read_only=True,
            changed_by="ou_admin_b",
            changed_at=T0,
            admins=("ou_admin_a", "ou_admin_b"),
            timezone="Asia/Shanghai",
            notice="Read-only mode turned on by <at id=ou_admin_b></at>",
        )
    ),
}


# -- golden cards ----------------------------------------------------------------------------


def test_every_fixture_has_a_view_and_every_view_a_fixture():
    on_disk = {path.stem for path in FIXTURES.glob("*.json")}
    assert on_disk == set(GOLDEN) or UPDATE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_card(name: str):
    card = GOLDEN[name]()
    path = FIXTURES / f"{name}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n")
    assert card == json.loads(path.read_text())


# -- what the golden cards say, spelled out ------------------------------------------------


def _markdown_of(card: dict[str, Any], element_id: str) -> str:
    for node in _nodes(card):
        if node.get("element_id") == element_id:
            return node["content"]
    raise AssertionError(f"no element {element_id!r}")


def test_pending_card_shows_the_facts_and_three_buttons():
    card = approval_card(PENDING)
    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    assert card["config"]["summary"] == {"content": "Approval needed: sql_execute"}
    assert card["header"]["template"] == "orange"
    assert card["header"]["title"]["content"] == "Approval needed"
    assert card["header"]["subtitle"]["content"] == "sql_execute"
    facts = _markdown_of(card, "facts")
    assert "<at id=ou_requester></at>" in facts
    assert "Remove the test orders the user asked about" in facts
    assert "`sql_execute`" in facts
    args = _markdown_of(card, "args")
    assert args.startswith("**Arguments**\n```json\n{\n")
    assert args.endswith("\n```")
    people = _markdown_of(card, "people")
    assert "<at id=ou_admin_a></at> <at id=ou_admin_b></at>" in people
    assert "Expires at 06:10 (UTC)" in people
    buttons = _buttons(card)
    assert [b["text"]["content"] for b in buttons] == [
        "Approve",
        "Approve for this person here",
        "Deny",
    ]
    # The card says what the session button grants, and to whom.
    session_note = _markdown_of(card, "session_note")
    assert "`sql_execute` calls asked by <at id=ou_requester></at>" in session_note
    assert "Anyone else still gets a card." in session_note
    assert [b["type"] for b in buttons] == ["primary_filled", "default", "danger"]
    footer = [n for n in _nodes(card) if n.get("element_id") == "footer"]
    assert footer[0]["text"]["content"] == "Approval ID: apr_01JPX7"
    assert footer[0]["text"]["text_color"] == "grey"


@pytest.mark.parametrize(
    ("changes", "template", "line"),
    [
        (
            {"state": "approved", "decided_by": "ou_a", "decided_at": T0 + 300},
            "green",
            "✅ Approved by <at id=ou_a></at> at 06:05 (UTC)",
        ),
        (
            {"state": "approved", "session": True, "decided_by": "ou_a", "decided_at": T0},
            "green",
            "✅ Approved for <at id=ou_requester></at> in this conversation by <at id=ou_a></at>"
            " at 06:00 (UTC)",
        ),
        (
            {"state": "denied", "decided_by": "ou_a", "decided_at": T0 + 60},
            "red",
            "❌ Denied by <at id=ou_a></at> at 06:01 (UTC)",
        ),
        (
            {"state": "expired", "timezone": "Asia/Shanghai"},
            "grey",
            "⌛ Expired at 14:10 (Asia/Shanghai) (no decision within the time limit)",
        ),
        (
            {"state": "cancelled", "note": "the bot restarted"},
            "grey",
            "⏹ Cancelled: the bot restarted",
        ),
        (
            {"state": "denied", "decided_at": T0, "note": "read-only mode is on"},
            "red",
            "❌ Denied at 06:00 (UTC) — read-only mode is on",
        ),
    ],
)
def test_resolved_card_says_what_happened(changes: dict[str, Any], template: str, line: str):
    card = approval_card(replace(PENDING, **changes))
    assert card["header"]["template"] == template
    assert _markdown_of(card, "decision") == line
    assert _buttons(card) == []
    # The facts stay.
    assert "<at id=ou_requester></at>" in _markdown_of(card, "facts")
    assert "DELETE FROM orders" in _markdown_of(card, "args")


def test_the_admin_card_in_both_modes():
    off = admin_card(AdminCardView(read_only=False))
    on = admin_card(AdminCardView(read_only=True, changed_by="ou_a", changed_at=T0))
    assert (off["header"]["template"], on["header"]["template"]) == ("blue", "red")
    assert off["header"]["title"]["content"] == "larkgate admin"
    assert _markdown_of(off, "mode") == MODE_OFF
    assert _markdown_of(on, "mode") == MODE_ON
    assert _markdown_of(off, "changed").startswith("Last changed: never")
    assert _markdown_of(on, "changed") == (
        "Last changed by <at id=ou_a></at> on 2025-03-14 06:00 (UTC)"
    )
    assert _markdown_of(off, "admins") == "**Admins** none configured"
    [turn_on] = _buttons(off)
    [turn_off] = _buttons(on)
    assert (turn_on["text"]["content"], turn_on["type"]) == ("Turn read-only on", "danger")
    assert (turn_off["text"]["content"], turn_off["type"]) == ("Turn read-only off", "primary")
    assert turn_on["behaviors"] == [
        {
            "type": "callback",
            "value": {"action": "admin", "setting": "read_only", "value": "on", "version": 0},
        }
    ]
    assert turn_off["behaviors"][0]["value"] == admin_button_value("read_only", "off", 0)
    sealed = admin_card(AdminCardView(read_only=True, version=7, seal="abc"))
    [turn_off_sealed] = _buttons(sealed)
    assert turn_off_sealed["behaviors"][0]["value"] == {
        **admin_button_value("read_only", "off", 7),
        "seal": "abc",
    }
    assert turn_on["confirm"]["title"]["tag"] == "plain_text"
    assert "confirm" not in turn_off
    assert not any(n.get("element_id") == "notice" for n in _nodes(on))


def test_button_values():
    assert button_value("apr_1", "deny") == {
        "action": "approval",
        "decision": "deny",
        "approval_id": "apr_1",
    }
    assert APPROVAL_ACTION == "approval"
    assert ADMIN_ACTION == "admin"
    assert admin_button_value("read_only", "on", 3) == {
        "action": "admin",
        "setting": "read_only",
        "value": "on",
        "version": 3,
    }


# -- properties of every card ----------------------------------------------------------------

NASTY = (
    "**bold** _it_ ~~s~~ `code` [link](https://evil.example) <at id=all></at> | x |\n# h\n- item"
)


def _views() -> Iterator[ApprovalCardView]:
    states = ("pending", "approved", "denied", "expired", "cancelled")
    variants = [
        PENDING,
        replace(PENDING, reason=None, approvers=(), note="re-posted after a restart"),
        replace(PENDING, arguments="x" * 100_000, reason="y" * 100_000),
        replace(PENDING, arguments="```\n" * 5_000, tool="a`b" * 500, note="n" * 10_000),
        replace(PENDING, tool=NASTY, reason=NASTY, note=NASTY, arguments=NASTY),
        replace(PENDING, arguments="\x01\u202e\ud800" * 3_000, approvers=("ou_a",) * 500),
        replace(
            PENDING, requester="all", approvers=("all", "ou_x></at><at id=all"), decided_by="@"
        ),
        replace(PENDING, timezone="Not/AZone", decided_at=T0, session=True),
        replace(PENDING, arguments="", reason="", tool=""),
    ]
    for view in variants:
        for state in states:
            yield replace(view, state=state)  # type: ignore[arg-type]


def _admin_views() -> Iterator[AdminCardView]:
    for read_only in (False, True):
        yield AdminCardView(read_only=read_only)
        yield AdminCardView(
            read_only=read_only,
            changed_by="ou_a",
            changed_at=T0,
            admins=tuple(f"ou_{i}" for i in range(100)),
            timezone="America/Port_of_Spain",
            notice="Read-only mode turned off by <at id=ou_a></at>",
        )


def _all_cards() -> Iterator[dict[str, Any]]:
    for view in _views():
        yield approval_card(view)
    for admin in _admin_views():
        yield admin_card(admin)
    for make in GOLDEN.values():
        yield make()


def test_element_ids_are_valid_and_unique():
    for card in _all_cards():
        ids = [node["element_id"] for node in _nodes(card) if "element_id" in node]
        assert len(ids) == len(set(ids)), ids
        for element_id in ids:
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,19}", element_id), element_id


def test_every_card_is_json_2_and_under_the_size_limit():
    for card in _all_cards():
        assert card["schema"] == "2.0"
        assert card["config"]["update_multi"] is True
        assert card["config"]["summary"]["content"]
        size = len(json.dumps(card, ensure_ascii=False).encode())
        assert size < CARD_LIMIT_BYTES, size


def test_pending_buttons_carry_the_approval_and_the_decision():
    for view in _views():
        card = approval_card(view)
        buttons = _buttons(card)
        readable = approvable_from_card(view)
        if view.state != "pending":
            assert buttons == []
            assert not any("behaviors" in node or "confirm" in node for node in _nodes(card))
            continue
        values = []
        for button in buttons:
            [behavior] = button["behaviors"]
            assert behavior["type"] == "callback"
            value = json.loads(json.dumps(behavior["value"]))
            assert isinstance(value, dict)
            assert set(value) == {"action", "decision", "approval_id"}
            assert value["action"] == APPROVAL_ACTION
            assert value["approval_id"] == view.approval_id
            values.append(value["decision"])
        # A call nobody can read whole (too long for the card, no console) has Deny only.
        assert values == (list(DECISIONS) if readable else ["deny"])


def test_long_arguments_are_shown_whole_in_a_panel():
    arguments = "\n".join(f'  "line {n}": "{"v" * 60}",' for n in range(200))
    card = approval_card(replace(PENDING, arguments=arguments))
    [panel] = [n for n in _nodes(card) if n.get("tag") == "collapsible_panel"]
    assert panel["expanded"] is False
    assert f"{len(arguments):,} characters, 200 lines" in panel["header"]["title"]["content"]
    blocks = [e["content"] for e in panel["elements"]]
    assert all(len(block) <= 2_100 for block in blocks)  # one markdown element drops more
    shown = "".join(block.split("\n", 1)[1].rsplit("\n", 1)[0] for block in blocks)
    assert shown.replace("\n", "") == arguments.replace("\n", "")
    assert not any(n.get("element_id") == "args_hidden" for n in _nodes(card))
    assert [b["behaviors"][0]["value"]["decision"] for b in _buttons(card)] == list(DECISIONS)


def test_arguments_too_long_for_a_card_say_how_much_is_not_shown_and_where_to_read_it():
    arguments = '{"sql": "' + "x" * 60_000 + '; DROP TABLE users"}'
    linked = approval_card(
        replace(PENDING, arguments=arguments, console_url="https://bot.example.com/console")
    )
    note = _markdown_of(linked, "args_hidden")
    hidden = int(re.search(r"\*\*([\d,]+) of", note).group(1).replace(",", ""))
    assert f"of {len(arguments):,} characters are not shown" in note
    assert "[web console](https://bot.example.com/console)" in note
    shown = "".join(
        e["content"]
        for n in _nodes(linked)
        if n.get("tag") == "collapsible_panel"
        for e in n["elements"]
    )
    assert hidden == len(arguments) - shown.count("x") - len('{"sql": "')
    assert "DROP TABLE" not in shown  # the tail is exactly what the note says is missing
    assert "approve" in [b["behaviors"][0]["value"]["decision"] for b in _buttons(linked)]

    unlinked = approval_card(replace(PENDING, arguments=arguments, console_url=""))
    assert "in the web console (Approvals)" in _markdown_of(unlinked, "args_hidden")

    # Nowhere to read it whole: it cannot be approved from the card, only denied.
    blind = approval_card(replace(PENDING, arguments=arguments, console_url=None))
    assert "cannot be approved from this card" in _markdown_of(blind, "args_hidden")
    assert [b["behaviors"][0]["value"]["decision"] for b in _buttons(blind)] == ["deny"]
    assert not any(n.get("element_id") == "session_note" for n in _nodes(blind))


def test_session_grants_switched_off_remove_the_button():
    card = approval_card(replace(PENDING, session_grants=False))
    assert [b["behaviors"][0]["value"]["decision"] for b in _buttons(card)] == [
        "approve",
        "deny",
    ]


def test_fences_inside_arguments_cannot_close_the_block():
    arguments = "before\n```\n**not bold** <at id=all></at>\n````\nafter ``` `x`"
    args = _markdown_of(approval_card(replace(PENDING, arguments=arguments)), "args")
    assert args.count("```") == 2  # ours: the opening and the closing fence
    assert "<at id=all>" not in args
    assert "`x`" in args  # single backticks are harmless inside a block
    assert "before" in args and "after" in args


def test_hidden_characters_in_arguments_are_shown():
    args = _markdown_of(approval_card(replace(PENDING, arguments="rm \u202eabc\x00")), "args")
    assert "rm \\u202eabc\\u0000" in args
    # A lone surrogate does not make the card unencodable.
    card = approval_card(replace(PENDING, arguments="\ud800", reason="\ud800", tool="\ud800"))
    json.dumps(card, ensure_ascii=False).encode()


def test_markdown_in_tool_and_reason_cannot_break_the_layout():
    for view in _views():
        if view.tool != NASTY:
            continue
        card = approval_card(view)
        assert "<at id=all>" not in json.dumps(card, ensure_ascii=False)
        for node in _nodes(card):
            if node.get("tag") != "markdown":
                continue
            # What is left outside code is our own markup and escaped text.
            outside = re.sub(r"```.*?```|`[^`\n]*`", "", node["content"], flags=re.DOTALL)
            assert "**bold**" not in outside
            assert "](https://" not in outside
            assert "~~s~~" not in outside
            assert "_it_" not in outside
        facts = _markdown_of(card, "facts")
        # The reason is one line of escaped text; the tool is one code span.
        assert len(facts.split("\n")) == 3
        reason_line = facts.split("\n")[1]
        assert not set("*_~`[]<>|") & set(reason_line.removeprefix("**Reason** "))
        assert facts.split("\n")[2].count("`") == 2
        # Plain-text places show the tool as it is (flattened to one line).
        assert card["header"]["subtitle"]["content"].startswith("**bold** _it_")


def test_only_well_formed_open_ids_become_mentions():
    assert mention("ou_3c14ab") == "<at id=ou_3c14ab></at>"
    assert "<at" not in mention("all")
    assert "<at" not in mention("ou_x></at><at id=all")
    assert mention("") == "(unknown)"
    card = approval_card(replace(PENDING, requester="all", approvers=("ALL", "ou_ok")))
    text = json.dumps(card)
    assert "<at id=all" not in text.lower()
    assert "<at id=ou_ok></at>" in text


def test_times_use_the_zone_and_fall_back_to_utc():
    assert format_time(T0, "UTC") == "06:00 (UTC)"
    assert format_time(T0, "Asia/Shanghai") == "14:00 (Asia/Shanghai)"
    assert format_time(T0, "Asia/Shanghai", date=True) == "2025-03-14 14:00 (Asia/Shanghai)"
    assert format_time(T0, "Not/AZone") == "06:00 (UTC)"
    assert format_time(T0, "") == "06:00 (UTC)"
    assert format_time(T0, "America/Port_of_Spain") == "02:00 (America/Port&#95;of&#95;Spain)"
    assert format_time(1e300, "UTC") == "(unknown time)"


def test_escape_markdown():
    assert escape_markdown("a*b_c <x> [y] `z` ~ | \\ &") == (
        "a&#42;b&#95;c &#60;x&#62; &#91;y&#93; &#96;z&#96; &#126; &#124; &#92; &#38;"
    )


def test_a_call_that_acts_as_the_requester_says_so():
    card = approval_card(replace(PENDING, acts_as_user=True))
    facts = _markdown_of(card, "facts")
    assert "**Tool** `sql_execute` as <at id=ou_requester></at>" in facts
    assert "their own Feishu account and permissions, not the bot's" in facts
    assert card["header"]["subtitle"]["content"] == "sql_execute as the requester"
    assert "as <at" not in _markdown_of(approval_card(PENDING), "facts")


def test_a_call_several_people_asked_for_names_them_all_and_grants_each():
    card = approval_card(replace(PENDING, requesters=("ou_requester", "ou_carol", "ou_dave")))
    facts = _markdown_of(card, "facts")
    assert (
        "**Requested by** <at id=ou_requester></at>, <at id=ou_carol></at> and <at id=ou_dave></at>"
    ) in facts
    assert [b["text"]["content"] for b in _buttons(card)] == [
        "Approve",
        "Approve for these people here",
        "Deny",
    ]
    session_note = _markdown_of(card, "session_note")
    assert (
        "when asked only by <at id=ou_requester></at>, <at id=ou_carol></at> and "
        "<at id=ou_dave></at> (any of them, alone or together)"
    ) in session_note
    assert "A call anyone else asks for too still gets a card." in session_note
    two = approval_card(replace(PENDING, requesters=SEVERAL))
    assert "**Requested by** <at id=ou_requester></at> and <at id=ou_carol></at>" in (
        _markdown_of(two, "facts")
    )
    granted = approval_card(
        replace(PENDING, requesters=SEVERAL, state="approved", session=True, decided_by="ou_a")
    )
    assert granted["header"]["title"]["content"] == "Approved for these people here"
    assert _markdown_of(granted, "decision").startswith(
        "✅ Approved for <at id=ou_requester></at> and <at id=ou_carol></at> in this conversation"
    )
    # An unknown sender is named as such, never as a mention of anyone.
    unknown = _markdown_of(
        approval_card(replace(PENDING, requesters=("ou_requester", ""))), "facts"
    )
    assert "<at id=ou_requester></at> and (unknown)" in unknown


def test_a_call_as_the_requester_asked_for_by_several_says_it_runs_as_nobody():
    facts = _markdown_of(
        approval_card(replace(PENDING, requesters=SEVERAL, acts_as_user=True)), "facts"
    )
    assert "as <at" not in facts
    assert "it will not run as anyone" in facts
