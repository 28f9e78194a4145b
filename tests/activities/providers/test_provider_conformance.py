"""One conformance suite for every wire: the real SDK against a local server speaking its format.

Each test plans what the fake model says, runs one turn through the registry (profile → key →
wire → SDK → loopback HTTP), and checks what a person would see: the reply or failure, the
deltas that streamed, and what went over the wire.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from conftest import MARKER_KEY, WireKit
from wire.server import WireServer
from wire.turns import FakeCall, FakeError, FakeTurn, FakeUsage

from openflow.activities.providers import ProviderError, ProviderRegistry
from openflow.engine.harness import (
    ASK_QUESTION_TOOL,
    REQUEST_INPUT_TOOL,
    SUBMIT_TOOL,
    cache_key_for,
)
from openflow.engine.request import AgentRequest, ModelReply, ToolSpec
from openflow.engine.transcript import (
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    TranscriptItem,
)

TOOLS = [
    ToolSpec(
        name="read_file",
        description="Read a text file from the project.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        tier="read",
    ),
    ToolSpec(
        name="write_file",
        description="Write a text file in the project.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
]
SUBMIT_ARGS = '{"output": {"summary": "Three lines about autumn."}, "assistant_message": "Done."}'


def make_request(kit: WireKit, **overrides: Any) -> AgentRequest:
    fields: dict[str, Any] = {
        "workflow_id": "wf-poems",
        "node_id": "draft",
        "node_label": "Draft",
        "model": kit.model,
        "provider_id": kit.profile_id,
        "system_messages": ("You are a focused AI agent in a node workflow.", "Be brief."),
        "task_prompt": "Write a haiku about autumn.",
        "input": {"upstream": []},
        "allow_user_input": True,
    }
    fields.update(overrides)
    return AgentRequest(**fields)


class Deltas:
    """Collects `on_delta` calls and opens the server's gate at the first one."""

    def __init__(self, server: WireServer) -> None:
        self.seen: list[tuple[str, str]] = []
        self._server = server

    def __call__(self, kind: str, text: str) -> None:
        self.seen.append((kind, text))
        self._server.gate.set()


async def run_turn(
    kit: WireKit,
    server: WireServer,
    registry: ProviderRegistry,
    planned: FakeTurn | FakeError,
    *,
    transcript: list[TranscriptItem] | None = None,
    request: AgentRequest | None = None,
) -> tuple[ModelReply | ProviderError, Deltas]:
    if isinstance(planned, FakeTurn):
        server.plan(kit.encoder.encode(planned, kit.model))
    else:
        server.plan(kit.encoder.error(planned))
    provider = registry.resolve(kit.profile_id, kit.make_profile(server.base_url))
    deltas = Deltas(server)
    try:
        reply = await provider.complete(
            request or make_request(kit), transcript or [], TOOLS, deltas
        )
    except ProviderError as exc:
        return exc, deltas
    return reply, deltas


def expect_reply(result: ModelReply | ProviderError) -> ModelReply:
    assert isinstance(result, ModelReply), f"expected a reply, got {result!r}"
    return result


def expect_failure(result: ModelReply | ProviderError) -> ProviderError:
    assert isinstance(result, ProviderError), f"expected a failure, got {result!r}"
    return result


async def test_submit_streams_deltas_and_returns_the_harness_call(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    turn = FakeTurn(
        thinking=["Autumn ", "leaves."],
        text=["Here ", "is ", "the poem."],
        calls=[FakeCall("call_submit", SUBMIT_TOOL, SUBMIT_ARGS)],
        usage=FakeUsage(input=200, output=40, cached=50),
        gate_after_first_delta=True,
    )
    result, deltas = await run_turn(kit, wire_server, registry, turn)
    reply = expect_reply(result)

    assert reply.wire == kit.name
    assert reply.streamed
    assert [c.name for c in reply.tool_calls] == [SUBMIT_TOOL]
    assert reply.tool_calls[0].arguments == json.loads(SUBMIT_ARGS)
    assert reply.tool_calls[0].id == "call_submit"
    assert reply.text == "Here is the poem."
    assert deltas.seen == [
        ("thinking", "Autumn "),
        ("thinking", "leaves."),
        ("assistant", "Here "),
        ("assistant", "is "),
        ("assistant", "the poem."),
    ]
    # The server held the rest of the stream until the first delta reached on_delta.
    assert wire_server.gate_results == [True]
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 40
    assert reply.usage.cached_input_tokens == 50
    assert reply.usage.prompt_tokens >= 200
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 40
    assert reply.max_context_tokens and reply.max_context_tokens >= 100_000

    body = wire_server.requests[-1].json()
    assert kit.tool_names(body) == [
        SUBMIT_TOOL,
        REQUEST_INPUT_TOOL,
        ASK_QUESTION_TOOL,
        "read_file",
        "write_file",
    ]
    assert kit.tool_choice(body) == "required"
    assert kit.first_user_text(body) == make_request(kit).first_user_message()


async def test_executable_tool_calls_keep_their_ids_and_arguments(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    turn = FakeTurn(
        text=["Reading first."],
        calls=[
            FakeCall("call_a", "read_file", '{"path": "notes.md"}'),
            FakeCall("call_b", "write_file", '{"path": "out.md", "content": "x"}'),
        ],
    )
    reply = expect_reply((await run_turn(kit, wire_server, registry, turn))[0])
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "read_file", {"path": "notes.md"}),
        ("call_b", "write_file", {"path": "out.md", "content": "x"}),
    ]
    assert [c.provider_call_id for c in reply.tool_calls] == ["call_a", "call_b"]


async def test_ask_user_is_the_request_input_call(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    turn = FakeTurn(
        calls=[FakeCall("call_q", REQUEST_INPUT_TOOL, '{"assistant_message": "Which season?"}')]
    )
    reply = expect_reply((await run_turn(kit, wire_server, registry, turn))[0])
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        (REQUEST_INPUT_TOOL, {"assistant_message": "Which season?"})
    ]


async def test_plain_text_turn_has_no_tool_calls(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    turn = FakeTurn(text=["Just ", "chatting."])
    reply = expect_reply((await run_turn(kit, wire_server, registry, turn))[0])
    assert reply.text == "Just chatting."
    assert reply.tool_calls == ()
    assert reply.finish_reason


async def test_malformed_submit_arguments_are_kept_raw(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    raw = '{"output": {"summary": "unterminated'
    turn = FakeTurn(calls=[FakeCall("call_bad", SUBMIT_TOOL, raw)])
    reply = expect_reply((await run_turn(kit, wire_server, registry, turn))[0])
    [call] = reply.tool_calls
    assert call.name == SUBMIT_TOOL
    assert call.arguments is None
    assert call.arguments_raw == raw


async def test_output_limit_is_truncated_with_the_partial_tool_name(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    turn = FakeTurn(
        text=["Writing..."],
        calls=[FakeCall("call_cut", SUBMIT_TOOL, '{"output": {"summary": "a very long')],
        finish="length",
    )
    error, deltas = await run_turn(kit, wire_server, registry, turn)
    failure = expect_failure(error).failure
    assert failure.kind == "truncated"
    assert failure.partial_tool_names == (SUBMIT_TOOL,)
    assert "output token limit" in failure.message
    assert "a very long" not in failure.message
    assert deltas.seen == [("assistant", "Writing...")]


@pytest.mark.parametrize(
    ("headers", "expected_ms"),
    [({"retry-after": "7"}, 7000), ({"retry-after-ms": "1500", "retry-after": "9"}, 1500)],
)
async def test_rate_limit_is_transient_and_honours_retry_after(
    kit: WireKit,
    wire_server: WireServer,
    registry: ProviderRegistry,
    headers: dict[str, str],
    expected_ms: int,
) -> None:
    error = FakeError(429, "Rate limit reached; slow down.", headers=headers)
    failure = expect_failure((await run_turn(kit, wire_server, registry, error))[0]).failure
    assert failure.kind == "transient"
    assert failure.status == 429
    assert failure.retry_after_ms == expected_ms
    assert len(wire_server.requests) == 1, "SDK retries must be off"


async def test_unauthorized_is_permanent_and_never_shows_the_key(
    kit: WireKit,
    wire_server: WireServer,
    registry: ProviderRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # A server can only echo what it was sent: key-bearing wires send the key itself, Bedrock
    # sends a SigV4 signature (the secret stays in the process).
    sent = "a SigV4 signature" if kit.name == "bedrock_converse" else MARKER_KEY
    error = FakeError(401, f"Incorrect API key provided: {sent}. Bearer {sent}")
    failure = expect_failure((await run_turn(kit, wire_server, registry, error))[0]).failure
    assert failure.kind == "permanent"
    assert failure.status == 401
    assert "401" in failure.message
    assert MARKER_KEY not in failure.message
    assert MARKER_KEY[3:15] not in failure.message
    assert all(MARKER_KEY not in r.getMessage() for r in caplog.records)


async def test_bad_request_is_failed(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    error = FakeError(400, "tools.0.name: invalid")
    failure = expect_failure((await run_turn(kit, wire_server, registry, error))[0]).failure
    assert failure.kind == "failed"
    assert failure.status == 400


async def test_server_error_is_transient(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    error = FakeError(500, "Internal server error")
    failure = expect_failure((await run_turn(kit, wire_server, registry, error))[0]).failure
    assert failure.kind == "transient"
    assert failure.status == 500
    assert len(wire_server.requests) == 1, "SDK retries must be off"


async def test_stream_cut_midway_is_transient(
    kit: WireKit,
    wire_server: WireServer,
    registry: ProviderRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    turn = FakeTurn(text=["The ", "first ", "lines ", "and ", "more."])
    encoded = kit.encoder.encode(turn, kit.model)
    # Cut right after the second text delta went out.
    seen = 0
    for index, chunk in enumerate(encoded.chunks):
        if b"first " in chunk:
            seen = index + 1
            break
    assert seen
    turn.cut_after_events = seen
    error, deltas = await run_turn(kit, wire_server, registry, turn)
    failure = expect_failure(error).failure
    assert failure.kind == "transient"
    assert deltas.seen == [("assistant", "The "), ("assistant", "first ")]
    assert "first" not in failure.message
    assert all(MARKER_KEY not in r.getMessage() for r in caplog.records)


async def test_multi_turn_requests_are_append_only_with_a_stable_cache_prefix(
    kit: WireKit,
    wire_server: WireServer,
    registry: ProviderRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    request = make_request(
        kit,
        cache_key=cache_key_for(
            "wf-poems",
            "draft",
            [SUBMIT_TOOL, REQUEST_INPUT_TOOL, ASK_QUESTION_TOOL, "read_file", "write_file"],
        ),
    )
    transcript: list[TranscriptItem] = []
    turns = [
        FakeTurn(
            text=["Let me look."], calls=[FakeCall("call_1", "read_file", '{"path": "a.md"}')]
        ),
        FakeTurn(calls=[FakeCall("call_2", "write_file", '{"path": "b.md", "content": "hi"}')]),
        FakeTurn(calls=[FakeCall("call_3", SUBMIT_TOOL, SUBMIT_ARGS)]),
    ]
    for number, turn in enumerate(turns):
        result, _ = await run_turn(
            kit, wire_server, registry, turn, transcript=list(transcript), request=request
        )
        reply = expect_reply(result)
        if reply.text:
            from openflow.engine.transcript import AssistantItem

            transcript.append(AssistantItem(content=reply.text))
        for call in reply.tool_calls:
            transcript.append(
                ToolCallItem(
                    call=ToolCall(
                        id=f"engine-{number}-{call.id}",
                        name=call.name,
                        arguments=call.arguments or {},
                        provider_call_id=call.provider_call_id,
                    )
                )
            )
            transcript.append(
                ToolResultItem(
                    result=ToolResult(
                        tool_call_id=f"engine-{number}-{call.id}",
                        tool_name=call.name,
                        content=f"result of {call.name}",
                    )
                )
            )

    bodies = [r.json() for r in wire_server.requests]
    assert len(bodies) == 3
    for before, after in zip(bodies, bodies[1:], strict=False):
        old, new = kit.messages(before), kit.messages(after)
        assert len(new) > len(old)
        assert new[: len(old)] == old
        old_text = json.dumps(old)[:-1]
        assert json.dumps(new).startswith(old_text)
        assert kit.cache_prefix(after) == kit.cache_prefix(before)
    if kit.name in ("responses", "chat_completions"):
        assert bodies[0]["prompt_cache_key"] == request.cache_key
        assert request.cache_key.startswith("of_")
        assert "wf-poems" not in request.cache_key and "draft" not in request.cache_key
    # Tool results reach the wire under the wire's own call ids, not the engine's.
    assert "engine-0" not in json.dumps(bodies[-1])
    assert all(MARKER_KEY not in r.getMessage() for r in caplog.records)


async def test_the_key_reaches_the_server_only_as_credentials(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry
) -> None:
    await run_turn(kit, wire_server, registry, FakeTurn(text=["ok"]))
    recorded = wire_server.requests[-1]
    assert MARKER_KEY not in recorded.body.decode()
    if kit.name == "anthropic_messages":
        assert recorded.headers["x-api-key"] == MARKER_KEY
        assert recorded.headers["anthropic-version"] == "2023-06-01"
    elif kit.name == "bedrock_converse":
        assert recorded.headers["authorization"].startswith("AWS4-HMAC-SHA256")
        assert MARKER_KEY not in recorded.headers["authorization"]
        assert recorded.path.endswith("/converse-stream")
    else:
        assert recorded.headers["authorization"] == f"Bearer {MARKER_KEY}"
