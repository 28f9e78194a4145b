"""Error classification (spec 5.3), Retry-After, credentials and errors reported mid-stream."""

from __future__ import annotations

import email.utils
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from conftest import MARKER_KEY
from wire.server import WireResponse, WireServer
from wire.sse import sse

from openflow.activities.providers import ProviderError, ProviderRegistry, resolve_api_key
from openflow.activities.providers.errors import kind_for_status, redact, retry_after_ms
from openflow.engine.request import AgentRequest, ModelReply
from openflow.settings import ProviderProfile, builtin_profiles


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (408, "", "transient"),
        (409, "", "transient"),
        (429, "", "transient"),
        (500, "", "transient"),
        (503, "", "transient"),
        (529, "", "transient"),
        (401, "", "permanent"),
        (403, "", "permanent"),
        (404, "", "permanent"),
        (422, "", "permanent"),
        (400, "", "failed"),
        (400, '{"error": "Provider returned error"}', "transient"),
        (404, "The model is overloaded, try later", "transient"),
        (402, "upstream request failed", "transient"),
    ],
)
def test_status_classification(status: int, body: str, kind: str) -> None:
    assert kind_for_status(status, body) == kind


def test_retry_after_forms() -> None:
    assert retry_after_ms({"Retry-After": "2"}) == 2000
    assert retry_after_ms({"retry-after": "0.5"}) == 500
    assert retry_after_ms({"retry-after-ms": "250", "retry-after": "9"}) == 250
    assert retry_after_ms({"retry-after": "soon"}) is None
    assert retry_after_ms({}) is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_ms({"Retry-After": date}, now=lambda: now) == 30_000
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_ms({"Retry-After": past}, now=lambda: now) == 0


def test_redact_removes_secrets_and_key_shaped_text() -> None:
    text = "bad key sk-abc123456789 and Bearer tok_99 and custom-secret-value"
    cleaned = redact(text, ["custom-secret-value"])
    assert "sk-abc123456789" not in cleaned
    assert "tok_99" not in cleaned
    assert "custom-secret-value" not in cleaned
    assert cleaned.startswith("bad key [redacted]")


def test_missing_required_key_names_the_variable() -> None:
    profile = builtin_profiles()["anthropic"]
    with pytest.raises(ProviderError) as err:
        resolve_api_key("anthropic", profile, env={})
    assert err.value.failure.kind == "permanent"
    assert err.value.failure.message == "anthropic API key missing: set ANTHROPIC_API_KEY"


def test_key_resolution_order() -> None:
    profiles = builtin_profiles()
    env = {"OPENAI_API_KEY": "from-env", "GROQ_API_KEY": "  "}
    assert resolve_api_key("openai", profiles["openai"], env) == "from-env"
    stored = profiles["openai"].model_copy(update={"api_key": "from-profile"})
    stored = ProviderProfile.model_validate({**stored.model_dump(), "api_key": "from-profile"})
    assert resolve_api_key("openai", stored, env) == "from-profile"
    with pytest.raises(ProviderError, match="groq API key missing: set GROQ_API_KEY"):
        resolve_api_key("groq", profiles["groq"], env)
    assert resolve_api_key("ollama", profiles["ollama"], {}) is None
    assert (
        resolve_api_key("custom_openai_compatible", profiles["custom_openai_compatible"], {})
        is None
    )
    assert (
        resolve_api_key(
            "custom_openai_compatible",
            profiles["custom_openai_compatible"],
            {"OPENAI_COMPATIBLE_API_KEY": "c"},
        )
        == "c"
    )


def test_registry_fills_a_travelled_profile_from_worker_settings() -> None:
    settings_profile = ProviderProfile.model_validate(
        {**builtin_profiles()["anthropic"].model_dump(), "api_key": "stored-key"}
    )
    travelled = ProviderProfile.model_validate(settings_profile.model_dump(mode="json"))
    assert travelled.secret_api_key() is None
    from openflow.settings import AppSettings

    settings = AppSettings(providers={"anthropic": settings_profile})
    registry = ProviderRegistry(env={})
    assert registry.api_key("anthropic", travelled, settings) == "stored-key"
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        registry.resolve("anthropic", travelled)


def test_scripted_profiles_need_a_registered_factory() -> None:
    registry = ProviderRegistry(env={})
    profile = builtin_profiles()["scripted"]
    with pytest.raises(ProviderError, match="register one"):
        registry.resolve("scripted", profile)
    marker = object()
    registry.register("scripted", lambda pid, prof, reg: marker)  # type: ignore[arg-type,return-value]
    assert registry.resolve("scripted", profile) is marker


# --- errors inside a 200 stream, and per-model transports -----------------------------------


@pytest_asyncio.fixture
async def plain_registry() -> AsyncIterator[ProviderRegistry]:
    registry = ProviderRegistry(env={})
    yield registry
    await registry.aclose()


def _request(model: str) -> AgentRequest:
    return AgentRequest(workflow_id="wf", node_id="n", node_label="N", model=model, input={})


async def test_overloaded_error_event_mid_stream_is_transient(
    wire_server: WireServer, plain_registry: ProviderRegistry
) -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [],
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    wire_server.plan(
        WireResponse(
            headers={"content-type": "text/event-stream"},
            chunks=[sse(start, "message_start"), sse(error, "error")],
        )
    )
    profile = ProviderProfile(kind="anthropic", base_url=wire_server.base_url, api_key=MARKER_KEY)  # type: ignore[arg-type]
    provider = plain_registry.resolve("anthropic", profile)
    with pytest.raises(ProviderError) as err:
        await provider.complete(_request("claude-sonnet-4-6"), [], [], lambda k, t: None)
    assert err.value.failure.kind == "transient"
    assert "overloaded_error" in err.value.failure.message


async def test_responses_failed_event_is_classified(
    wire_server: WireServer, plain_registry: ProviderRegistry
) -> None:
    failed = {
        "type": "response.failed",
        "sequence_number": 1,
        "response": {
            "id": "r",
            "object": "response",
            "created_at": 1,
            "model": "gpt-4o-mini",
            "status": "failed",
            "output": [],
            "error": {"code": "server_error", "message": "The server had an error"},
        },
    }
    wire_server.plan(
        WireResponse(
            headers={"content-type": "text/event-stream"},
            chunks=[sse(failed, "response.failed")],
        )
    )
    profile = ProviderProfile(kind="openai", base_url=wire_server.base_url, api_key=MARKER_KEY)  # type: ignore[arg-type]
    provider = plain_registry.resolve("openai", profile)
    with pytest.raises(ProviderError) as err:
        await provider.complete(_request("gpt-4o-mini"), [], [], lambda k, t: None)
    assert err.value.failure.kind == "transient"


async def test_per_model_transport_override_routes_to_that_wire(
    wire_server: WireServer, plain_registry: ProviderRegistry
) -> None:
    from wire import anthropic_sse
    from wire.turns import FakeTurn

    wire_server.plan(anthropic_sse.encode(FakeTurn(text=["hi"]), "proxy-claude"))
    profile = ProviderProfile.model_validate(
        {
            "kind": "openai",
            "base_url": wire_server.base_url,
            "api_key": MARKER_KEY,
            "model_transports": {"proxy-claude": "anthropic_messages"},
        }
    )
    provider = plain_registry.resolve("gateway", profile)
    reply = await provider.complete(_request("proxy-claude"), [], [], lambda k, t: None)
    assert isinstance(reply, ModelReply)
    assert reply.wire == "anthropic_messages"
    assert wire_server.requests[-1].path == "/v1/messages"
    assert json.loads(wire_server.requests[-1].body)["model"] == "proxy-claude"


async def test_bedrock_exception_frame_mid_stream_is_transient(
    wire_server: WireServer, plain_registry: ProviderRegistry
) -> None:
    from wire.bedrock_eventstream import event, exception

    wire_server.plan(
        WireResponse(
            headers={"content-type": "application/vnd.amazon.eventstream"},
            chunks=[
                event("messageStart", {"role": "assistant"}),
                exception("throttlingException", "Too many tokens, please wait."),
            ],
        )
    )
    profile = ProviderProfile(kind="bedrock", base_url=wire_server.base_url, aws_region="us-east-1")
    provider = plain_registry.resolve("bedrock", profile)
    with pytest.raises(ProviderError) as err:
        await provider.complete(
            _request("anthropic.claude-sonnet-4-20250514-v1:0"), [], [], lambda k, t: None
        )
    assert err.value.failure.kind == "transient"
    assert "throttlingException" in err.value.failure.message
