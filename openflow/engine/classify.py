"""What a model's answer means: outcome classification and the submit protocol (spec 3.2, 3.3).

Every wire hands the engine a `ModelReply`; this module alone decides whether it is a
completion, tool calls, a question, plain text or a protocol error. Unlike the original, a
submitted output is always validated against the node's schema here (spec 15.10).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Literal

from jsonschema import SchemaError, validators
from pydantic import BaseModel, ConfigDict

from openflow.engine.copies import json_copy
from openflow.engine.limits import MAX_JSON_DEPTH, text_depth
from openflow.engine.policy import (
    HARNESS_REQUEST_INPUT,
    HARNESS_SUBMIT,
    HARNESS_TOOLS,
)
from openflow.engine.request import ModelReply, ProviderFailure, UsageReport
from openflow.engine.spec import template_headings
from openflow.engine.transcript import ReasoningBlock, ToolCall

EMPTY_TURN_MARKERS = (
    "neither tool calls nor recoverable output",
    "no tool calls and no usable text",
    "no message or tool call",
)
REPAIR_CANDIDATE_LIMIT = 64 * 1024
_MARKUP = re.compile(
    r"<(function_calls|tool_call|tool_use|invoke|antml:[a-z_]+)\b[^>]*>.*?</\1>", re.DOTALL
)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Completed(_Frozen):
    kind: Literal["completed"] = "completed"
    output: Any
    assistant_message: str = ""


class ToolCalls(_Frozen):
    kind: Literal["tool_calls"] = "tool_calls"
    calls: tuple[ToolCall, ...]
    invalid_call_ids: tuple[str, ...] = ()
    assistant_message: str = ""


class NeedsUserInput(_Frozen):
    kind: Literal["needs_user_input"] = "needs_user_input"
    assistant_message: str = ""
    structured_input: dict[str, Any] | None = None


class Message(_Frozen):
    kind: Literal["message"] = "message"
    assistant_message: str


ErrorKind = Literal[
    "malformed", "mixed", "truncated", "empty", "transient", "permanent", "failed", "interrupted"
]


class TurnError(_Frozen):
    """An AgentError (spec 3.5) as the engine routes it."""

    kind: Literal["error"] = "error"
    error: ErrorKind
    message: str
    tool_names: tuple[str, ...] = ()
    candidate: str | None = None
    retry_after_ms: int | None = None


Outcome = Completed | ToolCalls | NeedsUserInput | Message | TurnError


class TurnResult(_Frozen):
    """A classified model turn with what the engine records alongside it."""

    outcome: Outcome
    reasoning: tuple[ReasoningBlock, ...] = ()
    text: str = ""
    usage: UsageReport | None = None
    model: str = ""


def strip_markup(text: str) -> str:
    """Assistant text without tool-call markup some models echo into prose."""
    return _MARKUP.sub("", text).strip()


@functools.lru_cache(maxsize=512)
def _validator(canonical: str) -> Any:
    """A checked validator for one schema (by its canonical JSON), or None for a bad schema."""
    schema = json.loads(canonical)
    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
    except SchemaError:
        return None
    return cls(schema)


#: The validators of the schemas lately checked against, by identity: (the schema, a copy of
#: it as it was, its validator). A node's schema is its workflow's (shared by every run of
#: it), so its validator is found without writing the schema's JSON each reply; a schema
#: changed in place since is found by its JSON again.
_by_schema: dict[int, tuple[dict[str, Any], dict[str, Any], Any]] = {}
_KNOWN_SCHEMAS = 256


def _schema_validator(schema: dict[str, Any]) -> Any:
    known = _by_schema.get(id(schema))
    if known is not None and known[0] is schema and known[1] == schema:
        return known[2]
    validator = _validator(json.dumps(schema, sort_keys=True))
    if len(_by_schema) >= _KNOWN_SCHEMAS:
        _by_schema.clear()
    _by_schema[id(schema)] = (schema, json_copy(schema), validator)
    return validator


def schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    """The first validation problem of `value` against `schema`, or None (bad schemas pass)."""
    validator = _schema_validator(schema)
    if validator is None:
        return None
    # A schema comes from the workflow file: one jsonschema cannot apply (say an unresolvable
    # $ref) passes like an invalid one instead of failing the run.
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: str(list(e.absolute_path)))
    except Exception:
        return None
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    return f"{where}: {first.message}"[:512]


def markdown_problem(markdown: str, headings: list[str]) -> str | None:
    """Which template heading a Markdown handoff is missing, if any (spec 1.5)."""
    present = set(template_headings(markdown))
    missing = [h for h in headings if h not in present]
    if missing:
        return "the Markdown handoff is missing template headings: " + ", ".join(missing)
    return None


def _parse_text_json(text: str) -> Any | None:
    stripped = text.strip()
    match = _FENCE.match(stripped)
    if match:
        stripped = match.group(1)
    if not stripped or stripped[0] not in "{[":
        return None
    if text_depth(stripped) > MAX_JSON_DEPTH.value:
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def _salvage_key(schema: dict[str, Any]) -> str:
    required = schema.get("required")
    if isinstance(required, list) and required:
        return str(required[0])
    props = schema.get("properties")
    if isinstance(props, dict):
        if "summary" in props:
            return "summary"
        if props:
            return str(next(iter(props)))
    return "content"


def _normalize_envelope(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "output" in args:
        return args
    props = schema.get("properties")
    keys = [k for k in args if k != "assistant_message"]
    if keys and isinstance(props, dict) and all(k in props for k in keys):
        out = {k: args[k] for k in keys}
        return {"output": out, "assistant_message": args.get("assistant_message")}
    message = args.get("assistant_message")
    if not keys and isinstance(message, str) and message.strip():
        return {"output": {_salvage_key(schema): message}, "assistant_message": message}
    return args


def complete_submit(
    args: dict[str, Any] | None,
    raw: str,
    schema: dict[str, Any],
    finish_reason: str | None,
    markdown_headings: list[str] | None = None,
) -> Completed | TurnError:
    """The submit completion protocol (spec 3.3) plus the engine's own schema check."""

    def candidate() -> str | None:
        # What a repair starts from: written only for a submission that needs one.
        text = json.dumps(args, ensure_ascii=False) if not raw and args is not None else raw
        return text[:REPAIR_CANDIDATE_LIMIT] if text else None

    if finish_reason == "length":
        return TurnError(
            error="malformed",
            message="submit arguments were cut off by the output token limit",
            tool_names=(HARNESS_SUBMIT,),
        )
    if args is None:
        return TurnError(
            error="malformed",
            message="submit arguments are not valid JSON",
            tool_names=(HARNESS_SUBMIT,),
            candidate=candidate(),
        )
    envelope = _normalize_envelope(args, schema)
    if "output" not in envelope:
        return TurnError(
            error="malformed",
            message='submit arguments must be {"output": ..., "assistant_message": ...}',
            tool_names=(HARNESS_SUBMIT,),
            candidate=candidate(),
        )
    output = envelope["output"]
    message = envelope.get("assistant_message")
    problem = schema_problem(schema, output)
    if problem is None and markdown_headings is not None and isinstance(output, dict):
        markdown = output.get("markdown")
        if isinstance(markdown, str):
            problem = markdown_problem(markdown, markdown_headings)
    if problem is not None:
        return TurnError(
            error="malformed",
            message=f"the output does not match the schema: {problem}",
            tool_names=(HARNESS_SUBMIT,),
            candidate=candidate(),
        )
    text = strip_markup(message) if isinstance(message, str) else ""
    return Completed(output=output, assistant_message=text)


def classify_failure(failure: ProviderFailure) -> TurnError:
    """Map a provider failure to the engine's error kinds (spec 3.5)."""
    if failure.kind == "truncated":
        return TurnError(
            error="truncated", message=failure.message, tool_names=failure.partial_tool_names
        )
    if failure.kind == "failed" and any(m in failure.message for m in EMPTY_TURN_MARKERS):
        return TurnError(error="empty", message=failure.message)
    return TurnError(
        error=failure.kind, message=failure.message, retry_after_ms=failure.retry_after_ms
    )


def classify_reply(
    reply: ModelReply,
    schema: dict[str, Any],
    markdown_headings: list[str] | None = None,
) -> TurnResult:
    """Classify a wire reply into one outcome (spec 3.2)."""
    text = reply.text
    calls = reply.tool_calls
    outcome: Outcome
    harness = [c for c in calls if c.name in HARNESS_TOOLS]
    if not calls:
        if reply.finish_reason == "length" and not text.strip():
            outcome = TurnError(error="truncated", message="the output token limit was reached")
        elif text.strip():
            parsed = _parse_text_json(text) if reply.wire != "responses" else None
            if isinstance(parsed, dict):
                outcome = complete_submit(
                    parsed, text, schema, reply.finish_reason, markdown_headings
                )
            else:
                outcome = Message(assistant_message=strip_markup(text) or text.strip())
        elif reply.wire == "responses":
            outcome = TurnError(
                error="failed", message="OpenAI response did not contain a function call"
            )
        else:
            outcome = TurnError(
                error="empty",
                message="provider returned no tool calls and no usable text for this turn",
            )
    elif harness and len(calls) > 1:
        outcome = TurnError(
            error="mixed",
            message="response mixed incompatible tools in one batch: "
            + ", ".join(c.name for c in calls),
            tool_names=tuple(c.name for c in calls),
        )
    elif harness:
        call = harness[0]
        if call.name == HARNESS_SUBMIT:
            outcome = complete_submit(
                call.arguments, call.arguments_raw, schema, reply.finish_reason, markdown_headings
            )
        elif call.name == HARNESS_REQUEST_INPUT:
            msg = (call.arguments or {}).get("assistant_message")
            outcome = NeedsUserInput(assistant_message=msg if isinstance(msg, str) else "")
        else:
            args = call.arguments or {}
            questions = args.get("questions")
            if (
                isinstance(questions, list)
                and len(questions) == 1
                and isinstance(questions[0], dict)
            ):
                q = questions[0].get("question")
                message = q if isinstance(q, str) else ""
            else:
                message = "Please answer these questions so I can continue."
            outcome = NeedsUserInput(assistant_message=message, structured_input=args)
    else:
        invalid = tuple(c.id for c in calls if c.arguments is None)
        outcome = ToolCalls(
            calls=tuple(c.as_call() for c in calls),
            invalid_call_ids=invalid,
            assistant_message=strip_markup(text),
        )
    return TurnResult(
        outcome=outcome, reasoning=reply.reasoning, text=text, usage=reply.usage, model=reply.model
    )


__all__ = [
    "Completed",
    "Message",
    "NeedsUserInput",
    "Outcome",
    "ToolCalls",
    "TurnError",
    "TurnResult",
    "classify_failure",
    "classify_reply",
    "complete_submit",
    "markdown_problem",
    "schema_problem",
    "strip_markup",
]
