"""Estimated cost of model usage, from a price table users can override in settings.json."""

from __future__ import annotations

from collections.abc import Mapping

from openflow.activities.providers.common import longest_fragment_match
from openflow.engine.request import UsageReport
from openflow.settings import ModelPrice


def _p(
    inp: float, out: float, cached: float | None = None, write: float | None = None
) -> ModelPrice:
    return ModelPrice(input=inp, output=out, cached_input=cached, cache_write=write)


# USD per million tokens: input, output, cached input, cache write. Matched by the longest id
# fragment found in the model id, so `openai/gpt-4o-mini` and Bedrock ids resolve too.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": _p(2.50, 10.00, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "gpt-4.1": _p(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-5": _p(1.25, 10.00, 0.125),
    "gpt-5-mini": _p(0.25, 2.00, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "o3": _p(2.00, 8.00, 0.50),
    "o4-mini": _p(1.10, 4.40, 0.275),
    "claude-3-5-sonnet": _p(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": _p(3.00, 15.00, 0.30, 3.75),
    "claude-3-5-haiku": _p(0.80, 4.00, 0.08, 1.00),
    "claude-sonnet-4": _p(3.00, 15.00, 0.30, 3.75),
    "claude-opus-4": _p(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-5": _p(5.00, 25.00, 0.50, 6.25),
    "claude-haiku-4-5": _p(1.00, 5.00, 0.10, 1.25),
    "deepseek-chat": _p(0.27, 1.10, 0.07),
    "deepseek-reasoner": _p(0.55, 2.19, 0.14),
    "gemini-2.0-flash": _p(0.10, 0.40, 0.025),
    "gemini-2.5-flash": _p(0.30, 2.50, 0.075),
    "gemini-2.5-pro": _p(1.25, 10.00, 0.31),
    "grok-3-mini": _p(0.30, 0.50, 0.075),
    "grok-4": _p(3.00, 15.00, 0.75),
    "mistral-large": _p(2.00, 6.00),
    "llama-3.3-70b-versatile": _p(0.59, 0.79),
    "sonar": _p(1.00, 1.00),
    "nova-pro": _p(0.80, 3.20, 0.20),
    "nova-lite": _p(0.06, 0.24, 0.015),
    "nova-micro": _p(0.035, 0.14, 0.00875),
}


def price_for(model: str, prices: Mapping[str, ModelPrice] | None = None) -> ModelPrice | None:
    """The price of `model`: an override from settings first, else the bundled table."""
    if prices:
        override = longest_fragment_match(model, dict(prices))
        if isinstance(override, ModelPrice):
            return override
    found = longest_fragment_match(model, DEFAULT_PRICES)
    return found if isinstance(found, ModelPrice) else None


def estimate_cost(
    model: str, usage: UsageReport, prices: Mapping[str, ModelPrice] | None = None
) -> float:
    """Estimated USD for one turn's usage; 0.0 for a model with no known price."""
    return cost_at(price_for(model, prices), usage)


def cost_at(price: ModelPrice | None, usage: UsageReport) -> float:
    """Estimated USD for one turn's usage at `price` (`price_for`'s); 0.0 for no price."""
    if price is None:
        return 0.0
    cached = max(0, usage.cached_input_tokens)
    written = max(0, usage.cache_creation_input_tokens)
    fresh = max(0, usage.prompt_tokens - cached - written)
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    write_rate = price.cache_write if price.cache_write is not None else price.input
    total = (
        fresh * price.input
        + cached * cached_rate
        + written * write_rate
        + max(0, usage.completion_tokens) * price.output
    )
    return total / 1_000_000


__all__ = ["DEFAULT_PRICES", "cost_at", "estimate_cost", "price_for"]
