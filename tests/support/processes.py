"""``larkgate serve`` as a real process (``python -m bot.cli serve``) on the fakes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from support.servers import HOST
from support.waiting import wait_until

if TYPE_CHECKING:
    from fakes.feishu_server import FakeFeishu
    from fakes.openai_server import FakeOpenAIServer


def serve_env(
    feishu: FakeFeishu,
    llm: FakeOpenAIServer,
    *,
    verification_token: str,
    encrypt_key: str,
    **settings: str,
) -> dict[str, str]:
    """This process's environment with the bot's settings pointing at the fakes;
    ``settings`` (``NAME="value"``) add to them or override them."""
    return {
        **os.environ,
        "FEISHU_APP_ID": feishu.app_id,
        "FEISHU_APP_SECRET": feishu.app_secret,
        "FEISHU_VERIFICATION_TOKEN": verification_token,
        "FEISHU_ENCRYPT_KEY": encrypt_key,
        "FEISHU_DOMAIN": feishu.domain,
        "LLM_BASE_URL": llm.base_url,
        "LLM_API_KEY": "sk-not-secret",
        "LLM_MODEL": "fake-model",
        **settings,
    }


def start_serve(
    port: int, env: dict[str, str], log: Path, *, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """``larkgate serve`` on 127.0.0.1:``port``, its output appended to ``log``."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--host", HOST, "--port", str(port)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )


async def wait_healthy(
    url: str,
    *,
    within: float = 60.0,
    process: subprocess.Popen[bytes] | None = None,
    describe: Callable[[], str] = str,
) -> None:
    """Poll ``url``/healthz until it answers 200; fail at once if ``process`` exits.
    ``describe()`` is added to the failure (e.g. the end of the server's log)."""
    async with aiohttp.ClientSession() as session:

        async def healthy() -> bool:
            if process is not None and process.poll() is not None:
                raise AssertionError(f"server exited:\n{describe()}")
            try:
                async with session.get(url + "/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await wait_until(
            healthy, within, every=0.1, failure=lambda: f"{url} never became healthy:\n{describe()}"
        )


def stop_all(processes: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    """Stop ``processes`` (terminate, then kill after 15 s) and print the end of each log:
    on a failure pytest shows it, which says what each process was doing at the end."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
    for log in logs:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        print(f"--- {log.name} (last 40 lines)", *lines[-40:], sep="\n")
