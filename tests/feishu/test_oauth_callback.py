"""The OAuth callback route's wire side: bounded input, a plain page, nothing to leak."""

from __future__ import annotations

import urllib.parse

from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu.oauth_callback import CallbackPage, CallbackQuery, oauth_callback_handler

from support.servers import serving

SEEN: list[CallbackQuery] = []


async def complete(query: CallbackQuery) -> CallbackPage:
    SEEN.append(query)
    if query.state == "boom":
        raise RuntimeError("a bug with a secret in it: u-secret")
    return CallbackPage(200, "<b>Done</b>", f"code {len(query.code)} & <script>")


def app() -> web.Application:
    application = web.Application()
    application.router.add_get("/cb", oauth_callback_handler(complete))
    return application


async def get(url: str, query: dict[str, str]):
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/cb?{urllib.parse.urlencode(query)}") as page,
    ):
        return page.status, page.headers, await page.text()


async def test_the_page_is_escaped_uncached_and_sends_no_referrer():
    async with serving(app()) as served:
        status, headers, text = await get(served.url, {"code": "c1", "state": "s1"})
    assert status == 200
    assert "&lt;b&gt;Done&lt;/b&gt;" in text and "<script>" not in text
    assert headers["Cache-Control"] == "no-store"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert SEEN[-1] == CallbackQuery(code="c1", state="s1", error="")


async def test_overlong_values_are_refused_before_anyone_reads_them():
    SEEN.clear()
    async with serving(app()) as served:
        for query in ({"code": "c" * 513}, {"state": "s" * 1025}, {"error": "e" * 101}):
            status, _, _ = await get(served.url, query)
            assert status == 400
    assert SEEN == []


async def test_a_failure_behind_it_is_a_plain_500_that_shows_nothing_of_it():
    async with serving(app()) as served:
        status, _, text = await get(served.url, {"code": "c", "state": "boom"})
    assert status == 500 and "u-secret" not in text and "Nothing was stored" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["code", "state", "error", "x"]), st.text(max_size=300)))
async def test_any_query_gets_a_page_never_a_crash(query):
    async with serving(app()) as served:
        status, headers, text = await get(served.url, query)
    assert status in (200, 400, 500)
    assert headers["Content-Type"].startswith("text/html") and text.startswith("<!doctype html>")
