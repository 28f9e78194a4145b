"""What a model's answer means: outcome classification and the submit protocol (spec 3.2, 3.3)."""

from __future__ import annotations

from typing import Any

import pytest

from openflow.engine.classify import (
    Completed,
    Message,
    NeedsUserInput,
    ToolCalls,
    TurnError,
    classify_failure,
    classify_reply,
    complete_submit,
    schema_problem,
)
from openflow.engine.request import ModelReply, ProviderFailure, RawToolCall

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}, "risk": {"type": "string"}},
    "required": ["summary"],
}


def raw(name: str, args: dict[str, Any] | None, id: str = "c1") -> RawToolCall:
    return RawToolCall(id=id, name=name, arguments=args, arguments_raw="" if args is None else "{}")


def reply(
    text: str = "", *calls: RawToolCall, wire: str = "chat_completions", **kw: Any
) -> ModelReply:
    return ModelReply(wire=wire, text=text, tool_calls=calls, **kw)  # type: ignore[arg-type]


def outcome(r: ModelReply, schema: dict[str, Any] = SCHEMA) -> Any:
    return classify_reply(r, schema).outcome


SUBMIT = "openflow_submit_node_output"
ASK = "openflow_request_user_input"
QUESTION = "openflow_ask_user_question"


@pytest.mark.parametrize(
    ("r", "kind", "detail"),
    [
        (reply("Just chatting."), Message, "Just chatting."),
        (reply('{"summary": "from text"}'), Completed, {"summary": "from text"}),
        (reply('```json\n{"summary": "fenced"}\n```'), Completed, {"summary": "fenced"}),
        (reply('{"summary": 3}'), TurnError, "malformed"),
        (reply('{"summary": "x"}', wire="responses"), Message, '{"summary": "x"}'),
        (reply("", wire="responses"), TurnError, "failed"),
        (reply(""), TurnError, "empty"),
        (reply("", finish_reason="length"), TurnError, "truncated"),
        (
            reply("", raw(SUBMIT, {"output": {"summary": "s"}}), raw("read", {}, "c2")),
            TurnError,
            "mixed",
        ),
        (reply("", raw(SUBMIT, {"output": {}}), raw(ASK, {}, "c2")), TurnError, "mixed"),
        (
            reply("", raw(SUBMIT, {"output": {"summary": "s"}, "assistant_message": "m"})),
            Completed,
            {"summary": "s"},
        ),
        (reply("", raw(ASK, {"assistant_message": "Which?"})), NeedsUserInput, "Which?"),
        (reply("", raw(ASK, {})), NeedsUserInput, ""),
    ],
)
def test_replies_are_classified_as_the_spec_routes_them(
    r: ModelReply, kind: type, detail: Any
) -> None:
    result = outcome(r)
    assert isinstance(result, kind)
    if isinstance(result, Completed):
        assert result.output == detail
    elif isinstance(result, TurnError):
        assert result.error == detail
    elif isinstance(result, Message | NeedsUserInput):
        assert result.assistant_message == detail


def test_structured_questions_take_the_single_question_as_their_message() -> None:
    one = {"questions": [{"id": "a", "question": "Pick one?"}]}
    two = {"questions": [{"id": "a", "question": "A?"}, {"id": "b", "question": "B?"}]}
    first = outcome(reply("", raw(QUESTION, one)))
    both = outcome(reply("", raw(QUESTION, two)))
    assert isinstance(first, NeedsUserInput) and first.assistant_message == "Pick one?"
    assert first.structured_input == one
    assert isinstance(both, NeedsUserInput)
    assert both.assistant_message == "Please answer these questions so I can continue."


def test_executable_calls_keep_their_order_and_flag_unparseable_arguments() -> None:
    r = reply(
        'Reading. <tool_call>{"x":1}</tool_call>',
        raw("read", {"path": "a"}, "c1"),
        raw("write", None, "c2"),
    )
    result = outcome(r)
    assert isinstance(result, ToolCalls)
    assert [c.id for c in result.calls] == ["c1", "c2"]
    assert result.invalid_call_ids == ("c2",)
    assert result.assistant_message == "Reading."


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"output": {"summary": "s"}, "assistant_message": "done"}, {"summary": "s"}),
        ({"summary": "flat", "assistant_message": "m"}, {"summary": "flat"}),
        ({"assistant_message": "only prose"}, {"summary": "only prose"}),
    ],
)
def test_submit_envelopes_are_normalized(args: dict[str, Any], expected: Any) -> None:
    result = complete_submit(args, "{}", SCHEMA, None)
    assert isinstance(result, Completed) and result.output == expected


@pytest.mark.parametrize(
    ("args", "finish", "message", "candidate"),
    [
        ({"output": {"summary": "s"}}, "length", "cut off by the output token limit", False),
        (None, None, "not valid JSON", True),
        ({"wrong": 1}, None, '{"output": ..., "assistant_message": ...}', True),
        ({"output": {"summary": 1}}, None, "does not match the schema: summary", True),
    ],
)
def test_malformed_submits_say_why_and_keep_a_repair_candidate(
    args: dict[str, Any] | None, finish: str | None, message: str, candidate: bool
) -> None:
    result = complete_submit(args, '{"raw": true}', SCHEMA, finish)
    assert isinstance(result, TurnError) and result.error == "malformed"
    assert message in result.message
    assert (result.candidate is not None) is candidate


def test_markdown_handoffs_must_keep_every_template_heading() -> None:
    schema = {"type": "object", "properties": {"markdown": {"type": "string"}}}
    headings = ["# Handoff", "## Summary"]
    missing = complete_submit(
        {"output": {"markdown": "# Handoff\nbody"}}, "", schema, None, headings
    )
    assert isinstance(missing, TurnError) and "## Summary" in missing.message
    ok = complete_submit(
        {"output": {"markdown": "# Handoff\n\n## Summary\nok"}}, "", schema, None, headings
    )
    assert isinstance(ok, Completed)


def test_completed_messages_lose_echoed_tool_markup() -> None:
    args = {"output": {"summary": "s"}, "assistant_message": "Done <invoke>x</invoke>"}
    result = complete_submit(args, "", SCHEMA, None)
    assert isinstance(result, Completed) and result.assistant_message == "Done"


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (
            ProviderFailure(kind="truncated", message="m", partial_tool_names=("write",)),
            "truncated",
        ),
        (
            ProviderFailure(
                kind="failed", message="provider returned no tool calls and no usable text"
            ),
            "empty",
        ),
        (ProviderFailure(kind="failed", message="refused"), "failed"),
        (ProviderFailure(kind="transient", message="429", retry_after_ms=900), "transient"),
        (ProviderFailure(kind="permanent", message="401"), "permanent"),
        (ProviderFailure(kind="interrupted", message="cancelled"), "interrupted"),
    ],
)
def test_provider_failures_map_to_engine_errors(failure: ProviderFailure, error: str) -> None:
    err = classify_failure(failure)
    assert err.error == error
    if error == "truncated":
        assert err.tool_names == ("write",)
    if error == "transient":
        assert err.retry_after_ms == 900


@pytest.mark.parametrize(
    ("schema", "value", "problem"),
    [
        (SCHEMA, {"summary": "ok"}, None),
        (SCHEMA, {"summary": "ok", "extra": 1}, "(root): Additional properties"),
        (
            {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
            },
            {"items": [1, "x"]},
            "items/1: 'x' is not of type 'integer'",
        ),
        ({"type": "nonsense"}, {"anything": True}, None),
        ({"$ref": "#/definitions/missing"}, {}, None),
    ],
)
def test_schema_problems_name_the_path_and_bad_schemas_pass(
    schema: dict[str, Any], value: Any, problem: str | None
) -> None:
    found = schema_problem(schema, value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)
