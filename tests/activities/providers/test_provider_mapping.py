"""Request mapping (spec 3.1, 10.3): harness tools, tool choice, reasoning, caching, transcripts."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from openflow.activities.providers import (
    AnthropicMessagesProvider,
    BedrockConverseProvider,
    ChatCompletionsProvider,
    OpenAIResponsesProvider,
    ProviderError,
)
from openflow.activities.providers.openai_sdk import endpoint_base
from openflow.engine.harness import (
    ASK_QUESTION_TOOL,
    FILE_PATH_HINT,
    REQUEST_INPUT_TOOL,
    SUBMIT_TOOL,
    cache_key_for,
    harness_tool_specs,
    offered_tools,
)
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningBlock,
    ReasoningItem,
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    ToolResultRefItem,
    TranscriptItem,
    UserItem,
)
from openflow.settings import ProviderProfile, builtin_profiles

READ = ToolSpec(name="read_file", description="Read", parameters={"type": "object"})


def request(**overrides: Any) -> AgentRequest:
    fields: dict[str, Any] = {
        "workflow_id": "wf",
        "node_id": "n1",
        "node_label": "Node one",
        "model": "claude-sonnet-4-5",
        "system_messages": ("Preamble.", "Node prompt."),
        "task_prompt": "Do it.",
        "input": {"upstream": []},
    }
    fields.update(overrides)
    return AgentRequest(**fields)


def anthropic(model: str = "claude-sonnet-4-5", **overrides: Any) -> dict[str, Any]:
    provider = AnthropicMessagesProvider("anthropic", builtin_profiles()["anthropic"], "k")
    return provider.build_params(request(model=model, **overrides), [], [READ])


TRANSCRIPT: list[TranscriptItem] = [
    ReasoningItem(blocks=(ReasoningBlock(type="text", text="Plan.", signature="sig-9"),)),
    AssistantItem(content="Reading."),
    ToolCallItem(
        call=ToolCall(id="e1", name="read_file", arguments={"path": "a"}, provider_call_id="w1")
    ),
    ToolResultItem(
        result=ToolResult(tool_call_id="e1", tool_name="read_file", content="boom", is_error=True)
    ),
    UserItem(content="Please continue."),
]


# --- harness tools ------------------------------------------------------------------------


def test_harness_tools_follow_the_node_input_settings() -> None:
    assert [t.name for t in harness_tool_specs(request())] == [SUBMIT_TOOL]
    conversational = request(allow_user_input=True)
    assert [t.name for t in harness_tool_specs(conversational)] == [
        SUBMIT_TOOL,
        REQUEST_INPUT_TOOL,
        ASK_QUESTION_TOOL,
    ]
    only_structured = harness_tool_specs(conversational, allow_free_text_input=False)
    assert [t.name for t in only_structured] == [SUBMIT_TOOL, ASK_QUESTION_TOOL]
    only_free = harness_tool_specs(conversational, allow_structured_input=False)
    assert [t.name for t in only_free] == [SUBMIT_TOOL, REQUEST_INPUT_TOOL]


def test_submit_schema_wraps_the_output_schema_with_path_hints() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "Short title."},
            "count": {"type": "integer"},
            "parts": {"type": "object", "properties": {"body": {"type": "string"}}},
        },
        "required": ["title"],
    }
    [submit] = harness_tool_specs(request(output_schema=schema))
    params = submit.parameters
    assert params["required"] == ["output", "assistant_message"]
    assert params["additionalProperties"] is False
    assert params["properties"]["assistant_message"] == {"type": "string"}
    output = params["properties"]["output"]
    assert output["properties"]["title"]["description"] == f"Short title. {FILE_PATH_HINT}"
    assert output["properties"]["count"] == {"type": "integer"}
    assert output["properties"]["parts"]["properties"]["body"]["description"] == FILE_PATH_HINT
    assert output["required"] == ["title"]
    assert "description" not in schema["properties"]["count"], "the node's schema is not mutated"


def test_default_and_markdown_submission_schemas() -> None:
    [submit] = harness_tool_specs(request(output_schema={"type": "string"}))
    output = submit.parameters["properties"]["output"]
    assert output["required"] == ["summary"]
    markdown = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"markdown": {"type": "string"}},
        "required": ["markdown"],
    }
    [submit] = harness_tool_specs(request(output_schema=markdown))
    assert submit.parameters["properties"]["output"]["properties"]["markdown"] == {"type": "string"}


def test_ask_question_schema_limits() -> None:
    ask = harness_tool_specs(request(allow_user_input=True))[2]
    questions = ask.parameters["properties"]["questions"]
    assert (questions["minItems"], questions["maxItems"]) == (1, 3)
    item = questions["items"]
    assert item["properties"]["id"]["pattern"] == "^[a-z][a-z0-9_]*$"
    assert item["properties"]["header"]["maxLength"] == 12
    assert (
        item["properties"]["options"]["minItems"],
        item["properties"]["options"]["maxItems"],
    ) == (
        2,
        3,
    )


def test_offered_tools_put_harness_first_and_keep_the_given_order() -> None:
    write = ToolSpec(name="write_file", description="Write", parameters={"type": "object"})
    names = [t.name for t in offered_tools(request(), [write, READ, write])]
    assert names == [SUBMIT_TOOL, "write_file", "read_file"]


def test_cache_key_is_stable_and_reveals_nothing() -> None:
    key = cache_key_for("wf-secret-name", "node-a", ["a", "b"])
    assert key == cache_key_for("wf-secret-name", "node-a", ["a", "b"])
    assert key.startswith("of_") and len(key) <= 64
    assert "secret" not in key and "node" not in key
    assert key != cache_key_for("wf-secret-name", "node-b", ["a", "b"])
    assert key != cache_key_for("wf-secret-name", "node-a", ["a"])


# --- Anthropic ------------------------------------------------------------------------------


def test_anthropic_cache_breakpoints_after_system_and_tools() -> None:
    params = anthropic()
    assert [b["text"] for b in params["system"]] == ["Preamble.", "Node prompt."]
    assert "cache_control" not in params["system"][0]
    assert params["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in params["tools"]] == [SUBMIT_TOOL, "read_file"]
    assert params["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in params["tools"][0]
    assert params["cache_control"] == {"type": "ephemeral"}
    assert params["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(
    ("model", "effort", "budget", "thinking", "output_config", "min_tokens"),
    [
        (
            "claude-sonnet-4-5",
            "low",
            None,
            {"type": "enabled", "budget_tokens": 10_240},
            None,
            14_336,
        ),
        (
            "claude-sonnet-4-5",
            "high",
            None,
            {"type": "enabled", "budget_tokens": 59_000},
            None,
            63_096,
        ),
        (
            "claude-3-7-sonnet-latest",
            "adaptive",
            None,
            {"type": "enabled", "budget_tokens": 40_960},
            None,
            45_056,
        ),
        ("claude-opus-4-1", "medium", 2_048, {"type": "enabled", "budget_tokens": 2_048}, None, 0),
        (
            "claude-opus-4-6",
            "low",
            None,
            {"type": "adaptive", "display": "summarized"},
            {"effort": "low"},
            16_000,
        ),
        (
            "claude-sonnet-4-6",
            "adaptive",
            None,
            {"type": "adaptive", "display": "summarized"},
            None,
            16_000,
        ),
    ],
)
def test_claude_thinking_by_model_family(
    model: str,
    effort: str,
    budget: int | None,
    thinking: dict[str, Any],
    output_config: dict[str, Any] | None,
    min_tokens: int,
) -> None:
    params = anthropic(model, reasoning_effort=effort, reasoning_budget_tokens=budget)
    assert params["thinking"] == thinking
    assert params.get("output_config") == output_config
    assert params["tool_choice"] == {"type": "auto"}, "active thinking forces auto"
    assert params["max_tokens"] >= min_tokens


def test_claude_thinking_off_unset_and_out_of_range() -> None:
    disabled = anthropic(reasoning_effort="none")
    assert disabled["thinking"] == {"type": "disabled"}
    assert disabled["tool_choice"] == {"type": "any"}
    assert "thinking" not in anthropic()
    assert "thinking" not in anthropic("claude-3-5-sonnet-latest", reasoning_effort="high")
    assert anthropic("claude-3-5-sonnet-latest")["max_tokens"] == 8_192
    assert anthropic("claude-sonnet-4-5")["max_tokens"] == 64_000
    assert anthropic("claude-opus-4-1")["max_tokens"] == 32_000
    assert anthropic("claude-sonnet-4-5", max_output_tokens=1_000)["max_tokens"] == 1_000
    with pytest.raises(ProviderError) as err:
        anthropic(reasoning_effort="high", reasoning_budget_tokens=500)
    assert err.value.failure.kind == "permanent"
    assert "1024..59000" in err.value.failure.message


def test_conversation_mode_uses_auto_tool_choice() -> None:
    assert anthropic(conversation_mode=True)["tool_choice"] == {"type": "auto"}
    assert anthropic(tool_choice="auto")["tool_choice"] == {"type": "auto"}


def test_anthropic_transcript_mapping() -> None:
    provider = AnthropicMessagesProvider("anthropic", builtin_profiles()["anthropic"], "k")
    messages = provider.build_params(request(), TRANSCRIPT, [READ])["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": "Plan.", "signature": "sig-9"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "w1", "name": "read_file", "input": {"path": "a"}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "w1", "content": "boom", "is_error": True},
        {"type": "text", "text": "Please continue."},
    ]


def test_unresolved_tool_result_reference_is_refused() -> None:
    provider = AnthropicMessagesProvider("anthropic", builtin_profiles()["anthropic"], "k")
    ref = ToolResultRefItem(tool_call_id="c1", tool_name="read_file", ref="batches/x.json")
    with pytest.raises(ProviderError, match="run-store reference"):
        provider.build_params(request(), [ref], [])


# --- OpenAI Responses and Chat Completions --------------------------------------------------


def test_responses_fast_mode_reasoning_and_cache_key() -> None:
    profiles = builtin_profiles()
    provider = OpenAIResponsesProvider("openai", profiles["openai"], "k")
    req = request(model="gpt-5", fast_mode=True, reasoning_effort="high", max_output_tokens=900)
    params = provider.build_params(req, TRANSCRIPT, [READ])
    assert params["service_tier"] == "priority"
    assert params["reasoning"] == {"effort": "high", "summary": "auto"}
    assert params["include"] == ["reasoning.encrypted_content"]
    assert params["store"] is False
    assert params["max_output_tokens"] == 900
    assert params["instructions"] == "Preamble.\n\nNode prompt."
    assert params["prompt_cache_key"] == cache_key_for("wf", "n1", [SUBMIT_TOOL, "read_file"])
    assert params["tool_choice"] == "required"
    assert params["input"][1:] == [
        {"role": "assistant", "content": "Reading."},
        {
            "type": "function_call",
            "call_id": "w1",
            "name": "read_file",
            "arguments": '{"path": "a"}',
        },
        {"type": "function_call_output", "call_id": "w1", "output": "Tool error: boom"},
        {"role": "user", "content": "Please continue."},
    ]
    slow = provider.build_params(request(model="gpt-4o-mini"), [], [])
    assert "service_tier" not in slow and "reasoning" not in slow


def test_fast_mode_only_where_the_profile_offers_it() -> None:
    groq = ChatCompletionsProvider("groq", builtin_profiles()["groq"], "k")
    params = groq.build_params(request(model="m", fast_mode=True), [], [])
    assert "service_tier" not in params


def test_responses_replays_encrypted_reasoning() -> None:
    provider = OpenAIResponsesProvider("openai", builtin_profiles()["openai"], "k")
    item = ReasoningItem(
        blocks=(
            ReasoningBlock(type="summary", text="Thought about it."),
            ReasoningBlock(type="encrypted", text="opaque", signature="rs_42"),
        )
    )
    params = provider.build_params(request(model="gpt-5"), [item], [])
    assert params["input"][1] == {
        "type": "reasoning",
        "id": "rs_42",
        "summary": [],
        "encrypted_content": "opaque",
    }


def test_chat_completions_cache_key_reasoning_and_messages() -> None:
    profiles = builtin_profiles()
    ollama = ChatCompletionsProvider("ollama", profiles["ollama"], None)
    assert "prompt_cache_key" not in ollama.build_params(request(model="llama3.1"), [], [])
    groq = ChatCompletionsProvider("groq", profiles["groq"], "k")
    req = request(model="m", reasoning_effort="low", reasoning_budget_tokens=2048)
    params = groq.build_params(req, TRANSCRIPT, [READ])
    assert params["prompt_cache_key"].startswith("of_")
    assert params["stream_options"] == {"include_usage": True}
    assert params["reasoning_effort"] == "low"
    assert params["extra_body"] == {
        "reasoning_budget_tokens": 2048,
        "reasoning": {"max_tokens": 2048},
    }
    assert params["messages"][0] == {"role": "system", "content": "Preamble.\n\nNode prompt."}
    assert params["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "w1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "w1", "content": "Tool error: boom"},
        {"role": "user", "content": "Please continue."},
    ]


@pytest.mark.parametrize(
    ("base", "path", "suffix", "expected"),
    [
        ("https://api.openai.com", "v1/responses", "responses", "https://api.openai.com/v1"),
        (
            "http://localhost:11434/v1",
            "v1/chat/completions",
            "chat/completions",
            "http://localhost:11434/v1",
        ),
        (
            "https://openrouter.ai/api/",
            "v1/chat/completions",
            "chat/completions",
            "https://openrouter.ai/api/v1",
        ),
        (
            "https://api.perplexity.ai",
            "chat/completions",
            "chat/completions",
            "https://api.perplexity.ai",
        ),
    ],
)
def test_endpoint_base(base: str, path: str, suffix: str, expected: str) -> None:
    assert endpoint_base(base, path, suffix) == expected


def test_endpoint_path_must_end_with_the_endpoint() -> None:
    with pytest.raises(ProviderError, match="must end with 'chat/completions'"):
        endpoint_base("http://x", "v1/complete", "chat/completions")


# --- Bedrock --------------------------------------------------------------------------------


def test_bedrock_cache_points_for_allowlisted_models_only() -> None:
    provider = BedrockConverseProvider("bedrock", builtin_profiles()["bedrock"], env={})
    claude = provider.build_params(
        request(model="anthropic.claude-sonnet-4-20250514-v1:0"), [], [READ]
    )
    assert claude["system"][-1] == {"cachePoint": {"type": "default"}}
    assert claude["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default"}}
    assert claude["toolConfig"]["toolChoice"] == {"any": {}}
    assert claude["inferenceConfig"] == {"maxTokens": 64_000}
    llama = provider.build_params(request(model="meta.llama3-70b-instruct-v1:0"), [], [READ])
    assert all("cachePoint" not in block for block in llama["system"])
    assert all("cachePoint" not in tool for tool in llama["toolConfig"]["tools"])
    assert "inferenceConfig" not in llama
    nova = provider.build_params(request(model="amazon.nova-pro-v1:0"), [], [READ])
    assert nova["system"][-1] == {"cachePoint": {"type": "default"}}
    assert all("cachePoint" not in tool for tool in nova["toolConfig"]["tools"])


def test_bedrock_thinking_and_transcript() -> None:
    provider = BedrockConverseProvider("bedrock", builtin_profiles()["bedrock"], env={})
    req = request(model="anthropic.claude-sonnet-4-20250514-v1:0", reasoning_effort="low")
    redacted = ReasoningItem(
        blocks=(ReasoningBlock(type="redacted", text=base64.b64encode(b"\x01\x02").decode()),)
    )
    params = provider.build_params(req, [*TRANSCRIPT, redacted], [READ])
    assert params["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 10_240}
    }
    assert params["toolConfig"]["toolChoice"] == {"auto": {}}
    assert params["inferenceConfig"]["maxTokens"] >= 14_336
    messages = params["messages"]
    assert messages[1]["content"][0] == {
        "reasoningContent": {"reasoningText": {"text": "Plan.", "signature": "sig-9"}}
    }
    assert messages[1]["content"][2] == {
        "toolUse": {"toolUseId": "w1", "name": "read_file", "input": {"path": "a"}}
    }
    assert messages[2]["content"][0] == {
        "toolResult": {"toolUseId": "w1", "content": [{"text": "boom"}], "status": "error"}
    }
    assert messages[3]["content"] == [{"reasoningContent": {"redactedContent": b"\x01\x02"}}]


def test_bedrock_region_from_profile_then_environment() -> None:
    profile = builtin_profiles()["bedrock"]
    assert BedrockConverseProvider("bedrock", profile, env={}).region == "us-east-1"
    assert BedrockConverseProvider("bedrock", profile, env={"AWS_REGION": "eu-west-1"}).region == (
        "eu-west-1"
    )
    pinned = profile.model_copy(update={"aws_region": "ap-south-1"})
    assert BedrockConverseProvider("bedrock", pinned, env={"AWS_REGION": "x"}).region == (
        "ap-south-1"
    )


def test_profiles_without_keys_build_without_touching_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-should-not-leak")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://elsewhere.invalid")
    profile = ProviderProfile(kind="chat_completions", base_url="http://127.0.0.1:1/v1")
    provider = ChatCompletionsProvider("ollama", profile, None)
    client = provider._client
    assert client.api_key != "sk-env-should-not-leak"
    assert str(client.base_url).startswith("http://127.0.0.1:1/v1")
