"""The OAuth state is unforgeable, expires, is bound to one user, and is used once; PKCE
follows RFC 7636."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.feishu.oauth_state import StateError, StateSigner, code_challenge, first_use

NOW = 1_700_000_000.0
SIGNER = StateSigner("a-secret-of-ours")
ISSUED = SIGNER.issue(open_id="ou_alice", chat_id="oc_1", now=NOW, ttl_seconds=600)


def test_a_fresh_state_verifies_with_its_claims():
    claims = SIGNER.verify(ISSUED.state, now=NOW + 599, open_id="ou_alice")
    assert claims == ISSUED.claims
    assert (claims.open_id, claims.chat_id, claims.expires_at) == ("ou_alice", "oc_1", NOW + 600)


def test_the_state_is_url_safe():
    assert set(ISSUED.state) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    )


def test_an_expired_state_is_refused():
    with pytest.raises(StateError) as refused:
        SIGNER.verify(ISSUED.state, now=NOW + 600)
    assert refused.value.reason == "expired"


def test_another_users_state_does_not_verify_as_yours():
    with pytest.raises(StateError) as refused:
        SIGNER.verify(ISSUED.state, now=NOW, open_id="ou_mallory")
    assert refused.value.reason == "wrong_user"


def test_a_state_signed_with_another_key_is_forged():
    other = StateSigner("someone-elses-secret").issue(
        open_id="ou_alice", chat_id="oc_1", now=NOW, ttl_seconds=600
    )
    with pytest.raises(StateError) as refused:
        SIGNER.verify(other.state, now=NOW)
    assert refused.value.reason == "forged"


def test_a_rewritten_payload_with_the_old_mac_is_forged():
    body, mac = ISSUED.state.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["u"] = "ou_mallory"
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    with pytest.raises(StateError) as refused:
        SIGNER.verify(f"{forged}.{mac}", now=NOW)
    assert refused.value.reason == "forged"


@pytest.mark.parametrize("state", ["", ".", "abc", "a.b.c", "!!.??", "x" * 2000, "e30.e30"])
def test_malformed_states_are_refused(state):
    with pytest.raises(StateError):
        SIGNER.verify(state, now=NOW)


@settings(max_examples=300, deadline=None)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_any_change_to_one_character_is_refused(position, replacement):
    state = ISSUED.state
    index = position % len(state)
    tampered = state[:index] + replacement + state[index + 1 :]
    if tampered == state:
        return
    with pytest.raises(StateError):
        SIGNER.verify(tampered, now=NOW)


def test_a_mac_spelled_another_way_is_refused():
    # The last of a MAC's 43 characters carries 4 bits and 2 spare ones: these four
    # strings decode to the same bytes. Only the one we wrote is ours.
    body, mac = ISSUED.state.split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(mac[-1])
    for spare in range(1, 4):
        variant = mac[:-1] + alphabet[(last & ~3) | ((last + spare) & 3)]
        with pytest.raises(StateError):
            SIGNER.verify(f"{body}.{variant}", now=NOW)
    with pytest.raises(StateError):  # a character base64 would skip
        SIGNER.verify(f"{body}.{mac[:10]}!{mac[10:]}", now=NOW)


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=1), extra=st.text(min_size=1, max_size=8))
def test_truncated_or_extended_states_are_refused(cut, extra):
    state = ISSUED.state
    for tampered in (state[: -(1 + cut % (len(state) - 1))], state + extra):
        with pytest.raises(StateError):
            SIGNER.verify(tampered, now=NOW)


def test_every_state_has_its_own_nonce_and_verifier():
    again = SIGNER.issue(open_id="ou_alice", chat_id="oc_1", now=NOW, ttl_seconds=600)
    assert again.claims.nonce != ISSUED.claims.nonce
    assert SIGNER.code_verifier(again.claims) != SIGNER.code_verifier(ISSUED.claims)


def test_the_verifier_is_recomputed_from_the_state_and_matches_its_challenge():
    claims = StateSigner("a-secret-of-ours").verify(ISSUED.state, now=NOW)
    verifier = StateSigner("a-secret-of-ours").code_verifier(claims)
    assert 43 <= len(verifier) <= 128
    assert code_challenge(verifier) == ISSUED.code_challenge


def test_code_challenge_is_rfc7636_s256():
    # RFC 7636 Appendix B.
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert code_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    digest = hashlib.sha256(verifier.encode()).digest()
    assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == code_challenge(verifier)


@pytest.mark.parametrize("verifier", ["short", "x" * 129, "a" * 42 + "!"])
def test_bad_verifiers_are_refused(verifier):
    with pytest.raises(ValueError, match="43-128"):
        code_challenge(verifier)


def test_an_empty_secret_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        StateSigner("")


class _Guard:
    def __init__(self) -> None:
        self.seen: dict[str, float] = {}

    async def first_sighting(self, key: str, *, remember_seconds: float) -> bool:
        if key in self.seen:
            return False
        self.seen[key] = remember_seconds
        return True


async def test_first_use_refuses_the_replay_of_a_state():
    guard = _Guard()
    assert await first_use(guard, ISSUED.claims, now=NOW + 100)
    assert not await first_use(guard, ISSUED.claims, now=NOW + 101)
    (key, remember) = next(iter(guard.seen.items()))
    assert key == f"oauth-state:{ISSUED.claims.nonce}"
    assert remember == 500 + 60  # until it expires, plus clock skew
