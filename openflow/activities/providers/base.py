"""The provider interface, credential resolution and the registry that builds providers.

A `Provider` translates one node turn to a wire and back; it never classifies the outcome
(the engine does, from the `ModelReply`). Keys are resolved here, on the worker, inside the
model-turn activity: profile key first, then the provider's environment variable (spec 10.2).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from openflow.activities.providers.anthropic_messages import AnthropicMessagesProvider
from openflow.activities.providers.bedrock_converse import BedrockConverseProvider
from openflow.activities.providers.chat_completions import ChatCompletionsProvider
from openflow.activities.providers.common import DeltaSink
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.openai_responses import OpenAIResponsesProvider
from openflow.engine.request import AgentRequest, ModelReply, ToolSpec, Wire
from openflow.engine.transcript import TranscriptItem
from openflow.settings import (
    BUILTIN_PROFILES,
    AppSettings,
    ProviderProfile,
    SettingsError,
    load_settings,
)

logger = logging.getLogger(__name__)

DEFAULT_PROVIDER_BUDGET = 8

_KIND_CREDENTIALS: dict[str, tuple[str | None, bool]] = {
    "openai": ("OPENAI_API_KEY", True),
    "anthropic": ("ANTHROPIC_API_KEY", True),
    "chat_completions": ("OPENAI_COMPATIBLE_API_KEY", False),
    "bedrock": (None, False),
    "scripted": (None, False),
}
_TRANSPORT_WIRES: dict[str, Wire] = {
    "responses": "responses",
    "chat_completions": "chat_completions",
    "anthropic_messages": "anthropic_messages",
}


@runtime_checkable
class Provider(Protocol):
    """One model provider: a single streamed turn in, a `ModelReply` out."""

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: DeltaSink,
    ) -> ModelReply:
        """Run one turn; raise `ProviderError` for failures; call `on_delta` as tokens stream."""
        ...


ProviderFactory = Callable[[str, ProviderProfile, "ProviderRegistry"], Provider]


def credential_spec(profile_id: str, profile: ProviderProfile) -> tuple[str | None, bool]:
    """The env var holding this provider's key and whether a key is required."""
    builtin = BUILTIN_PROFILES.get(profile_id, {})
    kind_env, kind_required = _KIND_CREDENTIALS.get(profile.kind, (None, False))
    env_var = profile.api_key_env or builtin.get("api_key_env") or kind_env
    required = profile.api_key_required
    if required is None:
        required = bool(builtin.get("api_key_required", kind_required))
    return env_var, required


def resolve_api_key(
    profile_id: str, profile: ProviderProfile, env: Mapping[str, str] | None = None
) -> str | None:
    """The key to use: the profile's, else the provider's env var (spec 10.2).

    Raises a permanent `ProviderError` naming the variable when a required key is missing.
    """
    key = profile.secret_api_key()
    env_var, required = credential_spec(profile_id, profile)
    if key is None and env_var:
        source = os.environ if env is None else env
        value = source.get(env_var, "").strip()
        key = value or None
    if key is None and required:
        raise ProviderError.of(
            "permanent", f"{profile_id} API key missing: set {env_var or 'api_key'}"
        )
    return key


def wire_for(profile: ProviderProfile, model: str) -> Wire:
    """The wire a profile uses for `model`: kind, then per-model and profile transports."""
    if profile.kind == "bedrock":
        return "bedrock_converse"
    if profile.kind == "scripted":
        return "scripted"
    override = profile.model_transports.get(model)
    if override is not None:
        return _TRANSPORT_WIRES[override]
    if profile.kind == "anthropic":
        return "anthropic_messages"
    if profile.transport is not None:
        return _TRANSPORT_WIRES[profile.transport]
    return "responses" if profile.kind == "openai" else "chat_completions"


class _ProfileProvider:
    """Routes each request to the wire its model uses, building wire clients on first use."""

    def __init__(
        self,
        profile_id: str,
        profile: ProviderProfile,
        api_key: str | None,
        env: Mapping[str, str],
        budget: Callable[[], asyncio.Semaphore],
    ) -> None:
        self.profile_id = profile_id
        self.profile = profile
        self._api_key = api_key
        self._env = env
        self._budget = budget
        self._wires: dict[Wire, Provider] = {}

    def for_model(self, model: str) -> Provider:
        """The wire provider serving `model`."""
        wire = wire_for(self.profile, model)
        provider = self._wires.get(wire)
        if provider is None:
            provider = self._build(wire)
            self._wires[wire] = provider
        return provider

    def _build(self, wire: Wire) -> Provider:
        if wire == "responses":
            return OpenAIResponsesProvider(self.profile_id, self.profile, self._api_key)
        if wire == "chat_completions":
            return ChatCompletionsProvider(self.profile_id, self.profile, self._api_key)
        if wire == "anthropic_messages":
            return AnthropicMessagesProvider(self.profile_id, self.profile, self._api_key)
        if wire == "bedrock_converse":
            return BedrockConverseProvider(self.profile_id, self.profile, env=self._env)
        raise ProviderError.of(
            "permanent", f"provider {self.profile_id!r} has no wire {wire!r} in this worker"
        )

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: DeltaSink,
    ) -> ModelReply:
        """Run the turn on the model's wire, holding one permit of the provider budget."""
        provider = self.for_model(request.model)
        async with self._budget():
            return await provider.complete(request, transcript, tools, on_delta)

    async def aclose(self) -> None:
        """Close every wire client built so far."""
        for provider in self._wires.values():
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        self._wires.clear()


class ProviderRegistry:
    """Builds (and reuses) providers for profiles; keys are resolved here, on the worker.

    `home` lets keys stored in the worker's own settings.json fill in for a profile that
    travelled into the run without its key. `factories` adds provider kinds (e.g. `scripted`).
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        factories: Mapping[str, ProviderFactory] | None = None,
        max_concurrent_calls: int = DEFAULT_PROVIDER_BUDGET,
    ) -> None:
        self._env = env
        self._home = home
        self._factories: dict[str, ProviderFactory] = dict(factories or {})
        self._max_concurrent = max_concurrent_calls
        self._semaphore: asyncio.Semaphore | None = None
        self._cache: dict[tuple[str, str], Provider] = {}

    @property
    def env(self) -> Mapping[str, str]:
        """The environment keys and AWS settings are read from."""
        return os.environ if self._env is None else self._env

    def register(self, kind: str, factory: ProviderFactory) -> None:
        """Serve profiles of `kind` with `factory(profile_id, profile, registry)`."""
        self._factories[kind] = factory

    def _budget(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._max_concurrent)
        return self._semaphore

    def _with_stored_key(
        self, profile_id: str, profile: ProviderProfile, settings: AppSettings | None
    ) -> ProviderProfile:
        if profile.secret_api_key() is not None:
            return profile
        if settings is None and self._home is not None:
            try:
                settings = load_settings(self._home)
            except SettingsError:
                logger.warning("settings.json could not be read; using environment keys only")
        stored = settings.providers.get(profile_id) if settings is not None else None
        if stored is None or stored.secret_api_key() is None:
            return profile
        return profile.model_copy(update={"api_key": stored.api_key})

    def api_key(
        self, profile_id: str, profile: ProviderProfile, settings: AppSettings | None = None
    ) -> str | None:
        """The resolved key for a profile (raises when a required key is missing)."""
        with_key = self._with_stored_key(profile_id, profile, settings)
        return resolve_api_key(profile_id, with_key, self.env)

    def resolve(
        self, profile_id: str, profile: ProviderProfile, settings: AppSettings | None = None
    ) -> Provider:
        """The provider for `profile_id` with this profile, reusing clients across turns.

        A profile that travelled without its key gets the one stored in `settings` (the
        worker's own settings.json), else the provider's environment variable.
        """
        factory = self._factories.get(profile.kind)
        if factory is not None:
            return factory(profile_id, profile, self)
        if profile.kind == "scripted":
            raise ProviderError.of(
                "permanent",
                f"provider {profile_id!r} is scripted but this worker has no scripted provider; "
                "register one with ProviderRegistry.register('scripted', ...)",
            )
        api_key = None if profile.kind == "bedrock" else self.api_key(profile_id, profile, settings)
        fingerprint = hashlib.sha256(
            (profile.model_dump_json() + "\0" + (api_key or "")).encode("utf-8")
        ).hexdigest()
        cache_key = (profile_id, fingerprint)
        provider = self._cache.get(cache_key)
        if provider is None:
            provider = _ProfileProvider(profile_id, profile, api_key, self.env, self._budget)
            self._cache[cache_key] = provider
        return provider

    async def aclose(self) -> None:
        """Close every provider client this registry built."""
        providers = list(self._cache.values())
        self._cache.clear()
        for provider in providers:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()


__all__ = [
    "DEFAULT_PROVIDER_BUDGET",
    "Provider",
    "ProviderFactory",
    "ProviderRegistry",
    "credential_spec",
    "resolve_api_key",
    "wire_for",
]
