"""OpenAI Responses over the `openai` SDK, streamed, with `prompt_cache_key` and reasoning.

Replayed reasoning: an `encrypted` ReasoningBlock holds the item's `encrypted_content` in `text`
and the reasoning item id in `signature`, which is what a stateless (`store: false`) follow-up
request needs to continue the model's chain of thought.
"""

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
    stream_error,
    transport_error,
    truncated,
)
from openflow.activities.providers.openai_sdk import endpoint_base, make_client, sdk_failure
from openflow.engine.request import AgentRequest, ModelReply, ToolSpec, UsageReport
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningBlock,
    ReasoningItem,
    ToolCallItem,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)
from openflow.settings import ProviderProfile

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com"
OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def tool_output(content: str, is_error: bool) -> str:
    """Tool result text for wires without an error flag."""
    return f"Tool error: {content}" if is_error else content


def _reasoning_inputs(item: ReasoningItem) -> list[dict[str, Any]]:
    """One replayable reasoning item per encrypted block; other blocks are display only."""
    return [
        {
            "type": "reasoning",
            "id": block.signature,
            "summary": [],
            "encrypted_content": block.text,
        }
        for block in item.blocks
        if block.type == "encrypted" and block.signature
    ]


def _user_content(text: str, files: list[FilePart]) -> str | list[dict[str, Any]]:
    """A user message's content: plain text, or input_text, input_image and input_file parts."""
    if not files:
        return text
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}]
    for part in files:
        if part.kind == "image":
            parts.append({"type": "input_image", "image_url": part.data_url, "detail": "auto"})
        else:
            parts.append({"type": "input_file", "filename": part.name, "file_data": part.data_url})
    return parts


def build_input(
    request: AgentRequest, transcript: Sequence[TranscriptItem]
) -> list[dict[str, Any]]:
    """The first user message and the node transcript as Responses input items."""
    ids = wire_call_ids(transcript)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": _user_content(*first_user_parts(request))}
    ]
    for item in resolved(transcript):
        if isinstance(item, AssistantItem):
            if item.content.strip():
                items.append({"role": "assistant", "content": item.content})
        elif isinstance(item, ReasoningItem):
            items.extend(_reasoning_inputs(item))
        elif isinstance(item, ToolCallItem):
            call = item.call
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.provider_call_id or call.id,
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                }
            )
        elif isinstance(item, ToolResultItem):
            result = item.result
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": ids.get(result.tool_call_id, result.tool_call_id),
                    "output": tool_output(result.content, result.is_error),
                }
            )
        elif isinstance(item, UserItem):
            content = _user_content(*split_attachments(item.content, item.attachments))
            items.append({"role": "user", "content": content})
    return items


class OpenAIResponsesProvider:
    """A provider speaking OpenAI's Responses API."""

    wire = "responses"

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
                profile.base_url or DEFAULT_BASE_URL, profile.responses_path, "responses"
            ),
        )

    def build_params(
        self, request: AgentRequest, transcript: Sequence[TranscriptItem], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The Responses request body (without `stream`) for this turn."""
        offered, cache_key = tools_and_cache_key(request, tools)
        params: dict[str, Any] = {
            "model": request.model,
            "input": build_input(request, transcript),
            "store": False,
            "prompt_cache_key": cache_key,
        }
        instructions = system_text(request)
        if instructions:
            params["instructions"] = instructions
        if offered:
            params["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": False,
                }
                for t in offered
            ]
            auto = request.tool_choice == "auto" or request.conversation_mode
            params["tool_choice"] = "auto" if auto else "required"
        if request.max_output_tokens:
            params["max_output_tokens"] = request.max_output_tokens
        effort = (request.reasoning_effort or "").strip().lower()
        if effort in OPENAI_EFFORTS:
            params["reasoning"] = {"effort": effort, "summary": "auto"}
            params["include"] = ["reasoning.encrypted_content"]
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
        """Stream one Responses turn, emitting deltas as they arrive."""
        params = self.build_params(request, transcript, tools)
        secrets = (self._api_key,)
        buffer = ToolCallBuffer()
        text_parts: list[str] = []
        reasoning: list[ReasoningBlock] = []
        model = request.model
        final: dict[str, Any] | None = None
        try:
            stream = await self._client.responses.create(**params, stream=True)
            async with stream:
                async for event in stream:
                    data = event.model_dump(mode="json")
                    kind = data.get("type")
                    if kind in ("response.created", "response.in_progress"):
                        model = (data.get("response") or {}).get("model") or model
                    elif kind == "response.output_item.added":
                        item = data.get("item") or {}
                        if item.get("type") == "function_call":
                            buffer.start(
                                item.get("id") or item.get("call_id"),
                                call_id=item.get("call_id", ""),
                                name=item.get("name", ""),
                            )
                    elif kind == "response.function_call_arguments.delta":
                        buffer.append(data.get("item_id"), data.get("delta") or "")
                    elif kind == "response.function_call_arguments.done":
                        buffer.finish(data.get("item_id"), data.get("arguments") or "")
                    elif kind == "response.output_text.delta":
                        if data.get("delta"):
                            text_parts.append(data["delta"])
                            on_delta("assistant", data["delta"])
                    elif kind in (
                        "response.reasoning_summary_text.delta",
                        "response.reasoning_text.delta",
                    ):
                        if data.get("delta"):
                            on_delta("thinking", data["delta"])
                    elif kind == "response.output_item.done":
                        item = data.get("item") or {}
                        if item.get("type") == "reasoning":
                            reasoning.extend(_reasoning_blocks(item))
                        elif item.get("type") == "function_call":
                            key = item.get("id") or item.get("call_id")
                            buffer.start(
                                key, call_id=item.get("call_id", ""), name=item.get("name", "")
                            )
                            buffer.finish(key, item.get("arguments") or "")
                    elif kind in ("response.completed", "response.incomplete"):
                        final = data.get("response") or {}
                    elif kind == "response.failed":
                        error = (data.get("response") or {}).get("error") or {}
                        raise stream_error(
                            self.label, str(error.get("code") or ""), error.get("message"), secrets
                        )
                    elif kind == "error":
                        raise stream_error(
                            self.label, str(data.get("code") or ""), data.get("message"), secrets
                        )
        except openai.OpenAIError as exc:
            raise sdk_failure(self.label, exc, secrets) from None
        except TRANSPORT_EXCEPTIONS as exc:
            raise transport_error(self.label, exc) from None
        if final is None:
            raise stream_cut(self.label)
        status = final.get("status") or "completed"
        if status == "incomplete":
            reason = (final.get("incomplete_details") or {}).get("reason")
            if reason == "max_output_tokens":
                raise truncated(self.label, buffer.names())
            raise ProviderError.of(
                "failed", f"{self.label} response stopped early ({reason or 'no reason given'})"
            )
        model = final.get("model") or model
        logger.debug("responses turn finished: provider=%s model=%s", self.profile_id, model)
        return ModelReply(
            wire="responses",
            model=model,
            text="".join(text_parts),
            reasoning=tuple(reasoning),
            tool_calls=buffer.calls(),
            finish_reason=status,
            usage=_usage(final.get("usage")),
            max_context_tokens=max_context_tokens(model, self.profile),
            streamed=True,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._client.close()


def _reasoning_blocks(item: dict[str, Any]) -> list[ReasoningBlock]:
    blocks = [
        ReasoningBlock(type="summary", text=part.get("text", ""))
        for part in item.get("summary") or []
        if isinstance(part, dict) and part.get("text")
    ]
    for part in item.get("content") or []:
        if isinstance(part, dict) and part.get("text"):
            blocks.append(ReasoningBlock(type="text", text=part["text"]))
    if item.get("encrypted_content"):
        blocks.append(
            ReasoningBlock(
                type="encrypted", text=item["encrypted_content"], signature=item.get("id")
            )
        )
    return blocks


def _usage(raw: Any) -> UsageReport:
    if not isinstance(raw, dict):
        return UsageReport()
    prompt = int(raw.get("input_tokens") or 0)
    completion = int(raw.get("output_tokens") or 0)
    cached = int((raw.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return UsageReport(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
        cached_input_tokens=cached,
    )


__all__ = ["OpenAIResponsesProvider", "build_input", "tool_output"]
