"""Hostile bodies on the console's POST routes, with the console token, through the real
app (property-based, as the webhook's in ``test_hostile_bodies.py``).

The token holder is trusted to act, not to send well-formed JSON: a script, a proxy or a
pasted body may send anything. Whatever arrives on whichever POST route (random bytes,
100,000-deep nesting, a repeated key, ``1e999``, a lone surrogate, a body over the bound),
the console answers 4xx, never 5xx, logs at most one short line and no traceback, and
acts on nothing: no mode switched, no approval decided, no grant revoked, nothing audited.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bot.console.bodies import MAX_BODY_BYTES
from bot.feishu.untrusted_json import UntrustedJson, load_object
from bot.oauth_tokens import UserTokens
from bot.store import AuditLog

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_hostile_bodies import Tracebacks, deep
from support.user_auth import PUBLIC_URL, TOKEN_KEY

TOKEN = "console-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = "ou_admin"
ALICE = "ou_alice"
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The POST routes there must be at least (every POST route of the app is tried).
KNOWN_POSTS = {
    "/api/readonly",
    "/api/approvals/{approval_id}/{decision}",
    "/api/schedules/{task_id}/cancel",
    "/api/authorizations/{open_id}/revoke",
}


@pytest.fixture
async def console(tmp_path, feishu, llm_server) -> AsyncIterator[tuple[Bot, Tracebacks]]:
    """A bot with every console route on, and a grant of Alice's for revoke to aim at."""
    settings_ = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_console_token=TOKEN,
        larkgate_admins=ADMIN,
        larkgate_token_key=TOKEN_KEY,
        larkgate_public_url=PUBLIC_URL,
    )
    handler = Tracebacks()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        async with running_bot(settings_, feishu, llm_server) as bot:
            now = time.time()
            grant = UserTokens(ALICE, "u-a", "ur-a", now + 7200, now + 86400, "contact:x")
            await bot.services.user_auth.tokens.save(ALICE, grant)
            yield bot, handler
    finally:
        root.removeHandler(handler)


def post_routes(bot: Bot) -> list[str]:
    """Every console POST route, its parameters filled with targets that do not exist."""
    canonicals = {
        route.resource.canonical
        for route in bot.app.router.routes()
        if route.method == "POST"
        and route.resource is not None
        and route.resource.canonical.startswith("/api/")
    }
    assert canonicals >= KNOWN_POSTS
    return sorted(canonical.format_map(_Absent()) for canonical in canonicals)


class _Absent(dict[str, str]):
    """Route parameters: a target that does not exist (and a decision that does)."""

    def __missing__(self, key: str) -> str:
        return "approve" if key == "decision" else "nope"


async def state(bot: Bot) -> tuple[Any, ...]:
    """Everything a console POST could change."""
    services = bot.services
    mode = await services.governance.org.read_only()
    audit = await AuditLog(services.database).recent(limit=1000)
    pending = await services.governance.approvals.pending(limit=100)
    grants = await services.user_auth.tokens.grants()
    return (
        mode.on,
        mode.version,
        len(audit),
        [a.id for a in pending],
        [(g.open_id, g.updated_at) for g in grants],
        len(bot.feishu.sent),
    )


async def post(bot: Bot, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with bot.session.post(bot.url + path, data=body, headers=headers) as response:
        return response.status, await response.text()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=30,
)

CRAFTED = [
    b'{"on": false, "on": true}',  # two readers could disagree: refused, not guessed
    b'{"on": true, "on": true}',
    b'{"on": 1e999}',
    b'{"on": NaN}',
    b'{"on": "\\ud800"}',
    b'{"on": true}{"on": true}',
    b'\xef\xbb\xbf{"on": true}',
    b'{"on": ' + b"9" * 5_000 + b"}",
    b'[{"on": true}]',
    b'"{\\"on\\": true}"',
    b'{"on": "true"}',
    b'{"on": 1}',
    b'{"on": true, "x": "' + b"[" * 1_000 + b'"}',  # brackets inside a string: just text
]


@st.composite
def hostile_bodies(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    # Bodies over the bound: test_a_body_over_the_bound_is_a_413_however_it_is_framed.
    kind = draw(st.sampled_from(["bytes", "json", "on", "deep", "crafted"]))
    if kind == "bytes":
        body = draw(st.binary(max_size=2_000))
    elif kind == "json":
        body = json.dumps(draw(json_values)).encode()
    elif kind == "on":
        body = json.dumps({"on": draw(json_values)}).encode()
    elif kind == "deep":
        levels = draw(st.sampled_from([33, 1_000, 100_000]))
        inner = deep(levels, draw(st.sampled_from(["array", "object"])))
        body = b'{"on": ' + inner + b"}" if draw(st.booleans()) else inner
    else:
        body = draw(st.sampled_from(CRAFTED))
    content_type = draw(st.sampled_from(["application/json", "text/plain", None]))
    headers = AUTH | ({"Content-Type": content_type} if content_type else {})
    return body, headers


def acts(body: bytes) -> bool:
    """Whether the console accepts ``body`` as ``{"on": true|false}``: the one body that
    switches the mode (on the other routes it is ignored, and their targets do not exist)."""
    try:
        value = load_object(body, max_bytes=MAX_BODY_BYTES)
    except UntrustedJson:
        return False
    return isinstance(value.get("on"), bool)


@HOSTILE
@given(data=st.data(), request=hostile_bodies())
async def test_any_body_on_any_console_post_changes_nothing_and_never_breaks_it(
    console, data, request
):
    bot, tracebacks = console
    body, headers = request
    route = data.draw(st.sampled_from(post_routes(bot)))
    assume(not (route == "/api/readonly" and acts(body)))
    before = await state(bot)
    status, answer = await post(bot, route, body, headers)
    assert 400 <= status < 500, (route, status, body[:200])
    assert await state(bot) == before
    assert tracebacks.seen == []
    assert len(answer) < 500  # a short reason, never an echo of the body


async def test_a_hundred_thousand_levels_deep_is_a_400_and_one_short_line(console, caplog):
    """The reported case: this answered 500 and logged a RecursionError."""
    bot, tracebacks = console
    caplog.set_level(logging.WARNING)
    headers = AUTH | {"Content-Type": "application/json"}
    for body in (deep(100_000, "array"), b'{"on": ' + deep(100_000, "array") + b"}"):
        caplog.clear()
        status, answer = await post(bot, "/api/readonly", body, headers)
        assert status == 400 and "nested deeper" in json.loads(answer)["error"]
        (line,) = [r.getMessage() for r in caplog.records]
        assert "nested deeper" in line and len(line) < 300
    assert tracebacks.seen == []
    assert not (await bot.services.governance.org.read_only()).on


async def test_a_hostile_body_refuses_the_action_of_a_route_that_needs_no_body(console):
    """Revoking Alice takes no body, but one that is sent must be sound, or nothing is done."""
    bot, tracebacks = console
    path = f"/api/authorizations/{ALICE}/revoke"
    before = await state(bot)
    status, _ = await post(bot, path, deep(100_000, "array"), AUTH)
    assert status == 400 and await state(bot) == before
    status, _ = await post(bot, path, b"", AUTH)
    assert status == 200 and await bot.services.user_auth.tokens.get(ALICE) is None
    assert tracebacks.seen == []


async def test_a_body_over_the_bound_is_a_413_however_it_is_framed(console):
    bot, tracebacks = console
    before = await state(bot)
    over = b'{"on": true, "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        yield over[: len(over) // 2]
        yield over[len(over) // 2 :]

    status, _ = await post(bot, "/api/readonly", over, AUTH)  # a Content-Length over it
    assert status == 413
    async with bot.session.post(bot.url + "/api/readonly", data=chunks(), headers=AUTH) as r:
        assert r.status == 413  # chunked: cut off while reading
    bomb = gzip.compress(over)  # a few hundred bytes that inflate past the bound
    status, _ = await post(bot, "/api/readonly", bomb, AUTH | {"Content-Encoding": "gzip"})
    assert status == 413
    assert await state(bot) == before
    assert tracebacks.seen == []


async def test_a_sound_body_still_switches_the_mode(console):
    bot, _ = console
    status, answer = await post(bot, "/api/readonly", b'{"on": true}', AUTH)
    assert status == 200 and json.loads(answer)["on"] is True
    status, _ = await post(bot, "/api/readonly", b"", AUTH)
    assert status == 400  # the mode's route needs its body
