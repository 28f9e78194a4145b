"""Pieces every wire shares: the first user message, tool-call assembly, context windows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from openflow.activities.providers.errors import ProviderError
from openflow.engine.harness import cache_key_for, offered_tools
from openflow.engine.limits import MAX_JSON_DEPTH, text_depth
from openflow.engine.request import AgentRequest, RawToolCall, ToolSpec
from openflow.engine.transcript import (
    AssistantItem,
    Attachment,
    ReasoningBlock,
    ReasoningItem,
    ToolCallItem,
    ToolResultItem,
    ToolResultRefItem,
    TranscriptItem,
    UserItem,
)
from openflow.settings import ProviderProfile

DeltaSink = Callable[[str, str], None]
"""`on_delta(kind, text)`: kind is `assistant` or `thinking`; called as tokens stream."""

ResolvedItem = AssistantItem | UserItem | ReasoningItem | ToolCallItem | ToolResultItem

# OpenFlow's bundled table of context windows, by exact model id (it fills
# `max_context_tokens` in usage events and `contextWindowByNode` in the state).
BUNDLED_CONTEXT_WINDOWS: dict[str, int] = {
    "claude-3-5-haiku-20241022": 200_000,
    "claude-3-5-sonnet-20241022": 200_000,
    "claude-3-5-sonnet-latest": 200_000,
    "claude-3-haiku-20240307": 200_000,
    "claude-3-opus-20240229": 200_000,
    "claude-3-sonnet-20240229": 200_000,
    "claude-sonnet-4-20250514": 200_000,
    "gemini-1.5-flash": 1_000_000,
    "gemini-1.5-pro": 2_000_000,
    "gemini-2.0-flash": 1_000_000,
    "gemini-2.0-flash-lite": 1_000_000,
    "gemini-2.5-flash-preview-04-17": 1_000_000,
    "gemini-2.5-pro-preview-03-25": 1_000_000,
    "gemini-2.5-pro-preview-05-06": 1_000_000,
    "gpt-3.5-turbo": 16_385,
    "gpt-3.5-turbo-0125": 16_385,
    "gpt-3.5-turbo-1106": 16_385,
    "gpt-4": 8_192,
    "gpt-4-0314": 8_192,
    "gpt-4-0613": 8_192,
    "gpt-4-turbo": 128_000,
    "gpt-4-turbo-2024-04-09": 128_000,
    "gpt-4-turbo-preview": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-2024-05-13": 128_000,
    "gpt-4o-2024-08-06": 128_000,
    "gpt-4o-2024-11-20": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4o-mini-2024-07-18": 128_000,
    "o1": 200_000,
    "o1-2024-12-17": 200_000,
    "o1-mini": 128_000,
    "o1-mini-2024-09-12": 128_000,
    "o3": 200_000,
    "o3-2025-04-16": 200_000,
    "o3-mini": 200_000,
    "o3-mini-2025-01-31": 200_000,
    "o4-mini": 200_000,
    "o4-mini-2025-04-16": 200_000,
}

# Context windows by model id fragment, for models the bundled table does not name; the
# longest fragment found in a model id wins.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "claude-sonnet-4-5": 200_000,
    "llama3.1": 131_072,
    "llama-3.1": 131_072,
    "llama-3.3": 131_072,
    "llama-v3p3": 131_072,
    "deepseek-chat": 128_000,
    "deepseek-reasoner": 128_000,
    "grok-3": 131_072,
    "grok-4": 256_000,
    "mistral-large": 131_072,
    "sonar": 127_072,
    "gemini-1.5": 1_048_576,
    "gemini-2.0": 1_048_576,
    "gemini-2.5": 1_048_576,
    "nova-pro": 300_000,
    "nova-lite": 300_000,
    "nova-micro": 128_000,
}


def claude_reasoning(thinking: dict[int, dict[str, str]]) -> tuple[ReasoningBlock, ...]:
    """Streamed Claude thinking blocks (by content index) as reasoning, in stream order."""
    return tuple(
        ReasoningBlock(
            type="redacted" if block.get("type") == "redacted" else "text",
            text=block.get("text", ""),
            signature=block.get("signature") or None,
        )
        for _, block in sorted(thinking.items())
    )


def longest_fragment_match(model: str, table: dict[str, Any]) -> Any | None:
    """The value whose key is the model id, else the longest key contained in the model id."""
    if model in table:
        return table[model]
    lowered = model.lower()
    best: str | None = None
    for key in table:
        if key.lower() in lowered and (best is None or len(key) > len(best)):
            best = key
    return table[best] if best is not None else None


def max_context_tokens(model: str, profile: ProviderProfile) -> int | None:
    """The model's context window: the profile's override, else the bundled table."""
    if model in profile.context_window_sizes:
        return profile.context_window_sizes[model]
    if model in BUNDLED_CONTEXT_WINDOWS:
        return BUNDLED_CONTEXT_WINDOWS[model]
    value = longest_fragment_match(model, CONTEXT_WINDOWS)
    return int(value) if value is not None else None


def system_text(request: AgentRequest) -> str:
    """System messages joined the way OpenFlow joins them for one-string wires (spec 2.3)."""
    return "\n\n".join(m for m in request.system_messages if m.strip())


@dataclass(frozen=True)
class FilePart:
    """An image or a PDF to send in the wire's own block: its media type and base64 bytes."""

    kind: str  # "image" or "document"
    media_type: str
    data: str
    name: str

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
DOCUMENT_MEDIA_TYPES = frozenset({"application/pdf"})


def file_part(att: Attachment) -> FilePart | None:
    """The attachment as a native file part, when its bytes came along as a base64 `data:` URI."""
    if att.text is not None or not att.uri or not att.uri.startswith("data:"):
        return None
    head, sep, data = att.uri[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if not sep or encoding != "base64":
        return None
    media_type = media_type or att.media_type
    if media_type in IMAGE_MEDIA_TYPES:
        return FilePart("image", media_type, data, att.name)
    if media_type in DOCUMENT_MEDIA_TYPES:
        return FilePart("document", media_type, data, att.name)
    return None


def split_attachments(text: str, attachments: Sequence[Attachment]) -> tuple[str, list[FilePart]]:
    """`text` with the text attachments after it, and the files each wire sends natively."""
    files: list[FilePart] = []
    inline: list[Attachment] = []
    for att in attachments:
        part = file_part(att)
        if part is None:
            inline.append(att)
        else:
            files.append(part)
    return with_attachments(text, inline), files


def first_user_parts(request: AgentRequest) -> tuple[str, list[FilePart]]:
    """The first user message's text (with text attachments) and its native files."""
    return split_attachments(request.first_user_message(), request.entrypoint_attachments)


def render_attachments(attachments: Sequence[Attachment]) -> str:
    """Attachments as text the model can read (text inline, others by name and URI)."""
    parts = []
    for att in attachments:
        if att.text is not None:
            parts.append(f"Attachment {att.name} ({att.media_type}):\n{att.text}")
        else:
            where = f" at {att.uri}" if att.uri and not att.uri.startswith("data:") else ""
            parts.append(f"Attachment {att.name} ({att.media_type}){where}")
    return "\n\n".join(parts)


def with_attachments(text: str, attachments: Sequence[Attachment]) -> str:
    """`text` followed by its attachments."""
    rendered = render_attachments(attachments)
    return f"{text}\n\n{rendered}" if rendered else text


def first_user_text(request: AgentRequest) -> str:
    """The first user message every wire sends: node, task, input JSON, attachments."""
    return with_attachments(request.first_user_message(), request.entrypoint_attachments)


def resolved(transcript: Sequence[TranscriptItem]) -> Iterator[ResolvedItem]:
    """Transcript items, refusing tool results still held by reference in the run store."""
    for item in transcript:
        if isinstance(item, ToolResultRefItem):
            raise ProviderError.of(
                "failed",
                f"tool result {item.tool_call_id!r} is still a run-store reference; "
                "resolve transcript references before calling the model",
            )
        yield item


def wire_call_ids(transcript: Sequence[TranscriptItem]) -> dict[str, str]:
    """Engine tool call id → the id the wire knows it by."""
    ids: dict[str, str] = {}
    for item in transcript:
        if isinstance(item, ToolCallItem):
            ids[item.call.id] = item.call.provider_call_id or item.call.id
    return ids


def tools_and_cache_key(
    request: AgentRequest, tools: Sequence[ToolSpec]
) -> tuple[list[ToolSpec], str]:
    """The offered tools (harness first) and the prompt cache key for them."""
    offered = offered_tools(request, tools)
    key = request.cache_key or cache_key_for(
        request.workflow_id, request.node_id, [t.name for t in offered]
    )
    return offered, key


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Tool call arguments as an object, or None when the text is not a JSON object."""
    if not raw.strip():
        return {}
    if text_depth(raw) > MAX_JSON_DEPTH.value:
        return None  # deeper than anything a tool takes, and than history can carry
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    complete: str | None = None


class ToolCallBuffer:
    """Assembles streamed tool calls keyed by the wire's block index or item id."""

    def __init__(self) -> None:
        self._calls: dict[object, _PendingCall] = {}

    def start(self, key: object, *, call_id: str = "", name: str = "") -> None:
        """A new tool call began (or more of its identity arrived)."""
        call = self._calls.setdefault(key, _PendingCall())
        if call_id:
            call.id = call_id
        if name:
            call.name = name

    def has(self, key: object) -> bool:
        """Whether `key` names a tool call seen so far."""
        return key in self._calls

    def append(self, key: object, fragment: str) -> None:
        """More argument text for the call at `key`."""
        self._calls.setdefault(key, _PendingCall()).fragments.append(fragment)

    def finish(self, key: object, arguments: str) -> None:
        """The complete argument text, when the wire repeats it at the end."""
        self._calls.setdefault(key, _PendingCall()).complete = arguments

    def names(self) -> list[str]:
        """Names of every call seen so far, in order."""
        return [c.name for c in self._calls.values() if c.name]

    def calls(self) -> tuple[RawToolCall, ...]:
        """The assembled calls in the order they started."""
        out = []
        for index, call in enumerate(self._calls.values()):
            raw = call.complete if call.complete is not None else "".join(call.fragments)
            call_id = call.id or f"call_{index}"
            out.append(
                RawToolCall(
                    id=call_id,
                    name=call.name,
                    arguments=parse_arguments(raw),
                    arguments_raw=raw,
                    provider_call_id=call_id,
                )
            )
        return tuple(out)


__all__ = [
    "claude_reasoning",
    "BUNDLED_CONTEXT_WINDOWS",
    "CONTEXT_WINDOWS",
    "DeltaSink",
    "ResolvedItem",
    "ToolCallBuffer",
    "FilePart",
    "file_part",
    "first_user_parts",
    "first_user_text",
    "split_attachments",
    "longest_fragment_match",
    "max_context_tokens",
    "parse_arguments",
    "render_attachments",
    "resolved",
    "system_text",
    "tools_and_cache_key",
    "wire_call_ids",
    "with_attachments",
]
