"""Who a run answers: every sender whose message is in it (bot/askers.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.askers import Askers, common

PEOPLE = st.sampled_from(["ou_bob", "ou_carol", "ou_dave", ""])


def test_a_run_nobody_joined_answers_its_starter_alone() -> None:
    askers = Askers.of("ou_bob", [])
    assert askers.everyone == ("ou_bob",)
    assert askers.sole == "ou_bob"
    assert not askers.several


def test_the_starters_own_follow_ups_keep_it_his_alone() -> None:
    assert Askers.of("ou_bob", ["ou_bob", "ou_bob"]).sole == "ou_bob"


def test_a_joiner_makes_the_run_everyones() -> None:
    askers = Askers.of("ou_bob", ["ou_carol", "ou_bob", "ou_carol"])
    assert askers.everyone == ("ou_bob", "ou_carol")
    assert askers.sole is None
    assert askers.several


def test_an_unknown_sender_is_an_asker_no_rule_can_name() -> None:
    askers = Askers.of("ou_bob", ["", ""])
    assert askers.everyone == ("ou_bob", "", "")
    assert askers.sole is None
    assert not askers.all(lambda person: person.startswith("ou_"))
    assert Askers.of("", []).sole is None


@given(PEOPLE, st.lists(PEOPLE, max_size=6))
def test_everyone_who_sent_a_message_is_an_asker(starter: str, joined: list[str]) -> None:
    askers = Askers.of(starter, joined)
    assert set(askers.everyone) == {starter, *joined}
    assert askers.everyone[0] == starter
    # A check over everyone holds only when it holds for each sender.
    for sender in {starter, *joined}:
        assert not askers.all(lambda person, s=sender: person != s)
    if askers.sole is not None:
        assert set(joined) <= {starter} and starter


@given(PEOPLE, st.lists(PEOPLE, max_size=6), st.dictionaries(PEOPLE, st.sets(PEOPLE)))
def test_what_is_common_is_allowed_for_every_asker(
    starter: str, joined: list[str], allowed: dict[str, set[str]]
) -> None:
    askers = Askers.of(starter, joined)
    shared = common(askers, lambda person: sorted(allowed.get(person, set())))
    for item in shared:
        assert askers.all(lambda person, i=item: i in allowed.get(person, set()))
    expected = set.intersection(*(allowed.get(p, set()) for p in askers.everyone))
    assert set(shared) == expected
