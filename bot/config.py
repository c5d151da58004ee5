"""Settings: read once, at the composition root, from the environment and a ``.env`` file.

Names are the stable interface of DESIGN §4. Everything below the composition root
receives the typed slices (``FeishuConfig``, ``LLMConfig``, ...), never this object's
environment. Optional per-group rules come from ``larkgate.toml`` (``LARKGATE_CONFIG``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.agent_config import AgentConfig, AgentConfigError, RunMode, load_agent_config
from bot.apps import AppError, AppSpec, load_apps
from bot.feishu.config import FeishuConfig
from bot.governance.config import (
    APPROVAL_MODES,
    ApprovalMode,
    ApprovalRules,
    ApproverRule,
    BudgetConfig,
    GovernanceConfig,
)
from bot.governance.seal import derive_button_key
from bot.governance.user_auth.config import UserAuthConfig
from bot.memory.recall import MemoryConfig
from bot.network import Network, NetworkSettingError
from bot.profiles import ProfileError, Profiles, load_profiles
from bot.timezones import check_time_zone
from connectors.config import ConnectorsConfig, merge_environment

GroupScope = Literal["chat", "chat_sender", "topic", "topic_sender"]
GROUP_SCOPES: tuple[GroupScope, ...] = ("chat", "chat_sender", "topic", "topic_sender")


_T = TypeVar("_T")


class SettingsError(Exception):
    """The settings are missing or invalid; the message says which and how to fix it."""


_SET_A_KEY = (
    "in the Feishu developer console, open the app's Events & Callbacks → Encryption "
    "Strategy, set an Encrypt Key, and give larkgate the same value as FEISHU_ENCRYPT_KEY"
)
UNSIGNED_EVENTS_REFUSED = (
    "FEISHU_ENCRYPT_KEY is not set, so Feishu would push events and card callbacks "
    "unsigned: anyone who learns the verification token could forge them, and nothing "
    f"dates them against replay. To fix it, {_SET_A_KEY}. (FEISHU_EVENT_MODE=ws needs no "
    "key; LARKGATE_ALLOW_UNSIGNED_EVENTS=true accepts unsigned pushes anyway.)"
)
UNSIGNED_EVENTS_WARNING = (
    "unsigned events accepted (LARKGATE_ALLOW_UNSIGNED_EVENTS=true, no FEISHU_ENCRYPT_KEY): "
    "only the verification token and header.create_time vouch for a push; "
    f"{_SET_A_KEY}"
)


class Settings(BaseSettings):
    """Every setting larkgate reads, by its environment name."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    feishu_app_id: str = ""
    feishu_app_secret: SecretStr = SecretStr("")
    feishu_verification_token: SecretStr = SecretStr("")
    feishu_encrypt_key: SecretStr = SecretStr("")
    feishu_domain: str = "https://open.feishu.cn"
    feishu_event_mode: Literal["webhook", "ws"] = "webhook"
    # Feishu API calls a month this app may make (0: no budget). Near it, answers cost
    # fewer calls in steps (fewer live updates, finished cards, plain text); never none.
    feishu_monthly_api_budget: int = Field(default=0, ge=0)

    llm_base_url: str = ""
    llm_api_key: SecretStr = SecretStr("")
    llm_model: str = ""
    llm_context_budget: int = Field(default=96_000, ge=1_000)
    # Seconds one model call may take (each retry gets as long): a small model on a CPU
    # can need minutes for a prompt with a tool catalogue.
    llm_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # How the agent calls tools: as the endpoint's probe at start-up found (auto: native
    # function calls when it returns them, else the JSON mode), or always native / json.
    llm_tool_calls: Literal["auto", "native", "json"] = "auto"
    # Whether the main model takes images; without, LLM_VISION_MODEL (if set) describes them.
    llm_vision: bool = True
    llm_vision_model: str = ""
    llm_vision_base_url: str = ""  # "" = LLM_BASE_URL
    llm_vision_api_key: SecretStr = SecretStr("")  # "" = LLM_API_KEY
    llm_transcription_model: str = ""  # voice messages, through /audio/transcriptions
    # How questions are answered: react (one agent in a tool loop), dag (a plan whose
    # independent steps run in parallel) or auto (chosen per question); /plan forces dag.
    larkgate_mode: RunMode = "react"
    # Where the answer comes from. auto: a final reply the model streams is the answer (one
    # call); synthesis writes it only where there is none (JSON mode, plan mode, a run cut
    # short). always: synthesis writes every answer (one more call, the reference design).
    larkgate_synthesis: Literal["auto", "always"] = "auto"
    # How long a turn keeps trying a model that fails (timeouts, connection and server
    # errors): from the first failed attempt, for every call of the turn together; then the
    # card says the model did not answer. 120 s: two whole attempts at the default
    # LLM_TIMEOUT_SECONDS, so a model that hangs once is tried again, and a dead one is
    # reported in two minutes, not twelve. A model that answers, however slowly, never
    # starts it.
    larkgate_turn_deadline_seconds: float = Field(default=120.0, gt=0, le=3600)

    # What the bot downloads and hands the model (images, files people send).
    larkgate_download_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, le=100 * 2**20)
    larkgate_image_max_side: int = Field(default=1568, ge=64, le=8192)
    larkgate_image_max_bytes: int = Field(default=4 * 1024 * 1024, ge=16 * 1024)
    larkgate_file_text_chars: int = Field(default=20_000, ge=500)

    # Memory: what people ask the bot to remember (bot/memory/), recalled where its rules
    # allow; caps per person and per group (and for everyone), and what a recall may add.
    larkgate_memory: bool = True
    larkgate_memory_per_person: int = Field(default=200, ge=1, le=10_000)
    larkgate_memory_per_chat: int = Field(default=500, ge=1, le=10_000)
    larkgate_memory_recall_tokens: int = Field(default=400, ge=50, le=8_000)

    # Scheduled tasks ("every weekday at 9 post the open tasks here").
    larkgate_schedule_max_per_user: int = Field(default=20, ge=1)
    larkgate_schedule_min_interval_seconds: float = Field(default=300.0, ge=60.0)
    larkgate_schedule_misfire_grace_seconds: float = Field(default=600.0, ge=0.0)

    database_url: str = "sqlite+aiosqlite:///./larkgate.db"

    larkgate_admins: Annotated[tuple[str, ...], NoDecode] = ()
    # Other bots (their open_ids, as this app sees them) whose messages that mention this
    # bot it answers; empty: it answers people only. Needs Feishu's scope
    # im:message.group_at_msg.include_bot:readonly.
    larkgate_accept_bots: Annotated[tuple[str, ...], NoDecode] = ()
    # Bots' messages in a row in one conversation after which it stops answering bots.
    larkgate_bot_hops: int = Field(default=3, ge=1, le=50)
    larkgate_host: str = "0.0.0.0"
    larkgate_port: int = Field(default=8000, ge=1, le=65535)
    larkgate_approval_ttl_seconds: int = Field(default=600, ge=1)
    # How long ask_user's question waits for its answer before the model hears nobody answered.
    larkgate_question_ttl_seconds: int = Field(default=600, ge=1)
    larkgate_console_token: SecretStr = SecretStr("")
    # A company CA (PEM) that larkgate's outbound calls trust besides the default roots
    # (bot/network.py); proxies come from HTTP_PROXY/HTTPS_PROXY/NO_PROXY.
    larkgate_ca_bundle: Path | None = None
    # The bot's public base URL (e.g. https://bot.example.com): links on cards to the web
    # console, and the OAuth callback's address.
    larkgate_public_url: str = ""
    # Per-user authorisation (acting as the person who asks): on when set. Fernet keys that
    # seal the stored user tokens, comma-separated to rotate (the first seals, any opens).
    larkgate_token_key: SecretStr = SecretStr("")
    # How long an authorisation card waits for its person before the call gives up.
    larkgate_authorization_ttl_seconds: int = Field(default=600, ge=1, le=3600)
    larkgate_config: Path | None = None
    larkgate_max_event_age_seconds: int = Field(default=900, ge=1)
    # Webhook mode without FEISHU_ENCRYPT_KEY means unsigned pushes: refused at start-up
    # unless this is true (see unsigned_events_warning).
    larkgate_allow_unsigned_events: bool = False

    # Operational knobs beyond DESIGN §4, with defaults that suit one process.
    larkgate_max_concurrent_runs: int = Field(default=8, ge=1)
    larkgate_claim_lease_seconds: float = Field(default=30.0, gt=0, le=60)
    larkgate_dedup_retention_hours: int = Field(default=48, ge=24)
    larkgate_group_require_mention: bool = True
    larkgate_group_allowlist: Annotated[tuple[str, ...], NoDecode] = ()
    larkgate_group_scope: GroupScope = "chat"
    larkgate_history_messages: int = Field(default=20, ge=0)
    # Flood bounds (pinned text survives compaction, so it is bounded where it is made):
    # messages and characters that may join one run while it works, the pinned
    # characters of any one message (the question too), and the messages of one
    # conversation that may wait for later turns (0 = no limit; past it, refused).
    larkgate_interrupts_per_run: int = Field(default=10, ge=1)
    larkgate_interrupt_chars_per_run: int = Field(default=8_000, ge=200)
    larkgate_pinned_message_chars: int = Field(default=8_000, ge=200)
    larkgate_queued_messages_per_conversation: int = Field(default=20, ge=0)
    larkgate_shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    # The event loop `larkgate serve` runs on: uvloop's (about 10% fewer instructions a
    # message than asyncio's, bench/README.md) where it is installed, else asyncio's.
    larkgate_event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    larkgate_log_level: str = "INFO"
    # text (classic lines) or json (one object a line, for log shippers); see bot/logs.py.
    larkgate_log_format: Literal["text", "json"] = "text"
    # Connectors named in DESIGN §4 (any other setting: <NAME>_CONNECTOR_<SETTING>).
    sql_connector_url: SecretStr = SecretStr("")
    http_connector_allowed_hosts: str = ""
    # Live answer cards: snapshots per second per card (Feishu allows 10 operations).
    larkgate_card_updates_per_second: float = Field(default=1.0, gt=0, le=10)
    # The ReAct loop's two tuning knobs (DESIGN §3): warn the model after this many
    # identical tool calls; add the completion checklist once this many tools were used.
    react_cycle_detection_threshold: int = Field(default=3, ge=1)
    react_completion_check_min_tools: int = Field(default=3, ge=1)
    # Who may decide approvals: auto (the admins if any, else the requester), requester,
    # admins, or a comma-separated list of open_ids.
    larkgate_approvers: str = "auto"
    # Time zone for times on cards and for when daily budgets reset.
    larkgate_timezone: str = "UTC"
    # Budgets, off at 0: messages a minute per user, tokens a day per user and per group.
    # The rate limit is on by default: 20 a minute is a message every 3 s for a whole
    # minute, more than a person types, and caps what one sender (or a script) costs.
    larkgate_rate_limit_per_minute: int = Field(default=20, ge=0)
    larkgate_user_daily_tokens: int = Field(default=0, ge=0)
    larkgate_group_daily_tokens: int = Field(default=0, ge=0)

    @field_validator(
        "larkgate_admins", "larkgate_group_allowlist", "larkgate_accept_bots", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("larkgate_accept_bots")
    @classmethod
    def _bot_open_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        wrong = [v for v in value if not v.startswith("ou_")]
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)}: a bot's open_id (ou_…) as this app sees it, not its "
                "app id or name (the open_id is in the bot's messages' sender_id)"
            )
        return value

    @field_validator("larkgate_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_time_zone(value)

    @field_validator("feishu_domain", "llm_base_url", "llm_vision_base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        # lark-oapi rejects a domain with a trailing slash; be forgiving here instead.
        return value.rstrip("/")

    @field_validator("larkgate_public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must be the bot's base URL, e.g. https://bot.example.com")
        return value

    # -- typed slices ------------------------------------------------------------------
    # Each is built once per Settings, and larkgate.toml is read once: every part of the
    # bot sees the same rules even if the file changes while it starts.

    _built: dict[str, Any] = PrivateAttr(default_factory=dict)
    _app_name: str = PrivateAttr(default="")

    def _once(self, name: str, build: Callable[[], _T]) -> _T:
        if name not in self._built:
            self._built[name] = build()
        built: _T = self._built[name]
        return built

    def _file(self) -> dict[str, Any]:
        """larkgate.toml as parsed, read at the first need ({} without one)."""
        path = self.larkgate_config
        return self._once("file", lambda: _read_toml(path) if path is not None else {})

    def network(self) -> Network:
        """How outbound calls reach the outside (the environment's proxies, the CA)."""
        return self._once("network", lambda: self._network())

    def _network(self) -> Network:
        network = Network(ca_bundle=self.larkgate_ca_bundle)
        try:
            network.check()  # a proxy or a CA file that cannot be used fails here
        except NetworkSettingError as exc:
            raise SettingsError(str(exc)) from None
        return network

    def feishu(self) -> FeishuConfig:
        return self._once(
            "feishu",
            lambda: FeishuConfig(
                app_id=self.feishu_app_id,
                app_secret=self.feishu_app_secret.get_secret_value(),
                verification_token=self.feishu_verification_token.get_secret_value(),
                encrypt_key=self.feishu_encrypt_key.get_secret_value(),
                domain=self.feishu_domain,
                max_event_age_seconds=self.larkgate_max_event_age_seconds,
            ),
        )

    def llm(self) -> LLMConfig:
        return LLMConfig(
            base_url=self.llm_base_url,
            api_key=self.llm_api_key.get_secret_value() or "not-needed",
            model=self.llm_model,
            context_budget=self.llm_context_budget,
            timeout=self.llm_timeout_seconds,
            tool_calls=self.llm_tool_calls,
        )

    def vision_llm(self) -> LLMConfig | None:
        """The model that describes images for a main model without vision, if any."""
        if not self.llm_vision_model:
            return None
        key = self.llm_vision_api_key.get_secret_value() or self.llm_api_key.get_secret_value()
        return LLMConfig(
            base_url=self.llm_vision_base_url or self.llm_base_url,
            api_key=key or "not-needed",
            model=self.llm_vision_model,
            context_budget=self.llm_context_budget,
            timeout=self.llm_timeout_seconds,
        )

    def agent(self, environ: Mapping[str, str] | None = None) -> AgentConfig:
        """The agent mode, plan mode's knobs and the models by hint ([models], [plan])."""

        def build() -> AgentConfig:
            try:
                return load_agent_config(
                    self.larkgate_mode,
                    self._file(),
                    path=self.larkgate_config,
                    environ=os.environ if environ is None else environ,
                )
            except AgentConfigError as exc:
                raise SettingsError(str(exc)) from None

        return self._once("agent", build)

    def profiles(self) -> Profiles:
        """The agent profiles and the chats routed to them ([profiles], [groups], [dm])."""

        def build() -> Profiles:
            if self.larkgate_config is None:
                return Profiles()
            try:
                return load_profiles(self._file(), where=str(self.larkgate_config))
            except ProfileError as exc:
                raise SettingsError(str(exc)) from None

        return self._once("profiles", build)

    @property
    def app_name(self) -> str:
        """The ``[apps.NAME]`` these settings are for; "" for the default app."""
        return self._app_name

    def apps(self) -> tuple[AppSpec, ...]:
        """The Feishu apps beside the default one ([apps.*]); their secrets come from the
        environment variables the tables name (the environment's, then ``.env``'s)."""

        def build() -> tuple[AppSpec, ...]:
            if self.larkgate_config is None or self._app_name:
                return ()
            try:
                return load_apps(
                    self._file(),
                    _secret_environment(),
                    where=str(self.larkgate_config),
                    profiles=frozenset(self.profiles().profiles),
                    default_app_id=self.feishu_app_id,
                )
            except AppError as exc:
                raise SettingsError(str(exc)) from None

        return self._once("apps", build)

    def for_app(self, app: AppSpec) -> Settings:
        """These settings as ``app`` runs with them: its credentials, event mode, admins,
        accepted bots, API budget and default profile; the rest (the model, the database,
        the rules of larkgate.toml) shared."""
        update: dict[str, Any] = {
            "feishu_app_id": app.app_id,
            "feishu_app_secret": SecretStr(app.app_secret),
            "feishu_verification_token": SecretStr(app.verification_token),
            "feishu_encrypt_key": SecretStr(app.encrypt_key),
            "feishu_event_mode": app.event_mode,
            "feishu_monthly_api_budget": app.monthly_api_budget,
            "larkgate_admins": app.admins,
            "larkgate_accept_bots": app.accept_bots,
            # Per-user authorisation has one OAuth callback, the default app's.
            "larkgate_token_key": SecretStr(""),
        }
        if self.governance().approvers.kind == "list":
            # Those open_ids are the default app's: the same people have others here.
            update["larkgate_approvers"] = "auto"
        copy = self.model_copy(update=update)
        copy._app_name = app.name
        # Built again from the app's values; the file as this process read it.
        copy._built = {"file": self._file(), "apps": ()}
        copy._built["profiles"] = replace(self.profiles(), default=app.profile)
        return copy

    def hint_models(self) -> dict[str, LLMConfig]:
        """The models configured for hints ("fast", "reasoning"), on the main endpoint and
        key unless their table names others."""
        main = self.llm()
        return {
            hint: LLMConfig(
                base_url=endpoint.base_url or main.base_url,
                api_key=endpoint.api_key or main.api_key,
                model=endpoint.model,
                context_budget=main.context_budget,
                timeout=main.timeout,
                tool_calls=main.tool_calls,
            )
            for hint, endpoint in self.agent().models.items()
        }

    def media(self) -> MediaConfig:
        return MediaConfig(
            main_sees_images=self.llm_vision,
            max_download_bytes=self.larkgate_download_max_bytes,
            image_max_side=self.larkgate_image_max_side,
            image_max_bytes=self.larkgate_image_max_bytes,
            file_text_chars=self.larkgate_file_text_chars,
            transcription_model=self.llm_transcription_model,
        )

    def memory(self) -> MemoryConfig:
        return MemoryConfig(
            enabled=self.larkgate_memory,
            per_person=self.larkgate_memory_per_person,
            per_chat=self.larkgate_memory_per_chat,
            recall_tokens=self.larkgate_memory_recall_tokens,
        )

    def policy(self) -> ChatPolicy:
        file_rules = load_group_rules(self.larkgate_config, self._file())
        return ChatPolicy(
            require_mention=self.larkgate_group_require_mention,
            allowlist=frozenset(self.larkgate_group_allowlist) | file_rules.allowlist,
            scope=self.larkgate_group_scope,
            groups=file_rules.groups,
            admins=frozenset(self.larkgate_admins),
            app=self._app_name,
        )

    def runtime(self) -> RuntimeConfig:
        return RuntimeConfig(
            max_concurrent_runs=self.larkgate_max_concurrent_runs,
            claim_lease_seconds=self.larkgate_claim_lease_seconds,
            dedup_retention_hours=self.larkgate_dedup_retention_hours,
            history_messages=self.larkgate_history_messages,
            shutdown_grace_seconds=self.larkgate_shutdown_grace_seconds,
            max_event_age_seconds=self.larkgate_max_event_age_seconds,
            interrupts_per_run=self.larkgate_interrupts_per_run,
            interrupt_chars_per_run=self.larkgate_interrupt_chars_per_run,
            pinned_message_chars=self.larkgate_pinned_message_chars,
            queued_messages_per_conversation=self.larkgate_queued_messages_per_conversation,
        )

    def governance(self) -> GovernanceConfig:
        approvers = self.larkgate_approvers.strip()
        if approvers.lower() in ("auto", "requester", "admins"):
            rule = ApproverRule(approvers.lower())  # type: ignore[arg-type]  # one of the three
        else:
            ids = tuple(part.strip() for part in approvers.split(",") if part.strip())
            rule = ApproverRule("list", ids) if ids else ApproverRule()
        return GovernanceConfig(
            admins=frozenset(self.larkgate_admins),
            approval_ttl_seconds=float(self.larkgate_approval_ttl_seconds),
            rules=load_approval_rules(self.larkgate_config, self._file()),
            approvers=rule,
            budgets=BudgetConfig(
                messages_per_minute=self.larkgate_rate_limit_per_minute,
                user_daily_tokens=self.larkgate_user_daily_tokens,
                group_daily_tokens=self.larkgate_group_daily_tokens,
            ),
            timezone=self.larkgate_timezone,
            button_key=derive_button_key(
                self.feishu_app_secret.get_secret_value(),
                self.feishu_encrypt_key.get_secret_value(),
                self.feishu_verification_token.get_secret_value(),
            ),
            console_url=self.console_url(),
            profiles=self.profiles(),
        )

    def user_auth(self) -> UserAuthConfig | None:
        """Per-user authorisation's settings; None when it is off (no LARKGATE_TOKEN_KEY).

        A key that is not a Fernet key is a SettingsError saying how to make one.
        """
        key = self.larkgate_token_key.get_secret_value().strip()
        if not key:
            return None
        # Imported here: only a bot with per-user authorisation needs the store's cipher.
        from bot.store.user_tokens import TokenCipher

        try:
            TokenCipher.from_setting(key)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        return UserAuthConfig(
            token_key=key,
            public_url=self.larkgate_public_url,
            ttl_seconds=float(self.larkgate_authorization_ttl_seconds),
        )

    def console_url(self) -> str | None:
        """The web console's page: None when the console is off, "" when it is on but the
        bot's public URL (LARKGATE_PUBLIC_URL) is not known."""
        if not self.larkgate_console_token.get_secret_value():
            return None
        base = self.larkgate_public_url.rstrip("/")
        return f"{base}/console" if base else ""

    def connectors(self, environ: Mapping[str, str] | None = None) -> ConnectorsConfig:
        """Connector sections from larkgate.toml with environment overrides on top."""
        sections, explicit = load_connector_sections(self.larkgate_config, self._file())
        env = dict(os.environ if environ is None else environ)
        # The two named settings may also come from .env, which os.environ lacks.
        if self.sql_connector_url.get_secret_value():
            env.setdefault("SQL_CONNECTOR_URL", self.sql_connector_url.get_secret_value())
        if self.http_connector_allowed_hosts:
            env.setdefault("HTTP_CONNECTOR_ALLOWED_HOSTS", self.http_connector_allowed_hosts)
        return ConnectorsConfig(merge_environment(sections, env), explicit)

    def unsigned_events_warning(self) -> str | None:
        """The warning to show when webhook pushes will arrive unsigned; None when they
        are signed or come over the long connection (which needs no key).

        Unsigned and not allowed (LARKGATE_ALLOW_UNSIGNED_EVENTS) is a SettingsError that
        says what to set: nothing but the verification token would vouch for a push.
        """
        if self.feishu_event_mode != "webhook" or self.feishu_encrypt_key.get_secret_value():
            return None
        if not self.larkgate_allow_unsigned_events:
            raise SettingsError(UNSIGNED_EVENTS_REFUSED)
        return UNSIGNED_EVENTS_WARNING

    def missing_for_serve(self) -> list[str]:
        """The settings ``larkgate serve`` cannot run without."""
        required = {
            "FEISHU_APP_ID": self.feishu_app_id,
            "FEISHU_APP_SECRET": self.feishu_app_secret.get_secret_value(),
            "LLM_BASE_URL": self.llm_base_url,
            "LLM_MODEL": self.llm_model,
        }
        if self.feishu_event_mode == "webhook":
            required["FEISHU_VERIFICATION_TOKEN"] = (
                self.feishu_verification_token.get_secret_value()
            )
        return [name for name, value in required.items() if not value]


@dataclass(frozen=True, slots=True)
class LLMConfig:
    base_url: str
    api_key: str = field(repr=False)
    model: str
    context_budget: int
    timeout: float = 60.0
    tool_calls: Literal["auto", "native", "json"] = "auto"  # LLM_TOOL_CALLS


@dataclass(frozen=True, slots=True)
class MediaConfig:
    """What the bot reads of the images, files and voice people send."""

    main_sees_images: bool = True
    max_download_bytes: int = 20 * 1024 * 1024
    image_max_side: int = 1568
    image_max_bytes: int = 4 * 1024 * 1024
    file_text_chars: int = 20_000
    transcription_model: str = ""


@dataclass(frozen=True, slots=True)
class GroupRule:
    require_mention: bool | None = None
    scope: GroupScope | None = None


@dataclass(frozen=True, slots=True)
class ChatPolicy:
    """Who the bot answers where, and how messages map to conversations."""

    require_mention: bool = True
    # Empty means every group is allowed.
    allowlist: frozenset[str] = frozenset()
    scope: GroupScope = "chat"
    groups: dict[str, GroupRule] = field(default_factory=dict)
    admins: frozenset[str] = frozenset()
    app: str = ""  # the [apps.NAME] whose chats these are ("": the default app)

    def group_allowed(self, chat_id: str) -> bool:
        return not self.allowlist or chat_id in self.allowlist

    def mention_required(self, chat_id: str) -> bool:
        rule = self.groups.get(chat_id)
        if rule is not None and rule.require_mention is not None:
            return rule.require_mention
        return self.require_mention

    def group_scope(self, chat_id: str) -> GroupScope:
        rule = self.groups.get(chat_id)
        return rule.scope if rule is not None and rule.scope is not None else self.scope


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    max_concurrent_runs: int = 8
    claim_lease_seconds: float = 30.0
    dedup_retention_hours: int = 48
    history_messages: int = 20
    shutdown_grace_seconds: float = 20.0
    max_event_age_seconds: int = 900
    interrupts_per_run: int = 10
    interrupt_chars_per_run: int = 8_000
    pinned_message_chars: int = 8_000
    queued_messages_per_conversation: int = 20  # 0: no limit


@dataclass(frozen=True, slots=True)
class _FileRules:
    allowlist: frozenset[str] = frozenset()
    groups: dict[str, GroupRule] = field(default_factory=dict)


def load_group_rules(path: Path | None, data: Mapping[str, Any] | None = None) -> _FileRules:
    """Per-group rules from ``larkgate.toml``::

    [groups]
    allowlist = ["oc_a", "oc_b"]

    [groups."oc_a"]
    require_mention = false
    scope = "topic"
    """
    if path is None:
        return _FileRules()
    data = _read_toml(path) if data is None else data
    section = data.get("groups", {})
    if not isinstance(section, dict):
        raise SettingsError(f"{path}: [groups] must be a table")
    allowlist = section.get("allowlist", [])
    if not isinstance(allowlist, list) or not all(isinstance(c, str) for c in allowlist):
        raise SettingsError(f"{path}: groups.allowlist must be a list of chat ids")
    groups: dict[str, GroupRule] = {}
    for chat_id, rule in section.items():
        if chat_id == "allowlist":
            continue
        if not isinstance(rule, dict):
            raise SettingsError(f"{path}: [groups.{chat_id}] must be a table")
        scope = rule.get("scope")
        if scope is not None and scope not in GROUP_SCOPES:
            raise SettingsError(
                f"{path}: groups.{chat_id}.scope must be one of {', '.join(GROUP_SCOPES)}"
            )
        mention = rule.get("require_mention")
        if mention is not None and not isinstance(mention, bool):
            raise SettingsError(f"{path}: groups.{chat_id}.require_mention must be true or false")
        groups[chat_id] = GroupRule(require_mention=mention, scope=scope)
    return _FileRules(frozenset(allowlist), groups)


def load_connector_sections(
    path: Path | None, data: Mapping[str, Any] | None = None
) -> tuple[dict[str, dict[str, Any]], bool]:
    """The ``[connectors.<name>]`` tables of larkgate.toml, and whether there is one.
    ``data`` is the file as already parsed (else it is read from ``path``)."""
    if path is None:
        return {}, False
    data = _read_toml(path) if data is None else data
    section = data.get("connectors")
    if section is None:
        return {}, False
    if not isinstance(section, dict) or not all(isinstance(v, dict) for v in section.values()):
        raise SettingsError(f"{path}: [connectors] must hold one table per connector")
    return {name: dict(values) for name, values in section.items()}, True


def load_approval_rules(path: Path | None, data: Mapping[str, Any] | None = None) -> ApprovalRules:
    """Which calls need approval, from larkgate.toml::

    [approvals]
    default = "write"          # write (tools not classified read) | always | never
    session_grants = true      # offer "approve for this person here" (false: every call asks)

    [approvals.tools]
    sql_execute = "always"

    [approvals.connectors]
    http = "never"
    """
    if path is None:
        return ApprovalRules()
    section = (_read_toml(path) if data is None else data).get("approvals", {})
    if not isinstance(section, dict):
        raise SettingsError(f"{path}: [approvals] must be a table")
    # A misspelt key would silently drop the rules under it (e.g. an "always").
    unknown = sorted(set(section) - {"default", "tools", "connectors", "session_grants"})
    if unknown:
        raise SettingsError(
            f"{path}: unknown key approvals.{unknown[0]} "
            "(use default, session_grants, tools and connectors)"
        )
    session_grants = section.get("session_grants", True)
    if not isinstance(session_grants, bool):
        raise SettingsError(f"{path}: approvals.session_grants must be true or false")

    def mode(value: object, where: str) -> ApprovalMode:
        if value not in APPROVAL_MODES:
            raise SettingsError(f"{path}: {where} must be one of {', '.join(APPROVAL_MODES)}")
        return value

    def table(name: str) -> dict[str, ApprovalMode]:
        values = section.get(name, {})
        if not isinstance(values, dict):
            raise SettingsError(f"{path}: [approvals.{name}] must be a table")
        return {key: mode(value, f"approvals.{name}.{key}") for key, value in values.items()}

    return ApprovalRules(
        default=mode(section.get("default", "write"), "approvals.default"),
        tools=table("tools"),
        connectors=table("connectors"),
        session_grants=session_grants,
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SettingsError(f"LARKGATE_CONFIG points to {path}, which does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path} is not valid TOML: {exc}") from exc


def _secret_environment() -> dict[str, str]:
    """Where the variables [apps.*] tables name are looked up: ``.env``, then the
    environment over it (as the settings themselves are read)."""
    from dotenv import dotenv_values

    env_file = Path(".env")
    found = dotenv_values(env_file) if env_file.is_file() else {}
    return {**{k: v for k, v in found.items() if v is not None}, **os.environ}


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment and ``.env``, or a SettingsError that says what is wrong."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]  # field names, checked by pydantic
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = "_".join(str(p) for p in error["loc"]).upper() or "settings"
            problems.append(f"{name}: {error['msg']}")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems)) from None
