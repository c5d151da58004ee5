"""A push names the app it is for (``header.app_id``): the verifier refuses another app's,
even signed with this app's key (two apps configured with one Encrypt Key), for events
and card callbacks alike. (Over the long connection each app has a connection of its own,
opened with its own secret.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.feishu.webhook import Challenge, Refused, VerifiedEvent, WebhookVerifier

from fakes.feishu_push import card_action_event, message_event, signed_request

KEY, TOKEN, APP = "ek-app", "vt-app", "cli_mine"


def verifier(app_id: str = APP) -> WebhookVerifier:
    return WebhookVerifier(
        verification_token=TOKEN, encrypt_key=KEY, max_age_seconds=300, app_id=app_id
    )


def event(app_id: str) -> dict:
    return message_event(
        message_id="om_1", chat_id="oc_1", text="hi", verification_token=TOKEN, app_id=app_id
    )


def card(app_id: str) -> dict:
    return card_action_event(verification_token=TOKEN, value={"a": 1}, app_id=app_id)


@pytest.mark.parametrize("build", [event, card])
def test_this_app_s_push_is_opened_and_another_app_s_refused(build):
    mine = verifier().open(*signed_request(build(APP), encrypt_key=KEY))
    assert isinstance(mine, VerifiedEvent)
    other = verifier().open(*signed_request(build("cli_other"), encrypt_key=KEY))
    assert other == Refused(403, "the push is for another app (header.app_id)")


@given(st.text(max_size=40).filter(lambda name: name != APP))
def test_any_other_name_in_the_header_is_refused(name):
    opened = verifier().open(*signed_request(event(name), encrypt_key=KEY))
    assert isinstance(opened, Refused) and opened.status == 403


def test_a_header_without_app_id_is_judged_by_its_signature_alone():
    envelope = event(APP)
    del envelope["header"]["app_id"]
    assert isinstance(verifier().open(*signed_request(envelope, encrypt_key=KEY)), VerifiedEvent)


def test_a_verifier_that_knows_no_app_checks_none():
    """The check needs the app's id; without one (a test's bare verifier) nothing changes."""
    opened = verifier(app_id="").open(*signed_request(event("cli_any"), encrypt_key=KEY))
    assert isinstance(opened, VerifiedEvent)


def test_url_verification_is_unaffected():
    body, headers = signed_request(
        {"type": "url_verification", "token": TOKEN, "challenge": "c"}, encrypt_key=KEY
    )
    assert verifier().open(body, headers) == Challenge("c")
