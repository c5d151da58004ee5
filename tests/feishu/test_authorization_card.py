"""The authorisation card: golden JSON for every state, and what any outside text can do.

Each ``tests/fixtures/cards/authorization/<name>.json`` is what the builder returns for the
view of the same name in ``GOLDEN``; ``LARKGATE_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.feishu.authorization_card import AuthorizationCardView, authorization_card

from support.cards import buttons, nodes, texts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cards" / "authorization"
UPDATE = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"
T0 = 1741932000.0  # 2025-03-14 06:00:00 UTC
URL = (
    "https://accounts.feishu.cn/open-apis/authen/v1/authorize?client_id=cli_1&response_type="
    "code&redirect_uri=https%3A%2F%2Fbot.example.com%2Ffeishu%2Foauth%2Fcallback&state=s.m"
)

PENDING = AuthorizationCardView(
    request_id="nonce-01",
    open_id="ou_alice",
    purpose="list your open tasks",
    scopes=("task:task:read", "task:tasklist:read"),
    expires_at=T0 + 600,
    url=URL,
)

GOLDEN: dict[str, Callable[[], dict[str, Any]]] = {
    "pending": lambda: authorization_card(PENDING),
    "pending_device": lambda: authorization_card(
        replace(
            PENDING,
            flow="device",
            url="https://accounts.feishu.cn/oauth/v1/device/verify?user_code=ABCD-EFGH",
            user_code="ABCD-EFGH",
            timezone="Asia/Shanghai",
        )
    ),
    "authorised": lambda: authorization_card(
        replace(PENDING, state="authorised", decided_at=T0 + 42, url="")
    ),
    "expired": lambda: authorization_card(replace(PENDING, state="expired", url="")),
    "cancelled": lambda: authorization_card(
        replace(PENDING, state="cancelled", decided_at=T0 + 5, note="the reply was stopped")
    ),
    "refused": lambda: authorization_card(
        replace(
            PENDING,
            state="refused",
            decided_at=T0 + 30,
            note="someone else consented (only ou_alice may)",
        )
    ),
}


def test_every_fixture_has_a_view_and_every_view_a_fixture():
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(GOLDEN) or UPDATE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_card(name: str):
    card = GOLDEN[name]()
    path = FIXTURES / f"{name}.json"
    if UPDATE:
        path.write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n")
    assert card == json.loads(path.read_text())


def _element(card: dict[str, Any], element_id: str) -> dict[str, Any]:
    (found,) = [n for n in nodes(card) if n.get("element_id") == element_id]
    return found


def test_the_pending_card_says_what_for_which_permissions_whom_and_until_when():
    card = authorization_card(PENDING)
    assert card["header"]["title"]["content"] == "Authorisation needed"
    assert card["header"]["template"] == "orange"
    purpose = _element(card, "purpose")["content"]
    assert purpose.startswith("<at id=ou_alice></at> To **list your open tasks**")
    scopes = _element(card, "scopes")["content"]
    assert "- `task:task:read`\n- `task:tasklist:read`" in scopes
    assert "`offline_access`" in scopes
    how = _element(card, "how")["content"]
    assert "Only <at id=ou_alice></at> can authorise" in how
    assert "until 06:10 (UTC)" in how
    (button,) = buttons(card)
    # A link, not a callback: the consent comes back through Feishu, never a click.
    assert button["behaviors"] == [{"type": "open_url", "default_url": URL}]


def test_the_device_card_shows_the_code_to_confirm():
    card = GOLDEN["pending_device"]()
    assert "confirm the code **ABCD-EFGH**" in _element(card, "how")["content"]
    (button,) = buttons(card)
    assert button["text"]["content"] == "Open Feishu to authorise"


@pytest.mark.parametrize("state", ["authorised", "expired", "cancelled", "refused"])
def test_an_ended_request_has_no_button_and_says_how_it_ended(state: str):
    card = GOLDEN[state]()
    assert buttons(card) == []
    assert _element(card, "outcome")["content"]
    assert card["header"]["template"] != "orange"


_outside = st.text(alphabet=st.characters(codec="utf-8"), max_size=400)


@given(purpose=_outside, note=_outside, code=_outside, scope=_outside)
def test_outside_text_cannot_mention_anyone_or_add_a_button(purpose, note, code, scope):
    for view in (
        replace(PENDING, purpose=purpose, user_code=code, flow="device", scopes=(scope,)),
        replace(PENDING, state="refused", note=note, purpose=purpose, decided_at=T0),
    ):
        card = authorization_card(view)
        shown = "\n".join(texts(card))
        # The one mention is the person's own; nothing from outside adds another.
        assert shown.count("<at ") == shown.count("<at id=ou_alice></at>")
        assert len(buttons(card)) == (1 if view.state == "pending" else 0)
        assert all(b["behaviors"][0]["default_url"] == URL for b in buttons(card))
        json.dumps(card)  # always serialisable
        for text in (purpose, note, code):
            if "\u202e" in text:  # a bidi override never reaches the card as itself
                assert "\u202e" not in shown
