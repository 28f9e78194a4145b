"""Model providers: Anthropic Messages, OpenAI Responses, Chat Completions, Bedrock Converse."""

from openflow.activities.providers.anthropic_messages import AnthropicMessagesProvider
from openflow.activities.providers.base import (
    Provider,
    ProviderRegistry,
    credential_spec,
    resolve_api_key,
    wire_for,
)
from openflow.activities.providers.bedrock_converse import BedrockConverseProvider
from openflow.activities.providers.chat_completions import ChatCompletionsProvider
from openflow.activities.providers.common import DeltaSink, max_context_tokens
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.openai_responses import OpenAIResponsesProvider
from openflow.activities.providers.pricing import DEFAULT_PRICES, estimate_cost, price_for
from openflow.activities.providers.registry import default_registry, provider_for

__all__ = [
    "DEFAULT_PRICES",
    "AnthropicMessagesProvider",
    "BedrockConverseProvider",
    "ChatCompletionsProvider",
    "DeltaSink",
    "OpenAIResponsesProvider",
    "Provider",
    "ProviderError",
    "ProviderRegistry",
    "credential_spec",
    "default_registry",
    "estimate_cost",
    "max_context_tokens",
    "price_for",
    "provider_for",
    "resolve_api_key",
    "wire_for",
]
