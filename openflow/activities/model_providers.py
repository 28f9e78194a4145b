"""Which provider a model turn calls, and what its reply cost."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from openflow import contracts as c
from openflow.activities.lru import Lru
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.scripted import ScriptedProvider
from openflow.activities.run_files import PROFILES_KEY, RunFiles
from openflow.engine.request import ModelReply, ProviderFailure
from openflow.settings import AppSettings, ModelPrice, ProviderProfile, load_settings

ProviderFactory = Callable[[str, ProviderProfile, AppSettings], Any]


class ModelProviders:
    """The providers of runs on this worker; settings.json is read again only when it changes."""

    def __init__(self, files: RunFiles, factory: ProviderFactory | None = None) -> None:
        self.files = files
        self.factory = factory
        self._scripted: Lru[tuple[str, str], Any] = Lru(64)
        self._settings: tuple[tuple[int, int], AppSettings] | None = None
        self._settings_path: str | None = None
        self._prices: tuple[AppSettings, dict[str, ModelPrice | None]] | None = None

    def settings(self) -> AppSettings:
        """settings.json, parsed again only when the file changes."""
        if self._settings_path is None:
            self._settings_path = str(self.files.home / "settings.json")
        try:
            stat = os.stat(self._settings_path)
            stamp: tuple[int, int] = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if self._settings is None or self._settings[0] != stamp:
            self._settings = (stamp, load_settings(self.files.home))
        return self._settings[1]

    def kept(self, inp: c.ModelTurnInput) -> Any:
        """The run's provider when this worker keeps it (a run's scripted provider), else None."""
        return None if inp.profile else self._scripted.get((inp.run_id, inp.provider_id))

    def at_hand(self, inp: c.ModelTurnInput, local: bool) -> Any:
        """The call's provider when it is had without blocking, else None: the run's scripted
        provider kept, or made from the profile its run stored on this machine's disk
        (`local`: read there at once, and a script needs no settings or SDK)."""
        provider = self.kept(inp)
        if provider is None and local and not inp.profile and self.kind(inp) == "scripted":
            provider = self.for_turn(inp)
        return provider

    def for_turn(self, inp: c.ModelTurnInput) -> Any:
        """The provider for this call. A run's script is fixed when it starts, so its scripted
        provider is kept; real ones are resolved each call (the registry keeps their clients,
        and a key changed in settings.json applies at once). May block (settings, SDK imports).
        """
        if inp.profile:
            return self._provider(inp.provider_id, inp.profile)
        key = (inp.run_id, inp.provider_id)
        provider = self._scripted.get(key)
        if provider is None:
            provider = self._provider(inp.provider_id, self.profile(inp))
            if isinstance(provider, ScriptedProvider):
                self._scripted.put(key, provider)
        return provider

    def profile(self, inp: c.ModelTurnInput) -> dict[str, Any]:
        """The profile the run started with, as prepare_run stored it (keys never included)."""
        if inp.profile:
            return inp.profile
        profiles = self.files.json_file(inp.run_id, PROFILES_KEY)
        if not isinstance(profiles, dict):
            return {}
        found = profiles.get(inp.provider_id)
        return dict(found) if isinstance(found, dict) else {}

    def kind(self, inp: c.ModelTurnInput) -> Any:
        """The kind of the call's provider, as the run's start told the workflow."""
        if inp.profile:
            return inp.profile.get("kind")
        profiles = self.files.json_file(inp.run_id, PROFILES_KEY)
        found = profiles.get(inp.provider_id) if isinstance(profiles, dict) else None
        return found.get("kind") if isinstance(found, dict) else None

    def _provider(self, provider_id: str, profile_data: dict[str, Any]) -> Any:
        if not profile_data:
            raise ProviderError(
                ProviderFailure(
                    kind="permanent",
                    message=f"provider {provider_id!r} is not configured for this workflow run",
                )
            )
        profile = ProviderProfile.model_validate(profile_data)
        if profile.kind == "scripted":
            script = profile.script or {}
            return ScriptedProvider(script, exhausted=profile.exhausted)
        if self.factory is None:
            raise ProviderError(
                ProviderFailure(
                    kind="permanent",
                    message=f"provider {provider_id!r} ({profile.kind}) is not available on this worker",
                )
            )
        return self.factory(provider_id, profile, self.settings())

    def priced(self, reply: ModelReply, model: str) -> ModelReply:
        """The reply with this turn's estimated cost (settings' `prices` override the table)."""
        if reply.usage is None or reply.usage.cost_usd is not None:
            return reply
        from openflow.activities.providers.pricing import cost_at, price_for

        settings = self.settings()
        if self._prices is None or self._prices[0] is not settings:
            # Each model's price, looked up once for the settings as they are.
            self._prices = (settings, {})
        known = self._prices[1]
        name = reply.model or model
        if name not in known:
            if len(known) >= 256:
                known.clear()
            prices = dict(getattr(settings, "prices", None) or {})
            known[name] = price_for(name, prices or None)
        usage = reply.usage.model_copy(update={"cost_usd": cost_at(known[name], reply.usage)})
        return reply.model_copy(update={"usage": usage})


__all__ = ["ModelProviders", "ProviderFactory"]
