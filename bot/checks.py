"""``larkgate check``: is this deployment able to work? Each check says what to fix.

Validates the settings (webhook mode without an Encrypt Key fails, or warns when
LARKGATE_ALLOW_UNSIGNED_EVENTS allows it), fetches a tenant token and the bot's identity
from Feishu, checks the app's permission scopes feature by feature, asks the model for a
one-word answer, and reports each connector's status.

Scopes. Feishu has no dry run, but its gateway checks an app's scopes before the call
reaches the service behind it: a call the app lacks a scope for is refused with 99991672
and a message that names the scopes (any one of them would do), whatever its arguments.
So each feature gets one probe, a call that needs that feature's scope and changes
nothing:

========  ==========================================================================
messages  reply (what the bot does) to a placeholder message id that cannot exist
CardKit   card settings on a placeholder card id (CardKit has no read call to use)
contact   the first member of the root department ``"0"`` (what the name search reads)
calendar  the bot's primary calendar (what every calendar tool looks up first)
task      the first task the app created (``task.v1.task.list``, page size 1)
bitable   a record search in a placeholder Base (no Base is configured to read)
docx      the text of a placeholder document
========  ==========================================================================

Feishu's "not found" answer to a placeholder means the scope check was passed, so
nothing is sent, created or changed. A probe shows the scope of the call it makes: a
read-only scope that is enough for the probe may still be short for a tool that writes.
Receiving messages needs event scopes that no call can probe; they are looked up in the
app's scope list (``application.v6.scope.list``), which needs a scope of its own
(``application:application:self_manage``), so without it that line only reminds.

The model. Each model (``llm``, and ``llm <hint>`` for ``[models]``) is asked for a
one-word answer and probed as ``larkgate serve`` probes it at start-up
(``bot.engine.probe``): the line says what the endpoint showed (tool calls, JSON mode,
its context length when it says it) and what the agent uses. An endpoint that ignores
or refuses ``tools`` is a WARN with what to change, unless ``LLM_TOOL_CALLS=json`` says
that the JSON mode is meant; so is ``LLM_TOOL_CALLS=native`` against such an endpoint.

Levels: ``FAIL`` makes ``larkgate check`` exit 1; ``WARN`` is worth a look and does not.
Messages and CardKit are required. The other features fail only when the Feishu
workspace connector is on (its tools would fail); otherwise they are informational.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import lark_oapi as lark
from lark_oapi.api.application.v6 import ListScopeRequest
from lark_oapi.api.bitable.v1 import SearchAppTableRecordRequest, SearchAppTableRecordRequestBody
from lark_oapi.api.calendar.v4 import PrimaryCalendarRequest
from lark_oapi.api.cardkit.v1 import SettingsCardRequest, SettingsCardRequestBody
from lark_oapi.api.contact.v3 import FindByDepartmentUserRequest
from lark_oapi.api.docx.v1 import RawContentDocumentRequest
from lark_oapi.api.im.v1 import ReplyMessageRequest, ReplyMessageRequestBody
from lark_oapi.api.task.v1 import ListTaskRequest

from bot.config import LLMConfig, Settings, SettingsError
from bot.engine import LLMError, Message, OpenAICompatibleLLM
from bot.engine.probe import EndpointReport, probe_endpoint
from bot.engine.probed_llm import choice_reason, fitted_budget
from bot.feishu.client import FeishuClient
from bot.feishu.errors import (
    FeishuError,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuTokenInvalid,
    FeishuTransportError,
)
from bot.governance.questions import TOOL_NAME as QUESTION_TOOL
from bot.governance.user_auth.config import OFF_DETAIL
from bot.network import Network, model_http_client
from bot.reachability import describe as describe_network
from bot.reachability import outbound_hosts, reach_all, route
from bot.runtime.api_budget import ApiUsage
from bot.runtime.schedules.tools import TOOL_NAMES as SCHEDULE_TOOL_NAMES
from bot.store import ApiCallLedger, Database, current_revision, head_revision
from bot.timezones import time_zone
from connectors.base import ConnectorContext
from connectors.hub import ConnectorHub

TIMEOUT = 20.0
WORKSPACE_CONNECTOR = "feishu"

SCOPE_HINT = "add it in the developer console → Permissions & Scopes, then publish a new version"
# Refusals for lack of a permission other than 99991672 (which carries the scope names):
# 99991679 a user scope, 230027 an IM permission such as sending as a user.
_PERMISSION_CODES = frozenset({99991679, 230027})
# Feishu's 99991672 message ends with the console page that grants the scopes.
_AUTH_LINK = re.compile(r"https?://[^\s\"'，。]+/auth\?[^\s\"'，。]+")

# Ids no real object has: Feishu refuses them after the scope check, so nothing happens.
PLACEHOLDER_MESSAGE = "om_larkgate_scope_probe"
PLACEHOLDER_CARD = "0"
PLACEHOLDER_BASE = "bascnLarkgateScopeProbe"
PLACEHOLDER_TABLE = "tblLarkgateScopeProbe"
PLACEHOLDER_DOCUMENT = "doxcnLarkgateScopeProbe"

# Receiving messages (event subscriptions): any one scope of each group will do.
EVENT_SCOPES: dict[str, tuple[str, ...]] = {
    "direct messages": ("im:message.p2p_msg:readonly", "im:message.p2p_msg"),
    "group @mentions": (
        "im:message.group_at_msg:readonly",
        "im:message.group_at_msg",
        "im:message.group_msg",
    ),
}


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool  # False fails the check (FAIL, exit 1)
    detail: str
    warn: bool = False  # ok, but worth a look: printed WARN, the exit code stays 0

    @property
    def level(self) -> str:
        """``"ok"``, ``"WARN"`` or ``"FAIL"``, as ``larkgate check`` prints it."""
        if not self.ok:
            return "FAIL"
        return "WARN" if self.warn else "ok"


@dataclass(frozen=True, slots=True)
class Probe:
    feature: str
    required: bool  # the bot needs it; otherwise only the workspace connector's tools do
    endpoint: str  # the name it is counted and logged under
    build: Callable[[], lark.BaseRequest]


def _reply_probe() -> lark.BaseRequest:
    body = ReplyMessageRequestBody.builder().msg_type("text")
    body.content(json.dumps({"text": "larkgate check"}))
    return (
        ReplyMessageRequest.builder()
        .message_id(PLACEHOLDER_MESSAGE)
        .request_body(body.build())
        .build()
    )


def _card_probe() -> lark.BaseRequest:
    body = SettingsCardRequestBody.builder().settings('{"config":{}}').sequence(1).build()
    return SettingsCardRequest.builder().card_id(PLACEHOLDER_CARD).request_body(body).build()


def _base_probe() -> lark.BaseRequest:
    return (
        SearchAppTableRecordRequest.builder()
        .app_token(PLACEHOLDER_BASE)
        .table_id(PLACEHOLDER_TABLE)
        .page_size(1)
        .request_body(SearchAppTableRecordRequestBody.builder().build())
        .build()
    )


PROBES: tuple[Probe, ...] = (
    Probe("messages", True, "im.message.reply", _reply_probe),
    Probe("cardkit", True, "cardkit.card.settings", _card_probe),
    Probe(
        "contact",
        False,
        "contact.user.find_by_department",
        lambda: FindByDepartmentUserRequest.builder().department_id("0").page_size(1).build(),
    ),
    Probe(
        "calendar",
        False,
        "calendar.calendar.primary",
        lambda: PrimaryCalendarRequest.builder().build(),
    ),
    Probe(
        "task", False, "task.v1.task.list", lambda: ListTaskRequest.builder().page_size(1).build()
    ),
    Probe("bitable", False, "bitable.app_table_record.search", _base_probe),
    Probe(
        "docx",
        False,
        "docx.document.raw_content",
        lambda: RawContentDocumentRequest.builder().document_id(PLACEHOLDER_DOCUMENT).build(),
    ),
)


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
    results.append(_event_signing(settings))
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
    results.append(_session_grants(settings))
    results.append(_user_auth(settings))
    results.append(await _api_budget(settings))
    try:
        network = settings.network()
    except SettingsError as exc:
        results.append(CheckResult("network", False, str(exc)))
        return results
    results += await _network(settings, network)
    async with FeishuClient(settings.feishu(), timeout=TIMEOUT, network=network) as feishu:
        hub = await ConnectorHub.build(
            settings.connectors(),
            ConnectorContext(feishu=feishu, network=network),
            feishu_credentials=bool(settings.feishu_app_id and settings.feishu_app_secret),
        )
        try:
            workspace = any(c.name == WORKSPACE_CONNECTOR for c in hub.connectors)
            results += await _feishu(feishu, settings, workspace_tools=workspace)
            results.append(await _llm(settings, network))
            results += await _hint_models(settings, network)
            for status in await hub.check():
                detail = f"{status.detail} ({status.tools} tools)" if status.ok else status.detail
                results.append(CheckResult(f"connector {status.name}", status.ok, detail))
            tool_names = [*hub.registry.names(), *SCHEDULE_TOOL_NAMES, QUESTION_TOOL]
            results += _profiles(settings, tool_names)
        finally:
            await hub.aclose()
    results += await _apps(settings, network)
    return results


async def _apps(settings: Settings, network: Network) -> list[CheckResult]:
    """Each [apps.NAME]: its secrets found, its pushes signed, its credentials accepted,
    the bot it is, and where its events come in."""
    try:
        apps = settings.apps()
    except SettingsError as exc:
        return [CheckResult("apps", False, str(exc))]
    results = []
    for spec in apps:
        name = f"app {spec.name}"
        app_settings = settings.for_app(spec)
        signing = _event_signing(app_settings)
        if not signing.ok:
            results.append(CheckResult(name, False, signing.detail))
            continue
        where = "long connection" if spec.event_mode == "ws" else spec.events_path
        async with FeishuClient(app_settings.feishu(), timeout=TIMEOUT, network=network) as feishu:
            try:
                await asyncio.wait_for(feishu.tokens.get(), TIMEOUT)
                info = await feishu.bot_info()
            except (FeishuError, TimeoutError) as exc:
                results.append(CheckResult(name, False, f"{spec.app_id}: {exc or 'timed out'}"))
                continue
        profile = f", profile {spec.profile}" if spec.profile else ""
        detail = f"{spec.app_id}: {info.app_name} ({info.open_id}), events on {where}{profile}"
        results.append(CheckResult(name, True, detail, warn=signing.warn))
    return results


def _profiles(settings: Settings, tool_names: list[str]) -> list[CheckResult]:
    """Each agent profile: what it offers, on which model, approved by whom, used where; a
    tool entry that matches no tool (a typo, a connector that is off) fails."""
    try:
        profiles = settings.profiles()
        hints = set(settings.agent().models)
    except SettingsError as exc:
        return [CheckResult("profiles", False, str(exc))]
    results = []
    for name, profile in sorted(profiles.profiles.items()):
        routes = [where for where, used in profiles.routes() if used == name]
        offered = [t for t in tool_names if profile.allows(t, "read")] if profile.tools else []
        parts = [
            f"tools: {', '.join(offered) or 'none'}" if profile.tools is not None else "all tools",
            "read-only" if profile.read_only else "",
            f"model {profile.model}" + ("" if profile.model in hints else " (on LLM_BASE_URL)")
            if profile.model
            else "",
            f"mode {profile.mode}" if profile.mode else "",
            f"approvers {', '.join(profile.approvers)}" if profile.approvers else "",
            ", ".join(f"{k} {v}" for k, v in profile.budgets.items()),
            f"used in {', '.join(routes)}"
            if routes
            else "used nowhere (no [groups] or [dm] route)",
        ]
        detail = "; ".join(part for part in parts if part)
        unmatched = profile.unmatched(tool_names)
        if unmatched:
            results.append(
                CheckResult(
                    f"profile {name}",
                    False,
                    f"tools {', '.join(repr(u) for u in unmatched)} match no tool of this "
                    f"deployment (a typo, or a connector that is off); {detail}",
                )
            )
        else:
            results.append(CheckResult(f"profile {name}", True, detail, warn=not routes))
    return results


async def _network(settings: Settings, network: Network) -> list[CheckResult]:
    """The proxies and trust in effect, then each host the deployment calls: the proxy
    it goes through and whether it answers (``bot.reachability``)."""
    results = [CheckResult("network", True, describe_network(network, os.environ))]
    models = [("model", settings.llm().base_url)]
    try:
        vision = settings.vision_llm()
        hinted = settings.hint_models()
    except SettingsError:
        vision, hinted = None, {}  # said by the agent-mode line
    if vision is not None:
        models.append(("vision model", vision.base_url))
    models += [(f"model {hint}", config.base_url) for hint, config in hinted.items()]
    hosts = outbound_hosts(
        feishu_domain=settings.feishu_domain,
        event_mode=settings.feishu_event_mode,
        user_auth=bool(settings.larkgate_token_key.get_secret_value()),
        models=models,
        mcp_urls=_mcp_urls(settings),
    )
    for host, reached in zip(hosts, await reach_all(network, hosts), strict=True):
        detail = f"{host.origin} {route(network, host.origin)}: {reached.detail}"
        ok = reached.ok or not host.required
        results.append(CheckResult(f"reach {host.purpose}", ok, detail, warn=not reached.ok))
    return results


def _mcp_urls(settings: Settings) -> list[tuple[str, str]]:
    try:
        section = settings.connectors().sections.get("mcp") or {}
    except SettingsError:
        return []
    servers = section.get("servers") or []
    return [
        (f"MCP {server.get('name') or 'server'}", str(server["url"]))
        for server in servers
        if isinstance(server, Mapping) and isinstance(server.get("url"), str)
    ]


async def _api_budget(settings: Settings) -> CheckResult:
    """This month's Feishu API calls (every process's, from the ledger) and the budget step."""
    name = "feishu api calls"
    try:
        migrated = await asyncio.to_thread(current_revision, settings.database_url)
        if migrated != head_revision():  # larkgate serve migrates it at start
            return CheckResult(name, True, "none counted yet (the database is not set up yet)")
        async with Database(settings.database_url) as database:
            usage = ApiUsage(
                ApiCallLedger(database),
                app_id=settings.feishu_app_id,
                budget=settings.feishu_monthly_api_budget,
                zone=time_zone(settings.larkgate_timezone),
            )
            await usage.refresh()
    except Exception as exc:
        return CheckResult(name, False, f"the ledger cannot be read: {exc}"[:300])
    delivery = usage.delivery()
    return CheckResult(name, True, usage.summary(), warn=delivery.economy)


SHARED_SCOPES = ("chat", "topic")  # conversations every member of a group (or topic) shares


def _session_grants(settings: Settings) -> CheckResult:
    """The "approve for this person here" button where group members share a conversation."""
    name = "session grants"
    try:
        rules = settings.governance().rules
        policy = settings.policy()
    except SettingsError as exc:
        return CheckResult(name, False, str(exc))
    if not rules.session_grants:
        return CheckResult(name, True, "off: every call that needs approval asks")
    shared = [f"default scope {policy.scope}"] if policy.scope in SHARED_SCOPES else []
    shared += [
        f"group {chat_id} (scope {rule.scope})"
        for chat_id, rule in sorted(policy.groups.items())
        if rule.scope in SHARED_SCOPES
    ]
    if not shared:
        return CheckResult(name, True, "on; group conversations are per sender")
    return CheckResult(
        name,
        True,
        "on in group conversations everyone shares ("
        + ", ".join(shared)
        + "): a grant covers only the people its card named and the tool (a call runs "
        "unasked only when every asker holds one), but lets them run the tool with any "
        "arguments until /reset; set [approvals] session_grants = false in "
        "larkgate.toml to make every call ask",
        warn=True,
    )


def _user_auth(settings: Settings) -> CheckResult:
    """Per-user authorisation: off, or on with which flow and what Feishu must know."""
    name = "user authorisation"
    try:
        config = settings.user_auth()
    except SettingsError as exc:
        return CheckResult(name, False, str(exc))
    if config is None:
        return CheckResult(name, True, OFF_DETAIL)
    return CheckResult(name, True, config.describe())


def _event_signing(settings: Settings) -> CheckResult:
    """How pushes are authenticated: what ``larkgate serve`` refuses, or warns about."""
    name = "event signing"
    try:
        unsigned = settings.unsigned_events_warning()
    except SettingsError as exc:
        return CheckResult(name, False, str(exc))
    if unsigned is not None:
        return CheckResult(name, True, unsigned, warn=True)
    if settings.feishu_event_mode == "ws":
        return CheckResult(name, True, "not needed: events arrive over the long connection")
    return CheckResult(name, True, "pushes are encrypted and signed (FEISHU_ENCRYPT_KEY)")


async def _feishu(
    feishu: FeishuClient, settings: Settings, *, workspace_tools: bool
) -> list[CheckResult]:
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
        results.append(CheckResult("feishu bot", False, missing_scope_text(exc)))
    except FeishuError as exc:
        results.append(CheckResult("feishu bot", False, str(exc)))
    else:
        results.append(CheckResult("feishu bot", True, f"{info.app_name} ({info.open_id})"))
    for probe in PROBES:
        results.append(await _probe(feishu, probe, workspace_tools=workspace_tools))
    results.append(await _event_scopes(feishu))
    return results


async def _probe(feishu: FeishuClient, probe: Probe, *, workspace_tools: bool) -> CheckResult:
    """One feature's scope: ok when Feishu let the probe past its scope check."""
    name = f"scopes {probe.feature}"
    matters = probe.required or workspace_tools
    if probe.required:
        why = ""
    elif workspace_tools:
        why = f" (the {WORKSPACE_CONNECTOR} connector's {probe.feature} tools need it)"
    else:
        why = f" (only the {WORKSPACE_CONNECTOR} connector's tools need it, and it is off)"
    try:
        await asyncio.wait_for(feishu.call(probe.endpoint, probe.build()), TIMEOUT)
    except FeishuScopeMissing as exc:
        return CheckResult(name, not matters, missing_scope_text(exc, why), warn=True)
    except (FeishuTransportError, FeishuRateLimited, FeishuTokenInvalid, TimeoutError) as exc:
        detail = f"not verified: {probe.endpoint}: {str(exc) or 'timed out'}"
        return CheckResult(name, True, detail, warn=True)
    except FeishuError as exc:
        if exc.code in _PERMISSION_CODES:
            detail = f"permission refused{why}: {exc}; {SCOPE_HINT}"
            return CheckResult(name, not matters, detail, warn=True)
        # A refusal about the placeholder itself: the call got past the scope check.
        return CheckResult(name, True, f"granted ({probe.endpoint} passed the scope check)")
    return CheckResult(name, True, f"granted ({probe.endpoint} answered)")


async def _event_scopes(feishu: FeishuClient) -> CheckResult:
    """Receiving messages: look for the event scopes in the app's scope list."""
    name = "scopes events"
    wanted = "; ".join(f"{what}: {alts[0]}" for what, alts in EVENT_SCOPES.items())
    try:
        body = await asyncio.wait_for(
            feishu.call("application.scope.list", ListScopeRequest.builder().build()), TIMEOUT
        )
    except (FeishuError, TimeoutError) as exc:
        reason = missing_scope_text(exc) if isinstance(exc, FeishuScopeMissing) else str(exc)
        detail = (
            f"not verified (listing the app's scopes failed: {reason or 'timed out'}); "
            f"receiving messages needs, in the console: {wanted}"
        )
        return CheckResult(name, True, detail, warn=True)
    granted = _granted(body)
    lacking = [
        f"{what}: {alts[0]}"
        for what, alts in EVENT_SCOPES.items()
        if not granted.intersection(alts)
    ]
    if lacking:
        detail = (
            f"not among the app's granted scopes, so those messages never arrive: "
            f"{'; '.join(lacking)}; {SCOPE_HINT}"
        )
        return CheckResult(name, True, detail, warn=True)
    return CheckResult(name, True, "granted (" + ", ".join(EVENT_SCOPES) + ")")


def _granted(body: dict[str, Any]) -> set[str]:
    data = body.get("data")
    scopes = data.get("scopes") if isinstance(data, dict) else None
    return {
        s["scope_name"]
        for s in scopes or []
        if isinstance(s, dict)
        and isinstance(s.get("scope_name"), str)
        and s.get("grant_status") == 1
        and s.get("scope_type", "tenant") == "tenant"
    }


def missing_scope_text(exc: FeishuScopeMissing, why: str = "") -> str:
    """``missing scope: a`` (or ``any one of a, b``), what to do, and Feishu's grant link."""
    if not exc.scopes:
        names = f"Feishu did not name it ({exc.msg[:200]})"
    elif len(exc.scopes) == 1:
        names = exc.scopes[0]
    else:
        names = "any one of " + ", ".join(exc.scopes)
    link = _AUTH_LINK.search(exc.msg)
    grant = f": {link.group(0)}" if link else ""
    return f"missing scope: {names}{why}; {SCOPE_HINT}{grant}"


async def _llm(settings: Settings, network: Network) -> CheckResult:
    config = settings.llm()
    if not (config.base_url and config.model):
        return CheckResult("llm", False, "LLM_BASE_URL and LLM_MODEL are not set")
    return await _model_answers("llm", config, network)


async def _hint_models(settings: Settings, network: Network) -> list[CheckResult]:
    """The agent mode, and each model configured for a hint ([models] in larkgate.toml)."""
    name = "agent mode"
    try:
        agent = settings.agent()
        hinted = settings.hint_models()
    except SettingsError as exc:
        return [CheckResult(name, False, str(exc))]
    plan = agent.plan
    hints = ", ".join(f"{hint} = {endpoint.model}" for hint, endpoint in agent.models.items())
    summary = (
        f"LARKGATE_MODE={agent.mode} (/plan forces a plan); plans of up to {plan.max_steps} "
        f"steps, {plan.max_concurrency} at once; "
        + (f"models by hint: {hints}" if hints else "every hint uses LLM_MODEL")
    )
    results = [CheckResult(name, True, summary)]
    for hint, config in hinted.items():
        results.append(await _model_answers(f"llm {hint}", config, network))
    return results


async def _model_answers(name: str, config: LLMConfig, network: Network) -> CheckResult:
    llm = OpenAICompatibleLLM(
        base_url=config.base_url,
        api_key=config.api_key,
        model=config.model,
        timeout=TIMEOUT,
        max_retries=1,
        http_client=model_http_client(network),
    )
    try:
        response = await llm.chat([Message.user("Reply with the single word: ok")], max_tokens=5)
    except LLMError as exc:
        return CheckResult(name, False, str(exc))
    finally:
        await llm.aclose()
    report = await probe_endpoint(
        config.base_url,
        config.api_key,
        config.model,
        request_timeout=TIMEOUT,
        http_client=model_http_client(network),
    )
    answered = f"{config.model} answered {response.content.strip()[:20]!r}"
    return _probed(name, config, answered, report)


# What to change on the server for native tool calls, by what the probe found.
_NATIVE_TOOLS_HINT = {
    "ignored": "for native tool calls, serve a model whose chat template has tools (llama.cpp: "
    "llama-server --jinja)",
    "refused": "for native tool calls, serve a model with tool support (Ollama lists them "
    "under tools; llama.cpp: llama-server --jinja)",
    "forced": "for native tool calls, let the server choose tools itself (vLLM: "
    "--enable-auto-tool-choice --tool-call-parser <the model's parser>; others: a chat "
    "format or template with tool calls)",
}


def _probed(name: str, config: LLMConfig, answered: str, report: EndpointReport) -> CheckResult:
    """The model's line: what its endpoint showed, what the agent uses, and what to fix."""
    setting = config.tool_calls
    uses = f"the agent uses {choice_reason(report, setting)} (LLM_TOOL_CALLS={setting})"
    parts = [answered, f"found: {report.describe()}", uses]
    budget = fitted_budget(config.context_budget, report.context_length)
    if budget < config.context_budget:
        parts.append(
            f"it keeps its context to {budget:,} tokens, as the server holds "
            f"{report.context_length:,} (LLM_CONTEXT_BUDGET={config.context_budget})"
        )
    found = report.tool_calls
    warn = False
    if found == "unknown":
        warn = True
        parts.append("the probe could not tell whether the endpoint calls tools")
    elif found in _NATIVE_TOOLS_HINT and setting == "auto":
        warn = True
        parts.append(_NATIVE_TOOLS_HINT[found] + "; or set LLM_TOOL_CALLS=json to keep this")
    elif found in _NATIVE_TOOLS_HINT and setting == "native":
        warn = True
        parts.append(
            f"LLM_TOOL_CALLS=native although the endpoint's tool calls are {found}: the "
            "agent may never call a tool; " + _NATIVE_TOOLS_HINT[found] + ", or use auto"
        )
    return CheckResult(name, True, "; ".join(parts), warn=warn)
