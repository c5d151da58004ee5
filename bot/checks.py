"""``larkgate check``: is this deployment able to work? Each check says what to fix.

Validates the settings, fetches a tenant token and the bot's identity from Feishu,
asks the model for a one-word answer, and reports each connector's status. Missing
Feishu scopes are named when Feishu refuses a call for lack of one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bot.config import Settings, SettingsError
from bot.engine import LLMError, Message, OpenAICompatibleLLM
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError, FeishuScopeMissing
from connectors.base import ConnectorContext
from connectors.hub import ConnectorHub

TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


async def run_checks(settings: Settings) -> list[CheckResult]:
    results = []
    missing = settings.missing_for_serve()
    results.append(
        CheckResult(
            "settings",
            not missing,
            "complete" if not missing else "missing: " + ", ".join(missing),
        )
    )
    try:
        governance = settings.governance()
        results.append(
            CheckResult(
                "governance",
                True,
                f"{len(governance.admins)} admins, approvals by default for "
                f"{governance.rules.default} tools, expiring after "
                f"{governance.approval_ttl_seconds:.0f} s",
            )
        )
    except SettingsError as exc:
        results.append(CheckResult("governance", False, str(exc)))
    async with FeishuClient(settings.feishu(), timeout=TIMEOUT) as feishu:
        results += await _feishu(feishu, settings)
        results.append(await _llm(settings))
        hub = await ConnectorHub.build(
            settings.connectors(),
            ConnectorContext(feishu=feishu),
            feishu_credentials=bool(settings.feishu_app_id and settings.feishu_app_secret),
        )
        try:
            for status in await hub.check():
                detail = f"{status.detail} ({status.tools} tools)" if status.ok else status.detail
                results.append(CheckResult(f"connector {status.name}", status.ok, detail))
        finally:
            await hub.aclose()
    return results


async def _feishu(feishu: FeishuClient, settings: Settings) -> list[CheckResult]:
    if not (settings.feishu_app_id and settings.feishu_app_secret):
        return [CheckResult("feishu", False, "FEISHU_APP_ID and FEISHU_APP_SECRET are not set")]
    try:
        await asyncio.wait_for(feishu.tokens.get(), TIMEOUT)
    except (FeishuError, TimeoutError) as exc:
        return [CheckResult("feishu token", False, str(exc) or "timed out")]
    results = [CheckResult("feishu token", True, f"tenant token for {settings.feishu_app_id}")]
    try:
        info = await feishu.bot_info()
    except FeishuScopeMissing as exc:
        results.append(CheckResult("feishu bot", False, "missing scope: " + ", ".join(exc.scopes)))
    except FeishuError as exc:
        results.append(CheckResult("feishu bot", False, str(exc)))
    else:
        results.append(CheckResult("feishu bot", True, f"{info.app_name} ({info.open_id})"))
    return results


async def _llm(settings: Settings) -> CheckResult:
    config = settings.llm()
    if not (config.base_url and config.model):
        return CheckResult("llm", False, "LLM_BASE_URL and LLM_MODEL are not set")
    llm = OpenAICompatibleLLM(
        base_url=config.base_url,
        api_key=config.api_key,
        model=config.model,
        timeout=TIMEOUT,
        max_retries=1,
    )
    try:
        response = await llm.chat([Message.user("Reply with the single word: ok")], max_tokens=5)
    except LLMError as exc:
        return CheckResult("llm", False, str(exc))
    finally:
        await llm.aclose()
    return CheckResult("llm", True, f"{config.model} answered {response.content.strip()[:20]!r}")
