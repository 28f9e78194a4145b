"""Usage accounting: estimated cost from the price table (overridable) and context windows."""

from __future__ import annotations

import pytest

from openflow.activities.providers import estimate_cost, max_context_tokens, price_for
from openflow.engine.request import UsageReport
from openflow.settings import ModelPrice, ProviderProfile


def test_cost_counts_fresh_cached_written_and_output_tokens() -> None:
    usage = UsageReport(
        prompt_tokens=1_000_000,
        completion_tokens=100_000,
        total_tokens=1_100_000,
        cached_input_tokens=400_000,
        cache_creation_input_tokens=100_000,
    )
    # claude-sonnet-4: input 3, output 15, cached 0.30, cache write 3.75 (USD per million)
    expected = 0.5 * 3 + 0.4 * 0.30 + 0.1 * 3.75 + 0.1 * 15
    assert estimate_cost("anthropic.claude-sonnet-4-20250514-v1:0", usage) == pytest.approx(
        expected
    )


def test_model_ids_match_by_longest_fragment() -> None:
    assert price_for("openai/gpt-4o-mini") == price_for("gpt-4o-mini")
    assert price_for("gpt-4o-mini") != price_for("gpt-4o")
    assert price_for("totally-unknown-model") is None
    usage = UsageReport(prompt_tokens=10, completion_tokens=10, total_tokens=20)
    assert estimate_cost("totally-unknown-model", usage) == 0.0


def test_settings_prices_override_the_table() -> None:
    usage = UsageReport(prompt_tokens=2_000_000, completion_tokens=0, total_tokens=2_000_000)
    prices = {"my-local-model": ModelPrice(input=1.0, output=2.0), "gpt-4o": ModelPrice(input=0)}
    assert estimate_cost("my-local-model", usage, prices) == pytest.approx(2.0)
    assert estimate_cost("gpt-4o", usage, prices) == 0.0
    assert estimate_cost("gpt-4o", usage) == pytest.approx(5.0)


def test_context_window_from_profile_then_table() -> None:
    profile = ProviderProfile(context_window_sizes={"qwen": 32_768})
    assert max_context_tokens("qwen", profile) == 32_768
    assert max_context_tokens("openai/gpt-4o-mini", profile) == 128_000
    assert max_context_tokens("claude-sonnet-4-6", profile) == 200_000
    assert max_context_tokens("mystery", profile) is None
