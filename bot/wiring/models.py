"""The models, built from their settings: the main model's client and probe, the hint and
profile models, the vision model that reads images for one that cannot, and the
transcription client. Every app of the deployment shares them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from bot.agent_config import MODEL_HINTS
from bot.config import LLMConfig, Settings
from bot.engine import LLM, ModelRegistry, OpenAICompatibleLLM
from bot.engine.probe import PROBE_TIMEOUT, EndpointReport, probe_endpoint
from bot.engine.probed_llm import STARTUP_WAIT, ProbedLLM
from bot.metrics import MeteredLLM, Metrics
from bot.network import Network, model_http_client
from bot.runtime.turn.media import Transcribe
from bot.runtime.turn.vision import ImageDescriber, ImageFallbackLLM, ImageText


@dataclass(frozen=True, kw_only=True)
class Models:
    """What runs are made with, and what is closed at shutdown."""

    model: LLM  # the main model as configured (or as a test gives it)
    # The main model (metered) and those configured for hints ("fast", "reasoning").
    registry: ModelRegistry
    # The models profiles name that are no hint, by name (metered; on the main endpoint).
    profile_models: Mapping[str, LLM]
    # Images as text, for a main model without vision (or that refuses images).
    image_text: ImageText
    # The main model as its endpoint's probe found it (None: a model given by a test).
    probed: ProbedLLM | None
    transcribe: Transcribe | None
    # Clients of our own beside the main model, and the probed models' probes (closed first).
    clients: tuple[OpenAICompatibleLLM | ProbedLLM, ...]
    probes: tuple[ProbedLLM, ...] = ()

    @property
    def owns_model(self) -> bool:
        """Whether the main model is a client of ours (else a test's, closed by the test)."""
        return self.probed is not None and isinstance(self.model, OpenAICompatibleLLM)

    async def start(self) -> None:
        """The endpoints' probes: each waits a few seconds at most; a probe still running
        applies when it ends."""
        await asyncio.gather(*(p.start(wait=STARTUP_WAIT) for p in self.probes))


def build_models(settings: Settings, metrics: Metrics, given: LLM | None = None) -> Models:
    """The models of ``settings`` (``given``: the main model a test supplies, taken as is)."""
    network = settings.network()
    # The endpoint's abilities come from a probe.
    model: LLM
    if given is None:
        model = client = model_client(settings.llm(), network)
        probed: ProbedLLM | None = probed_model(client, settings.llm(), network)
    else:
        model, probed = given, None
    vision_config = settings.vision_llm()
    vision_model = None if vision_config is None else model_client(vision_config, network)
    image_text = ImageText(None if vision_model is None else ImageDescriber(vision_model))

    def metered(llm: LLM) -> LLM:
        return MeteredLLM(ImageFallbackLLM(llm, image_text), metrics)

    hint_configs = settings.hint_models()
    hinted = {hint: model_client(config, network) for hint, config in hint_configs.items()}
    hinted_probed = {h: probed_model(m, hint_configs[h], network) for h, m in hinted.items()}
    registry = ModelRegistry(
        metered(probed or model), **{h: metered(m) for h, m in hinted_probed.items()}
    )
    # A profile's model that is no hint: a client of its own on the main endpoint.
    named = {p.model for p in settings.profiles().profiles.values()} - {"", *MODEL_HINTS}
    profile_probed: dict[str, ProbedLLM] = {}
    for name in sorted(named) if given is None else ():
        config = replace(settings.llm(), model=name)
        profile_probed[name] = probed_model(model_client(config, network), config, network)
    probes = tuple(
        p for p in (probed, *hinted_probed.values(), *profile_probed.values()) if p is not None
    )
    listener, transcribe = transcriber(settings, network)
    return Models(
        model=model,
        registry=registry,
        profile_models={name: metered(m) for name, m in profile_probed.items()},
        image_text=image_text,
        probed=probed,
        transcribe=transcribe,
        clients=(
            *probes,
            *(m for m in (vision_model, listener) if m is not None),
            *hinted.values(),
        ),
        probes=probes,
    )


def model_client(config: LLMConfig, network: Network) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        base_url=config.base_url,
        api_key=config.api_key,
        model=config.model,
        timeout=config.timeout,
        http_client=model_http_client(network),
    )


def probed_model(client: OpenAICompatibleLLM, config: LLMConfig, network: Network) -> ProbedLLM:
    """``client`` with the abilities its endpoint shows (``bot.engine.probe``), or as
    ``LLM_TOOL_CALLS`` sets them."""

    async def probe() -> EndpointReport:
        return await probe_endpoint(
            config.base_url,
            config.api_key,
            config.model,
            request_timeout=min(config.timeout, PROBE_TIMEOUT),
            http_client=model_http_client(network),
        )

    return ProbedLLM(client, probe, tool_calls=config.tool_calls)


def transcriber(
    settings: Settings, network: Network
) -> tuple[OpenAICompatibleLLM | None, Transcribe | None]:
    """A client for ``/audio/transcriptions`` on the main endpoint, if a model is set."""
    model = settings.media().transcription_model
    if not model:
        return None, None
    client = model_client(settings.llm(), network)

    async def transcribe(audio: bytes, file_name: str) -> str:
        return await client.transcribe(audio, file_name=file_name, model=model)

    return client, transcribe
