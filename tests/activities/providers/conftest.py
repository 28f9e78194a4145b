"""Wire kits: each provider wire with its local server, profile and request-body accessors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio
from wire import anthropic_sse, bedrock_eventstream, chat_sse, responses_sse
from wire.server import WireServer

from openflow.activities.providers import ProviderRegistry
from openflow.settings import ProviderProfile

MARKER_KEY = "sk-marker-7f3a9c2e51d84b06"


@dataclass
class WireKit:
    """How one wire is served, configured and read back."""

    name: str
    encoder: ModuleType
    profile_id: str
    model: str
    make_profile: Callable[[str], ProviderProfile]
    env: dict[str, str]
    messages: Callable[[dict[str, Any]], list[Any]]
    tool_names: Callable[[dict[str, Any]], list[str]]
    tool_choice: Callable[[dict[str, Any]], str]
    first_user_text: Callable[[dict[str, Any]], str]
    cache_prefix: Callable[[dict[str, Any]], Any]


def _anthropic_profile(base_url: str) -> ProviderProfile:
    return ProviderProfile(
        kind="anthropic",
        display_name="Anthropic",
        base_url=base_url,
        api_key=MARKER_KEY,  # type: ignore[arg-type]
        request_timeout_secs=10,
    )


def _responses_profile(base_url: str) -> ProviderProfile:
    return ProviderProfile(
        kind="openai",
        display_name="OpenAI",
        base_url=base_url,
        transport="responses",
        api_key=MARKER_KEY,  # type: ignore[arg-type]
        request_timeout_secs=10,
        fastModeAvailable=True,
    )


def _chat_profile(base_url: str) -> ProviderProfile:
    # The key comes from GROQ_API_KEY in the kit's environment, not from the profile.
    return ProviderProfile(
        kind="chat_completions",
        display_name="Groq",
        base_url=base_url + "/openai",
        chat_completions_path="v1/chat/completions",
        api_key_env="GROQ_API_KEY",
        api_key_required=True,
        request_timeout_secs=10,
    )


def _bedrock_profile(base_url: str) -> ProviderProfile:
    return ProviderProfile(
        kind="bedrock",
        display_name="Amazon Bedrock",
        base_url=base_url,
        aws_region="us-east-1",
        request_timeout_secs=10,
    )


def _bedrock_tools(body: dict[str, Any]) -> list[str]:
    return [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"] if "toolSpec" in t]


KITS = {
    "anthropic_messages": WireKit(
        name="anthropic_messages",
        encoder=anthropic_sse,
        profile_id="anthropic",
        model="claude-sonnet-4-6",
        make_profile=_anthropic_profile,
        env={},
        messages=lambda b: b["messages"],
        tool_names=lambda b: [t["name"] for t in b["tools"]],
        tool_choice=lambda b: "required" if b["tool_choice"]["type"] == "any" else "auto",
        first_user_text=lambda b: b["messages"][0]["content"][0]["text"],
        cache_prefix=lambda b: (b["system"], b["tools"]),
    ),
    "responses": WireKit(
        name="responses",
        encoder=responses_sse,
        profile_id="openai",
        model="gpt-4o-mini",
        make_profile=_responses_profile,
        env={},
        messages=lambda b: b["input"],
        tool_names=lambda b: [t["name"] for t in b["tools"]],
        tool_choice=lambda b: b["tool_choice"],
        first_user_text=lambda b: b["input"][0]["content"],
        cache_prefix=lambda b: (b["prompt_cache_key"], b["instructions"], b["tools"]),
    ),
    "chat_completions": WireKit(
        name="chat_completions",
        encoder=chat_sse,
        profile_id="groq",
        model="llama-3.3-70b-versatile",
        make_profile=_chat_profile,
        env={"GROQ_API_KEY": MARKER_KEY},
        messages=lambda b: b["messages"],
        tool_names=lambda b: [t["function"]["name"] for t in b["tools"]],
        tool_choice=lambda b: b["tool_choice"],
        first_user_text=lambda b: b["messages"][1]["content"],
        cache_prefix=lambda b: (b["prompt_cache_key"], b["messages"][0], b["tools"]),
    ),
    "bedrock_converse": WireKit(
        name="bedrock_converse",
        encoder=bedrock_eventstream,
        profile_id="bedrock",
        model="anthropic.claude-sonnet-4-20250514-v1:0",
        make_profile=_bedrock_profile,
        env={"AWS_REGION": "us-east-1"},
        messages=lambda b: b["messages"],
        tool_names=_bedrock_tools,
        tool_choice=lambda b: "required" if "any" in b["toolConfig"]["toolChoice"] else "auto",
        first_user_text=lambda b: b["messages"][0]["content"][0]["text"],
        cache_prefix=lambda b: (b["system"], b["toolConfig"]),
    ),
}


@pytest.fixture(autouse=True)
def isolated_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake AWS credentials for the SigV4 signer; no real AWS config or metadata service."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOCALTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MARKER_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def wire_server() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@pytest.fixture(params=list(KITS))
def kit(request: pytest.FixtureRequest) -> WireKit:
    return KITS[request.param]


@pytest_asyncio.fixture
async def registry(kit: WireKit) -> AsyncIterator[ProviderRegistry]:
    reg = ProviderRegistry(env=kit.env)
    yield reg
    await reg.aclose()
