"""Chat Completions over the `openai` SDK for every OpenAI-compatible server, streamed."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import openai

from openflow.activities.providers.common import (
    DeltaSink,
    FilePart,
    ToolCallBuffer,
    first_user_parts,
    max_context_tokens,
    resolved,
    split_attachments,
    system_text,
    tools_and_cache_key,
    wire_call_ids,
)
from openflow.activities.providers.errors import (
    TRANSPORT_EXCEPTIONS,
    ProviderError,
    stream_cut,
    transport_error,
    truncated,
)
from openflow.activities.providers.openai_responses import tool_output
from openflow.activities.providers.openai_sdk import endpoint_base, make_client, sdk_failure
from openflow.engine.request import AgentRequest, ModelReply, ToolSpec, UsageReport
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningBlock,
    ToolCallItem,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)
from openflow.settings import ProviderProfile

logger = logging.getLogger(__name__)

NO_PROMPT_CACHE_KEY = frozenset({"ollama", "lmstudio"})
DEFAULT_BASE_URL = "https://api.openai.com"


def _user_content(text: str, files: list[FilePart]) -> str | list[dict[str, Any]]:
    """A user message's content: plain text, or text, image_url and file parts with files."""
    if not files:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for part in files:
        if part.kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": part.data_url}})
        else:
            parts.append(
                {"type": "file", "file": {"filename": part.name, "file_data": part.data_url}}
            )
    return parts


def build_messages(
    request: AgentRequest, transcript: Sequence[TranscriptItem]
) -> list[dict[str, Any]]:
    """System prompt, first user message and the node transcript as chat messages."""
    ids = wire_call_ids(transcript)
    messages: list[dict[str, Any]] = []
    system = system_text(request)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": _user_content(*first_user_parts(request))})
    for item in resolved(transcript):
        if isinstance(item, AssistantItem):
            if item.content.strip():
                messages.append({"role": "assistant", "content": item.content})
        elif isinstance(item, ToolCallItem):
            call = item.call
            wire_call = {
                "id": call.provider_call_id or call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            last = messages[-1]
            if last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(wire_call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [wire_call]})
        elif isinstance(item, ToolResultItem):
            result = item.result
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": ids.get(result.tool_call_id, result.tool_call_id),
                    "content": tool_output(result.content, result.is_error),
                }
            )
        elif isinstance(item, UserItem):
            content = _user_content(*split_attachments(item.content, item.attachments))
            messages.append({"role": "user", "content": content})
    return messages


class ChatCompletionsProvider:
    """A provider speaking Chat Completions (OpenRouter, Groq, Ollama, ... any compatible server)."""

    wire = "chat_completions"

    def __init__(
        self,
        profile_id: str,
        profile: ProviderProfile,
        api_key: str | None,
        *,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        self.profile_id = profile_id
        self.profile = profile
        self.label = profile.display_name or profile_id
        self._api_key = api_key
        self._client = client or make_client(
            profile,
            api_key,
            base_url=endpoint_base(
                profile.base_url or DEFAULT_BASE_URL,
                profile.chat_completions_path,
                "chat/completions",
            ),
        )

    def build_params(
        self, request: AgentRequest, transcript: Sequence[TranscriptItem], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The Chat Completions request body (without `stream`) for this turn."""
        offered, cache_key = tools_and_cache_key(request, tools)
        params: dict[str, Any] = {
            "model": request.model,
            "messages": build_messages(request, transcript),
            "stream_options": {"include_usage": True},
        }
        if offered:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in offered
            ]
            auto = request.tool_choice == "auto" or request.conversation_mode
            params["tool_choice"] = "auto" if auto else "required"
        if self.profile_id not in NO_PROMPT_CACHE_KEY:
            params["prompt_cache_key"] = cache_key
        if request.max_output_tokens:
            key = "max_completion_tokens" if self.profile_id == "openai" else "max_tokens"
            params[key] = request.max_output_tokens
        effort = (request.reasoning_effort or "").strip().lower()
        if effort and effort != "adaptive":
            params["reasoning_effort"] = effort
            if request.reasoning_budget_tokens:
                params["extra_body"] = {
                    "reasoning_budget_tokens": request.reasoning_budget_tokens,
                    "reasoning": {"max_tokens": request.reasoning_budget_tokens},
                }
        if request.fast_mode and self.profile.fast_mode_available:
            params["service_tier"] = "priority"
        return params

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: DeltaSink,
    ) -> ModelReply:
        """Stream one chat completion, emitting deltas as they arrive."""
        params = self.build_params(request, transcript, tools)
        secrets = (self._api_key,)
        buffer = ToolCallBuffer()
        text_parts: list[str] = []
        thinking_parts: list[str] = []
        model = request.model
        finish_reason: str | None = None
        usage: dict[str, Any] | None = None
        try:
            stream = await self._client.chat.completions.create(**params, stream=True)
            async with stream:
                async for chunk in stream:
                    data = chunk.model_dump(mode="json")
                    model = data.get("model") or model
                    if isinstance(data.get("usage"), dict):
                        usage = data["usage"]
                    for choice in data.get("choices") or []:
                        delta = choice.get("delta") or {}
                        thought = delta.get("reasoning_content") or delta.get("reasoning")
                        if isinstance(thought, str) and thought:
                            thinking_parts.append(thought)
                            on_delta("thinking", thought)
                        if delta.get("content"):
                            text_parts.append(delta["content"])
                            on_delta("assistant", delta["content"])
                        for call in delta.get("tool_calls") or []:
                            index = call.get("index", 0)
                            function = call.get("function") or {}
                            buffer.start(
                                index, call_id=call.get("id") or "", name=function.get("name") or ""
                            )
                            if function.get("arguments"):
                                buffer.append(index, function["arguments"])
                        finish_reason = choice.get("finish_reason") or finish_reason
        except openai.OpenAIError as exc:
            raise sdk_failure(self.label, exc, secrets) from None
        except TRANSPORT_EXCEPTIONS as exc:
            raise transport_error(self.label, exc) from None
        if finish_reason == "length":
            raise truncated(self.label, buffer.names())
        if finish_reason is None:
            raise stream_cut(self.label)
        if finish_reason == "content_filter":
            raise ProviderError.of(
                "failed", f"{self.label} stopped the reply with its content filter"
            )
        logger.debug(
            "chat turn finished: provider=%s model=%s finish=%s",
            self.profile_id,
            model,
            finish_reason,
        )
        reasoning = (
            (ReasoningBlock(type="text", text="".join(thinking_parts)),) if thinking_parts else ()
        )
        return ModelReply(
            wire="chat_completions",
            model=model,
            text="".join(text_parts),
            reasoning=reasoning,
            tool_calls=buffer.calls(),
            finish_reason=finish_reason,
            usage=_usage(usage),
            max_context_tokens=max_context_tokens(model, self.profile),
            streamed=True,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._client.close()


def _usage(raw: dict[str, Any] | None) -> UsageReport:
    if not raw:
        return UsageReport()
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    details = raw.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0)
    return UsageReport(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
        cached_input_tokens=cached,
    )


__all__ = ["ChatCompletionsProvider", "NO_PROMPT_CACHE_KEY", "build_messages"]
