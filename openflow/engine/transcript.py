"""Conversation items: what a node's transcript holds and what tools exchange.

Everything here travels through Temporal history and the run store, so it is a durable
contract: add optional fields with defaults, never rename.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)


class ToolCall(_Model):
    """One call the model asked for: a harness tool or an executable tool."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    provider_call_id: str | None = None


class ToolResult(_Model):
    """The result the model sees for one tool call."""

    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    artifact_ids: tuple[str, ...] = ()
    output_meta: dict[str, Any] | None = None


class Attachment(_Model):
    """A file given with the entrypoint or a person's words.

    History carries only the reference (`id`, `name`, `media_type`, `size_bytes`, `sha256`, and
    `uri` naming it in the run store); the model-turn activity fills in `text` (text files) or
    a `data:` `uri` (images, PDFs) just before a provider sees it.
    """

    name: str
    media_type: str = "application/octet-stream"
    uri: str | None = None
    text: str | None = None
    id: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None


class ReasoningBlock(_Model):
    type: Literal["text", "encrypted", "redacted", "summary"] = "text"
    text: str = ""
    signature: str | None = None


class AssistantItem(_Model):
    kind: Literal["assistant_message"] = "assistant_message"
    content: str


class UserItem(_Model):
    kind: Literal["user_message"] = "user_message"
    content: str
    attachments: tuple[Attachment, ...] = ()


class ReasoningItem(_Model):
    kind: Literal["reasoning"] = "reasoning"
    id: str | None = None
    blocks: tuple[ReasoningBlock, ...] = ()


class ToolCallItem(_Model):
    kind: Literal["tool_call"] = "tool_call"
    call: ToolCall


class ToolResultItem(_Model):
    kind: Literal["tool_result"] = "tool_result"
    result: ToolResult


class ToolResultRefItem(_Model):
    """A tool result whose full content lives in the run store (keeps history small).

    The model-turn activity resolves it into a ToolResultItem before the provider sees it.
    """

    kind: Literal["tool_result_ref"] = "tool_result_ref"
    tool_call_id: str
    tool_name: str
    ref: str
    is_error: bool = False
    preview: str = ""
    artifact_ids: tuple[str, ...] = ()


TranscriptItem = Annotated[
    AssistantItem | UserItem | ReasoningItem | ToolCallItem | ToolResultItem | ToolResultRefItem,
    Field(discriminator="kind"),
]

__all__ = [
    "AssistantItem",
    "Attachment",
    "ReasoningBlock",
    "ReasoningItem",
    "ToolCall",
    "ToolCallItem",
    "ToolResult",
    "ToolResultItem",
    "ToolResultRefItem",
    "TranscriptItem",
    "UserItem",
]
