"""The worker's shared provider registry: one set of SDK clients per process."""

from __future__ import annotations

from openflow.activities.providers.base import Provider, ProviderRegistry
from openflow.settings import MAX_POOL, AppSettings, ProviderProfile

_default: ProviderRegistry | None = None


def default_registry() -> ProviderRegistry:
    """The process-wide registry (environment keys). A worker's model pool bounds the calls
    in flight (OPENFLOW_MODEL_POOL), so the registry adds no smaller budget of its own; each
    profile's SDK client is built once and keeps its connections open across calls."""
    global _default
    if _default is None:
        _default = ProviderRegistry(max_concurrent_calls=MAX_POOL)
    return _default


def provider_for(
    provider_id: str, profile: ProviderProfile, settings: AppSettings | None = None
) -> Provider:
    """The provider serving `provider_id`; keys come from `settings` or the environment."""
    return default_registry().resolve(provider_id, profile, settings)


__all__ = ["default_registry", "provider_for"]
