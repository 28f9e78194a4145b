"""What the engine asks of a model and what a model turn brings back.

`AgentRequest` is OpenFlow's AgentRequest (spec 2.5) without the transcript: the transcript
lives in the run store and travels by reference. `ModelReply` is a provider's answer before
the engine classifies it (spec 3.2): providers only translate wires, the engine decides what
the answer means.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_validator,
)

from openflow.engine.transcript import Attachment, ReasoningBlock, ToolCall
from openflow.engine.wire import OmitDefaults

ToolAccessPolicy = Literal["execution", "planning"]
Wire = Literal[
    "responses", "chat_completions", "anthropic_messages", "bedrock_converse", "scripted"
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)


class ToolSpec(_Model):
    """One tool offered to a model: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    tier: Literal["read", "write"] = "write"
    concurrency: Literal["shared", "exclusive", "node_exclusive"] = "exclusive"


class AgentRequest(_Model):
    """Everything a provider needs for one node call, except the transcript (spec 2.5)."""

    workflow_id: str
    run_id: str = ""
    node_id: str
    node_label: str
    model: str
    provider_id: str | None = None
    max_output_tokens: int | None = None
    system_messages: tuple[str, ...] = ()
    task_prompt: str = ""
    input: dict[str, Any] | None = None
    output_schema: dict[str, Any] = Field(default_factory=dict)
    harness_tools: tuple[ToolSpec, ...] = ()
    tool_names: tuple[str, ...] = ()
    tool_choice: Literal["required", "auto"] = "required"
    entrypoint_attachments: tuple[Attachment, ...] = ()
    reasoning_effort: str | None = None
    reasoning_budget_tokens: int | None = None
    fast_mode: bool = False
    tool_access_policy: ToolAccessPolicy = "execution"
    allow_user_input: bool = False
    conversation_mode: bool = False
    cache_key: str = ""
    turn_index: int = 0

    def first_user_message(self) -> str:
        """The first user message every wire sends (spec 2.4)."""
        from openflow.engine.pretty import pretty_json

        pretty = pretty_json(self.input)
        return (
            f"Node: {self.node_label}\nTask:\n{self.task_prompt}\n\nUpstream input JSON:\n{pretty}"
        )


class RawToolCall(OmitDefaults, _Model):
    """A tool call as the wire gave it; `arguments` is None when they could not be parsed."""

    id: str
    name: str
    arguments: dict[str, Any] | None = None
    arguments_raw: str = ""
    provider_call_id: str | None = None

    def as_call(self) -> ToolCall:
        """The call as the engine keeps it (arguments that did not parse become `{}`)."""
        return ToolCall(
            id=self.id,
            name=self.name,
            arguments=self.arguments or {},
            provider_call_id=self.provider_call_id,
        )


class UsageReport(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float | None = None

    @model_validator(mode="after")
    def _total(self) -> UsageReport:
        # A total left out (history omits one that is the plain sum) is the sum.
        if not self.total_tokens and (self.prompt_tokens or self.completion_tokens):
            object.__setattr__(self, "total_tokens", self.prompt_tokens + self.completion_tokens)
        return self


class ModelReply(OmitDefaults, _Model):
    """A successful wire response, not yet classified."""

    wire: Wire
    model: str = ""
    text: str = ""
    reasoning: tuple[ReasoningBlock, ...] = ()
    tool_calls: tuple[RawToolCall, ...] = ()
    finish_reason: str | None = None
    usage: UsageReport | None = None
    max_context_tokens: int | None = None
    streamed: bool = False

    @field_serializer("usage", mode="wrap")
    def _usage(self, value: UsageReport | None, handler: SerializerFunctionWrapHandler) -> Any:
        """Usage without its zero counts (they read back as the defaults they are)."""
        data = handler(value)
        if not isinstance(data, dict):
            return data
        if data.get("total_tokens") == data.get("prompt_tokens", 0) + data.get(
            "completion_tokens", 0
        ):
            data = {k: v for k, v in data.items() if k != "total_tokens"}
        return {k: v for k, v in data.items() if v is not None and (k == "cost_usd" or v != 0)}


ProviderErrorKind = Literal["transient", "permanent", "failed", "truncated", "interrupted"]


class ProviderFailure(_Model):
    """A model call that did not produce a reply (spec 3.5 / 5.3 classification)."""

    kind: ProviderErrorKind
    message: str
    status: int | None = None
    retry_after_ms: int | None = None
    partial_tool_names: tuple[str, ...] = ()


__all__ = [
    "AgentRequest",
    "ModelReply",
    "ProviderErrorKind",
    "ProviderFailure",
    "RawToolCall",
    "ToolAccessPolicy",
    "ToolSpec",
    "UsageReport",
    "Wire",
]
