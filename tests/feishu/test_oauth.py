"""Per-user OAuth through the real HTTP fake: consent, code exchange with PKCE, refresh
rotation, who the user is, and Feishu's refusals mapped to the error tree."""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.feishu import FeishuClient, FeishuError, FeishuTokenInvalid
from bot.feishu.errors import FeishuAuthorizationGone, FeishuOAuthServerError, error_for
from bot.feishu.oauth import FeishuOAuth, accounts_domain, authorize_url
from bot.feishu.oauth_state import StateSigner
from bot.sandbox.emulator import oauth as fake_oauth

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

REDIRECT = "https://bot.example.com/feishu/oauth/callback"
SCOPES = ["calendar:calendar", "task:task:read"]
SIGNER = StateSigner("a-secret-of-ours")


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


@pytest.fixture
def oauth(fake: FakeFeishu, client: FeishuClient) -> FeishuOAuth:
    return FeishuOAuth(client, feishu_config(fake))


async def consent(fake: FakeFeishu, *, open_id: str = "ou_fake_alice", **extra: str):
    """Open the consent page as a browser would; the code and state it redirects with."""
    issued = SIGNER.issue(open_id=open_id, chat_id="oc_1", now=time.time(), ttl_seconds=600)
    url = authorize_url(
        fake.app_id, REDIRECT, issued.state, issued.code_challenge, SCOPES, domain=fake.domain
    )
    if extra:
        url += "&" + urllib.parse.urlencode(extra)
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, allow_redirects=False) as answer,
    ):
        assert answer.status == 302
        location = urllib.parse.urlsplit(answer.headers["Location"])
    assert location.geturl().startswith(REDIRECT + "?")
    back = dict(urllib.parse.parse_qsl(location.query))
    assert back["state"] == issued.state
    return back, SIGNER.code_verifier(SIGNER.verify(back["state"], now=time.time()))


def test_the_consent_page_is_on_the_accounts_domain():
    url = authorize_url("cli_1", REDIRECT, "st", "ch", ["calendar:calendar"])
    split = urllib.parse.urlsplit(url)
    assert f"{split.scheme}://{split.netloc}{split.path}" == (
        "https://accounts.feishu.cn/open-apis/authen/v1/authorize"
    )
    query = dict(urllib.parse.parse_qsl(split.query))
    assert query == {
        "client_id": "cli_1",
        "response_type": "code",
        "redirect_uri": REDIRECT,
        "scope": "calendar:calendar offline_access",
        "state": "st",
        "code_challenge": "ch",
        "code_challenge_method": "S256",
    }
    assert accounts_domain("https://open.larksuite.com") == "https://accounts.larksuite.com"
    assert accounts_domain("http://127.0.0.1:9/") == "http://127.0.0.1:9"


async def test_exchange_gives_tokens_of_who_consented(fake, client, oauth):
    fake.consent_as("ou_fake_bob")
    back, verifier = await consent(fake)
    before = time.time()
    tokens = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    assert tokens.open_id == "ou_fake_bob"  # the caller compares it with the state's user
    assert tokens.access_token.startswith("u-")
    assert tokens.refresh_token.startswith("ur-")
    assert before + 7200 - 5 <= tokens.expires_at <= time.time() + 7200
    assert tokens.refresh_expires_at > tokens.expires_at
    assert tokens.scopes == {*SCOPES, "offline_access"}
    assert client.call_counts["authen.oauth.token"] == 1
    assert client.call_counts["authen.user_info"] == 1
    (token_call,) = [r for r in fake.requests if r.path == fake_oauth.USER_TOKEN_PATH]
    assert "Authorization" not in token_call.headers  # never the tenant token
    assert token_call.json["grant_type"] == "authorization_code"
    (info_call,) = [r for r in fake.requests if r.path == fake_oauth.USER_INFO_PATH]
    assert info_call.headers["Authorization"] == f"Bearer {tokens.access_token}"


async def test_a_pkce_mismatch_is_refused(fake, oauth):
    back, _ = await consent(fake)
    wrong = SIGNER.code_verifier(
        SIGNER.issue(open_id="x", chat_id="y", now=time.time(), ttl_seconds=60).claims
    )
    with pytest.raises(FeishuError) as refused:
        await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=wrong)
    assert refused.value.code == fake_oauth.CODE_PKCE_MISMATCH
    assert "code_verifier" in refused.value.msg  # error_description becomes the msg


async def test_a_code_is_good_once(fake, oauth):
    back, verifier = await consent(fake)
    await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    with pytest.raises(FeishuError) as refused:
        await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    assert refused.value.code == fake_oauth.CODE_USED


async def test_unknown_expired_and_misdirected_codes_are_refused(fake, oauth):
    with pytest.raises(FeishuError) as unknown:
        await oauth.exchange_code("nope", redirect_uri=REDIRECT, code_verifier="v" * 43)
    assert unknown.value.code == fake_oauth.CODE_UNKNOWN
    back, verifier = await consent(fake)
    with pytest.raises(FeishuError) as misdirected:
        await oauth.exchange_code(
            back["code"], redirect_uri="https://evil.example/cb", code_verifier=verifier
        )
    assert misdirected.value.code == fake_oauth.CODE_REDIRECT_MISMATCH
    fake.oauth_codes[back["code"]].expires_at = 0.0
    with pytest.raises(FeishuError) as expired:
        await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    assert expired.value.code == fake_oauth.CODE_EXPIRED


async def test_a_denied_consent_comes_back_without_a_code(fake):
    back, _ = await consent(fake, deny="1")
    assert back.get("error") == "access_denied"
    assert "code" not in back


async def test_refresh_rotates_and_the_old_refresh_token_is_spent(fake, client, oauth):
    back, verifier = await consent(fake)
    first = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    second = await oauth.refresh(first.refresh_token, open_id=first.open_id)
    assert second.refresh_token != first.refresh_token
    assert second.access_token != first.access_token
    assert second.open_id == "ou_fake_alice"
    assert client.call_counts["authen.user_info"] == 1  # the open_id was known
    assert await oauth.user_open_id(second.access_token) == "ou_fake_alice"
    with pytest.raises(FeishuAuthorizationGone) as spent:
        await oauth.refresh(first.refresh_token)
    assert spent.value.code == 20073


async def test_refresh_without_the_open_id_asks_user_info(fake, oauth):
    back, verifier = await consent(fake)
    first = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    assert (await oauth.refresh(first.refresh_token)).open_id == "ou_fake_alice"


@pytest.mark.parametrize(
    ("control", "code"),
    [("revoke_user_grant", 20064), ("expire_refresh_tokens", 20037), (None, 20026)],
)
async def test_a_lost_grant_means_authorising_again(fake, oauth, control, code):
    back, verifier = await consent(fake)
    tokens = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    refresh_token = tokens.refresh_token
    if control is None:
        refresh_token = "ur-never-issued"
    else:
        getattr(fake, control)("ou_fake_alice")
    with pytest.raises(FeishuAuthorizationGone) as gone:
        await oauth.refresh(refresh_token)
    assert gone.value.code == code
    assert not gone.value.retryable


async def test_user_info_refuses_expired_and_revoked_user_tokens(fake, oauth):
    back, verifier = await consent(fake)
    tokens = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    fake.expire_user_tokens("ou_fake_alice")
    with pytest.raises(FeishuTokenInvalid) as expired:
        await oauth.user_open_id(tokens.access_token)
    assert expired.value.code == 99991677
    fake.revoke_user_grant("ou_fake_alice")
    with pytest.raises(FeishuTokenInvalid) as revoked:
        await oauth.user_open_id(tokens.access_token)
    assert revoked.value.code == 99991668


async def test_a_wrong_app_secret_is_refused(fake, client):
    config = feishu_config(fake)
    wrong = FeishuOAuth(client, type(config)(**{**vars_of(config), "app_secret": "wrong"}))
    with pytest.raises(FeishuError) as refused:
        await wrong.refresh("ur-anything")
    assert refused.value.code == fake_oauth.CODE_BAD_CLIENT


def vars_of(config):
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


async def test_a_server_error_is_retryable_and_a_user_scope_error_names_the_scope(fake, oauth):
    fake.fail("POST", fake_oauth.USER_TOKEN_PATH, 20050)
    with pytest.raises(FeishuOAuthServerError) as failed:
        await oauth.refresh("ur-x")
    assert failed.value.retryable
    missing = error_for(99991679, "Unauthorized. scopes required: [task:task:read]", endpoint="x")
    assert missing.scopes == ("task:task:read",)


async def test_no_token_plaintext_in_logs(fake, oauth, caplog):
    caplog.set_level(logging.DEBUG)
    back, verifier = await consent(fake)
    tokens = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    fresh = await oauth.refresh(tokens.refresh_token)
    await oauth.user_open_id(fresh.access_token)
    with pytest.raises(FeishuAuthorizationGone):
        await oauth.refresh(tokens.refresh_token)
    shown = caplog.text + repr(tokens) + repr(fresh) + repr(oauth)
    for secret in (
        tokens.access_token,
        tokens.refresh_token,
        fresh.access_token,
        fresh.refresh_token,
        back["code"],
        verifier,
        fake.app_secret,
    ):
        assert secret not in shown


def test_a_private_deployments_accounts_host_is_derived():
    assert accounts_domain("https://open.example.cn") == "https://accounts.example.cn"


async def test_a_refresh_answer_without_a_new_refresh_token_keeps_the_old_one(fake, oauth):
    back, verifier = await consent(fake)
    first = await oauth.exchange_code(back["code"], redirect_uri=REDIRECT, code_verifier=verifier)
    fake.rotate_refresh_tokens = False
    second = await oauth.refresh(first.refresh_token, open_id=first.open_id)
    assert second.access_token != first.access_token
    assert second.refresh_token == first.refresh_token
    assert second.refresh_expires_at == second.expires_at  # unknown: assume the shorter
    assert (await oauth.refresh(second.refresh_token)).open_id == "ou_fake_alice"
