"""Browser tests: Playwright drives Debian's Chromium, headless, against servers started
in-process. Skipped (with the reason) where Playwright or /usr/bin/chromium is missing:
``apt-get install chromium`` and ``pip install -e '.[browser]'`` to run them.

Nothing is downloaded: Playwright's Python package bundles its driver and the browser is
the system's (``playwright install`` is never needed). Screenshots always go to tmp_path;
with ``LARKGATE_UPDATE_SCREENSHOTS=1`` they are also written to docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
UPDATE_SCREENSHOTS_ENV = "LARKGATE_UPDATE_SCREENSHOTS"
VIEWPORT = {"width": 1200, "height": 800}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

Shoot = Callable[[Any, str], Coroutine[Any, Any, Path]]


def _missing() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[browser]')"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


@pytest.fixture
async def browser_page(tmp_path) -> AsyncIterator[Any]:
    """A fresh page of a headless Chromium with an empty profile, 1200x800."""
    reason = _missing()
    if reason:
        pytest.skip(f"browser tests need Playwright and Chromium: {reason}")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            await context.close()


@pytest.fixture
def shoot(tmp_path) -> Shoot:
    """``await shoot(page, "console-signin")``: a PNG of the viewport into tmp_path (and into
    docs/screenshots/ when LARKGATE_UPDATE_SCREENSHOTS=1)."""

    async def take(page: Any, name: str) -> Path:
        path = tmp_path / "screenshots" / f"{name}.png"
        path.parent.mkdir(exist_ok=True)
        await page.screenshot(path=str(path), animations="disabled", caret="hide")
        assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 2_000
        if os.environ.get(UPDATE_SCREENSHOTS_ENV) == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, SCREENSHOTS / path.name)
        return path

    return take
