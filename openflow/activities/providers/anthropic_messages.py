"""Anthropic Messages over the `anthropic` SDK, streamed, with prompt cache breakpoints."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import anthropic

from openflow.activities.providers.common import (
    DeltaSink,
    FilePart,
    ToolCallBuffer,
    claude_reasoning,
    first_user_parts,
    max_context_tokens,
    resolved,
    split_attachments,
    tools_and_cache_key,
    wire_call_ids,
)
from openflow.activities.providers.errors import (
    TRANSPORT_EXCEPTIONS,
    ProviderError,
    status_error,
    stream_cut,
    stream_error,
    transport_error,
    truncated,
)
from openflow.activities.providers.reasoning import claude_output_limit, claude_thinking
from openflow.engine.request import AgentRequest, ModelReply, ToolSpec, UsageReport
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningItem,
    ToolCallItem,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)
from openflow.settings import ProviderProfile

logger = logging.getLogger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"
_EPHEMERAL = {"type": "ephemeral"}


def _auth_headers(api_key: str | None) -> dict[str, str]:
    """Version header plus `x-api-key`, which every Anthropic-compatible server accepts."""
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def _add(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": list(blocks)})


def _user_blocks(text: str, files: list[FilePart]) -> list[dict[str, Any]]:
    """A user turn's text, then its images and PDFs as image and document blocks."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for part in files:
        source = {"type": "base64", "media_type": part.media_type, "data": part.data}
        if part.kind == "image":
            blocks.append({"type": "image", "source": source})
        else:
            blocks.append({"type": "document", "source": source, "title": part.name})
    return blocks


def _reasoning_blocks(item: ReasoningItem) -> list[dict[str, Any]]:
    """Thinking blocks Claude can verify on replay (signed text, or redacted data)."""
    blocks: list[dict[str, Any]] = []
    for block in item.blocks:
        if block.type == "redacted" and block.text:
            blocks.append({"type": "redacted_thinking", "data": block.text})
        elif block.type in ("text", "summary") and block.signature and item.id is None:
            blocks.append(
                {"type": "thinking", "thinking": block.text, "signature": block.signature}
            )
    return blocks


def build_messages(
    request: AgentRequest, transcript: Sequence[TranscriptItem]
) -> list[dict[str, Any]]:
    """The first user message and the node transcript as Messages API turns."""
    ids = wire_call_ids(transcript)
    messages: list[dict[str, Any]] = []
    _add(messages, "user", _user_blocks(*first_user_parts(request)))
    for item in resolved(transcript):
        if isinstance(item, AssistantItem):
            if item.content.strip():
                _add(messages, "assistant", [{"type": "text", "text": item.content}])
        elif isinstance(item, ReasoningItem):
            _add(messages, "assistant", _reasoning_blocks(item))
        elif isinstance(item, ToolCallItem):
            call = item.call
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.provider_call_id or call.id,
                "name": call.name,
                "input": call.arguments,
            }
            _add(messages, "assistant", [block])
        elif isinstance(item, ToolResultItem):
            result = item.result
            block = {
                "type": "tool_result",
                "tool_use_id": ids.get(result.tool_call_id, result.tool_call_id),
                "content": result.content,
                "is_error": result.is_error,
            }
            _add(messages, "user", [block])
        elif isinstance(item, UserItem):
            _add(messages, "user", _user_blocks(*split_attachments(item.content, item.attachments)))
    return messages


class AnthropicMessagesProvider:
    """A provider speaking Anthropic's Messages API (also Anthropic-compatible servers)."""

    wire = "anthropic_messages"

    def __init__(
        self,
        profile_id: str,
        profile: ProviderProfile,
        api_key: str | None,
        *,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self.profile_id = profile_id
        self.profile = profile
        self.label = profile.display_name or profile_id
        self._api_key = api_key
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key or "unused",
            base_url=(profile.base_url or DEFAULT_BASE_URL).rstrip("/"),
            max_retries=0,
            timeout=profile.request_timeout_secs,
            default_headers=_auth_headers(api_key),
        )

    def build_params(
        self, request: AgentRequest, transcript: Sequence[TranscriptItem], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The Messages request body (without `stream`) for this turn."""
        offered, _ = tools_and_cache_key(request, tools)
        thinking = claude_thinking(
            request.model, request.reasoning_effort, request.reasoning_budget_tokens
        )
        max_tokens = request.max_output_tokens or claude_output_limit(request.model)
        max_tokens = max(max_tokens, thinking.min_max_tokens)
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": max_tokens,
            "messages": build_messages(request, transcript),
        }
        system: list[dict[str, Any]] = [
            {"type": "text", "text": m} for m in request.system_messages if m.strip()
        ]
        if system:
            system[-1]["cache_control"] = dict(_EPHEMERAL)
            params["system"] = system
        wire_tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in offered
        ]
        if wire_tools:
            wire_tools[-1]["cache_control"] = dict(_EPHEMERAL)
            params["tools"] = wire_tools
            auto = request.tool_choice == "auto" or request.conversation_mode or thinking.active
            params["tool_choice"] = {"type": "auto" if auto else "any"}
        if thinking.thinking is not None:
            params["thinking"] = thinking.thinking
        if thinking.output_config is not None:
            params["output_config"] = thinking.output_config
        if self.profile.kind == "anthropic":
            params["cache_control"] = dict(_EPHEMERAL)
        return params

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: DeltaSink,
    ) -> ModelReply:
        """Stream one Messages turn, emitting deltas as they arrive."""
        params = self.build_params(request, transcript, tools)
        secrets = (self._api_key,)
        buffer = ToolCallBuffer()
        text_parts: list[str] = []
        thinking: dict[int, dict[str, str]] = {}
        model = request.model
        usage: dict[str, int] = {}
        stop_reason: str | None = None
        finished = False
        try:
            stream = await self._client.messages.create(**params, stream=True)
            async with stream:
                async for event in stream:
                    data = event.model_dump(mode="json")
                    kind = data.get("type")
                    if kind == "message_start":
                        message = data.get("message") or {}
                        model = message.get("model") or model
                        _merge_usage(usage, message.get("usage"))
                    elif kind == "content_block_start":
                        index = int(data.get("index", 0))
                        block = data.get("content_block") or {}
                        btype = block.get("type")
                        if btype == "tool_use":
                            buffer.start(
                                index, call_id=block.get("id", ""), name=block.get("name", "")
                            )
                        elif btype == "thinking":
                            thinking[index] = {"type": "text", "text": "", "signature": ""}
                            if block.get("thinking"):
                                thinking[index]["text"] += block["thinking"]
                                on_delta("thinking", block["thinking"])
                        elif btype == "redacted_thinking":
                            thinking[index] = {"type": "redacted", "text": block.get("data", "")}
                        elif btype == "text" and block.get("text"):
                            text_parts.append(block["text"])
                            on_delta("assistant", block["text"])
                    elif kind == "content_block_delta":
                        index = int(data.get("index", 0))
                        delta = data.get("delta") or {}
                        dtype = delta.get("type")
                        if dtype == "text_delta" and delta.get("text"):
                            text_parts.append(delta["text"])
                            on_delta("assistant", delta["text"])
                        elif dtype == "input_json_delta":
                            buffer.append(index, delta.get("partial_json") or "")
                        elif dtype == "thinking_delta" and delta.get("thinking"):
                            entry = thinking.setdefault(index, {"type": "text", "text": ""})
                            entry["text"] += delta["thinking"]
                            on_delta("thinking", delta["thinking"])
                        elif dtype == "signature_delta":
                            entry = thinking.setdefault(index, {"type": "text", "text": ""})
                            entry["signature"] = entry.get("signature", "") + (
                                delta.get("signature") or ""
                            )
                    elif kind == "message_delta":
                        stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
                        _merge_usage(usage, data.get("usage"))
                    elif kind == "message_stop":
                        finished = True
        except anthropic.APIStatusError as exc:
            raise self._status_failure(exc, secrets) from None
        except anthropic.APIConnectionError as exc:
            raise transport_error(self.label, exc) from None
        except TRANSPORT_EXCEPTIONS as exc:
            raise transport_error(self.label, exc) from None
        if stop_reason == "max_tokens":
            raise truncated(self.label, buffer.names())
        if not finished:
            raise stream_cut(self.label)
        if stop_reason == "model_context_window_exceeded":
            raise ProviderError.of(
                "failed",
                f"{self.label}: the conversation no longer fits the model's context window",
            )
        prompt = (
            usage.get("input_tokens", 0)
            + usage.get("cache_read_input_tokens", 0)
            + usage.get("cache_creation_input_tokens", 0)
        )
        completion = usage.get("output_tokens", 0)
        report = UsageReport(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cached_input_tokens=usage.get("cache_read_input_tokens", 0),
            cache_creation_input_tokens=usage.get("cache_creation_input_tokens", 0),
        )
        logger.debug(
            "anthropic turn finished: provider=%s model=%s stop=%s",
            self.profile_id,
            model,
            stop_reason,
        )
        return ModelReply(
            wire="anthropic_messages",
            model=model,
            text="".join(text_parts),
            reasoning=claude_reasoning(thinking),
            tool_calls=buffer.calls(),
            finish_reason=stop_reason,
            usage=report,
            max_context_tokens=max_context_tokens(model, self.profile),
            streamed=True,
        )

    def _status_failure(
        self, exc: anthropic.APIStatusError, secrets: tuple[str | None, ...]
    ) -> ProviderError:
        body = exc.body
        error = body.get("error") if isinstance(body, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        error_type = error.get("type", "") if isinstance(error, dict) else ""
        status = exc.response.status_code
        if status < 400:
            return stream_error(self.label, str(error_type), detail, secrets)
        body_text = json.dumps(body) if not isinstance(body, str) else body
        return status_error(
            self.label,
            status,
            headers=dict(exc.response.headers),
            body_text=body_text,
            detail=detail if isinstance(detail, str) else None,
            secrets=secrets,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._client.close()


def _merge_usage(usage: dict[str, int], raw: Any) -> None:
    if not isinstance(raw, dict):
        return
    for key in (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ):
        value = raw.get(key)
        if isinstance(value, int):
            usage[key] = value


__all__ = ["ANTHROPIC_VERSION", "AnthropicMessagesProvider", "build_messages"]
