"""Amazon Bedrock Converse over boto3 `converse_stream`, run in a thread pool (boto3 blocks).

Credentials come from the AWS chain (profile, environment, instance role) or, when the profile
sets `aws_credential_command`, from that command's `credential_process`-style JSON output.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import logging
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EventStreamError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)

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
    short_detail,
    status_error,
    stream_cut,
    transport_error,
    truncated,
)
from openflow.activities.providers.reasoning import (
    claude_output_limit,
    claude_thinking,
    thinking_family,
)
from openflow.engine.request import (
    AgentRequest,
    ModelReply,
    ProviderErrorKind,
    ToolSpec,
    UsageReport,
)
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

DEFAULT_REGION = "us-east-1"
# Model id fragments that accept cache points (system and messages; tools only for Claude).
CACHE_POINT_MODELS = (
    "claude-3-7-sonnet",
    "claude-3-5-haiku",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4-5",
    "nova-micro",
    "nova-lite",
    "nova-pro",
    "nova-premier",
)
_TRANSIENT_STREAM_CODES = frozenset(
    {
        "throttlingexception",
        "servicequotaexceededexception",
        "serviceunavailableexception",
        "internalserverexception",
        "modelstreamerrorexception",
        "modeltimeoutexception",
        "modelnotreadyexception",
    }
)
_CACHE_POINT = {"cachePoint": {"type": "default"}}


def supports_cache_points(model: str) -> bool:
    """Whether Bedrock accepts prompt cache points for this model id."""
    lowered = model.lower()
    return any(fragment in lowered for fragment in CACHE_POINT_MODELS)


def _add(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": list(blocks)})


def _user_blocks(text: str, files: list[FilePart]) -> list[dict[str, Any]]:
    """A user turn's text, then its images and PDFs as Converse image and document blocks."""
    blocks: list[dict[str, Any]] = [{"text": text}]
    for i, part in enumerate(files):
        data = base64.b64decode(part.data)
        fmt = part.media_type.split("/", 1)[1]
        if part.kind == "image":
            blocks.append({"image": {"format": fmt, "source": {"bytes": data}}})
        else:
            name = _document_name(part.name, i)
            blocks.append({"document": {"format": fmt, "name": name, "source": {"bytes": data}}})
    return blocks


def _document_name(name: str, index: int) -> str:
    """A document name Converse accepts: letters, digits, single spaces, '-', '()' and '[]'."""
    kept = re.sub(r"[^A-Za-z0-9\-\(\)\[\] ]", " ", name.rsplit(".", 1)[0])
    kept = re.sub(r"\s+", " ", kept).strip()[:200]
    return kept or f"document {index + 1}"


def _reasoning_blocks(item: ReasoningItem) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in item.blocks:
        if block.type == "redacted" and block.text:
            data = base64.b64decode(block.text.encode("ascii"))
            blocks.append({"reasoningContent": {"redactedContent": data}})
        elif block.type in ("text", "summary") and block.signature and item.id is None:
            blocks.append(
                {
                    "reasoningContent": {
                        "reasoningText": {"text": block.text, "signature": block.signature}
                    }
                }
            )
    return blocks


def build_messages(
    request: AgentRequest, transcript: Sequence[TranscriptItem]
) -> list[dict[str, Any]]:
    """The first user message and the node transcript as Converse messages."""
    ids = wire_call_ids(transcript)
    messages: list[dict[str, Any]] = []
    _add(messages, "user", _user_blocks(*first_user_parts(request)))
    for item in resolved(transcript):
        if isinstance(item, AssistantItem):
            if item.content.strip():
                _add(messages, "assistant", [{"text": item.content}])
        elif isinstance(item, ReasoningItem):
            _add(messages, "assistant", _reasoning_blocks(item))
        elif isinstance(item, ToolCallItem):
            call = item.call
            _add(
                messages,
                "assistant",
                [
                    {
                        "toolUse": {
                            "toolUseId": call.provider_call_id or call.id,
                            "name": call.name,
                            "input": call.arguments,
                        }
                    }
                ],
            )
        elif isinstance(item, ToolResultItem):
            result = item.result
            _add(
                messages,
                "user",
                [
                    {
                        "toolResult": {
                            "toolUseId": ids.get(result.tool_call_id, result.tool_call_id),
                            "content": [{"text": result.content or "(no output)"}],
                            "status": "error" if result.is_error else "success",
                        }
                    }
                ],
            )
        elif isinstance(item, UserItem):
            _add(messages, "user", _user_blocks(*split_attachments(item.content, item.attachments)))
    return messages


#: Streams read at once per worker: one thread each, so hundreds of calls can be in flight (the
#: worker's model pool) without taking the event loop's default executor, which store reads and
#: writes share; boto3 keeps as many connections to reuse.
STREAMS = 512
_stream_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _streams() -> concurrent.futures.ThreadPoolExecutor:
    global _stream_pool
    if _stream_pool is None:
        _stream_pool = concurrent.futures.ThreadPoolExecutor(
            STREAMS, thread_name_prefix="openflow-bedrock"
        )
    return _stream_pool


class BedrockConverseProvider:
    """A provider speaking Bedrock's ConverseStream through boto3."""

    wire = "bedrock_converse"

    def __init__(
        self,
        profile_id: str,
        profile: ProviderProfile,
        *,
        client: Any | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.profile_id = profile_id
        self.profile = profile
        self.label = profile.display_name or profile_id
        self._env = dict(os.environ if env is None else env)
        self._client = client
        self._client_lock = threading.Lock()

    @property
    def region(self) -> str:
        """The AWS region: profile `aws_region`, else `AWS_REGION`, else us-east-1."""
        return (
            self.profile.aws_region
            or self._env.get("AWS_REGION")
            or self._env.get("AWS_DEFAULT_REGION")
            or DEFAULT_REGION
        )

    def _session(self) -> boto3.Session:
        profile_name = self.profile.aws_profile or self._env.get("AWS_PROFILE") or None
        if self.profile.aws_credential_command:
            creds = self._run_credential_command(self.profile.aws_credential_command)
            return boto3.Session(
                aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds.get("SessionToken"),
                region_name=self.region,
            )
        return boto3.Session(profile_name=profile_name, region_name=self.region)

    def _run_credential_command(self, command: str) -> dict[str, str]:
        try:
            done = subprocess.run(
                shlex.split(command), capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProviderError.of(
                "permanent",
                f"{self.label}: aws_credential_command could not run ({type(exc).__name__}); "
                "check the command in the provider profile",
            ) from None
        if done.returncode != 0:
            raise ProviderError.of(
                "permanent",
                f"{self.label}: aws_credential_command exited with status {done.returncode}; "
                "run it by hand to see why",
            )
        try:
            creds = json.loads(done.stdout)
        except json.JSONDecodeError:
            creds = None
        if not isinstance(creds, dict) or not creds.get("AccessKeyId"):
            raise ProviderError.of(
                "permanent",
                f"{self.label}: aws_credential_command must print credential_process JSON "
                "with AccessKeyId and SecretAccessKey",
            )
        return {str(k): str(v) for k, v in creds.items() if v is not None}

    def _get_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                config = Config(
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    max_pool_connections=STREAMS,
                    read_timeout=self.profile.request_timeout_secs,
                    connect_timeout=10,
                    user_agent_extra="openflow",
                )
                self._client = self._session().client(
                    "bedrock-runtime",
                    region_name=self.region,
                    endpoint_url=self.profile.base_url or None,
                    config=config,
                )
            return self._client

    def build_params(
        self, request: AgentRequest, transcript: Sequence[TranscriptItem], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The ConverseStream arguments for this turn."""
        offered, _ = tools_and_cache_key(request, tools)
        model = request.model
        cacheable = supports_cache_points(model)
        is_claude = thinking_family(model) != "none" or "claude" in model.lower()
        thinking = claude_thinking(model, request.reasoning_effort, request.reasoning_budget_tokens)
        params: dict[str, Any] = {
            "modelId": model,
            "messages": build_messages(request, transcript),
        }
        system: list[dict[str, Any]] = [{"text": m} for m in request.system_messages if m.strip()]
        if system:
            if cacheable:
                system.append(dict(_CACHE_POINT))
            params["system"] = system
        if offered:
            wire_tools: list[dict[str, Any]] = [
                {
                    "toolSpec": {
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": {"json": t.parameters},
                    }
                }
                for t in offered
            ]
            if cacheable and is_claude:
                wire_tools.append(dict(_CACHE_POINT))
            auto = request.tool_choice == "auto" or request.conversation_mode or thinking.active
            params["toolConfig"] = {
                "tools": wire_tools,
                "toolChoice": {"auto": {}} if auto else {"any": {}},
            }
        max_tokens = request.max_output_tokens
        if max_tokens is None and is_claude:
            max_tokens = claude_output_limit(model)
        if max_tokens is not None or thinking.min_max_tokens:
            params["inferenceConfig"] = {"maxTokens": max(max_tokens or 0, thinking.min_max_tokens)}
        extra: dict[str, Any] = {}
        if thinking.thinking is not None:
            extra["thinking"] = thinking.thinking
        if thinking.output_config is not None:
            extra["output_config"] = thinking.output_config
        if extra:
            params["additionalModelRequestFields"] = extra
        return params

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: DeltaSink,
    ) -> ModelReply:
        """Stream one Converse turn from a worker thread, emitting deltas as they arrive."""
        params = self.build_params(request, transcript, tools)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        holder: dict[str, Any] = {}

        def post(kind: str, payload: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, payload))
            except RuntimeError:  # the event loop closed while the thread was streaming
                stop.set()

        def pump() -> None:
            try:
                response = self._get_client().converse_stream(**params)
                stream = response["stream"]
                holder["stream"] = stream
                for event in stream:
                    if stop.is_set():
                        break
                    post("event", event)
                post("end", None)
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop to classify
                post("error", exc)

        worker = loop.run_in_executor(_streams(), pump)
        buffer = ToolCallBuffer()
        text_parts: list[str] = []
        thinking: dict[int, dict[str, str]] = {}
        stop_reason: str | None = None
        usage: dict[str, Any] = {}
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "end":
                    break
                if kind == "error":
                    raise self._failure(payload) from None
                event: dict[str, Any] = payload
                if "contentBlockStart" in event:
                    start_event = event["contentBlockStart"]
                    tool_use = (start_event.get("start") or {}).get("toolUse")
                    if tool_use:
                        buffer.start(
                            start_event.get("contentBlockIndex", 0),
                            call_id=tool_use.get("toolUseId", ""),
                            name=tool_use.get("name", ""),
                        )
                elif "contentBlockDelta" in event:
                    delta_event = event["contentBlockDelta"]
                    index = delta_event.get("contentBlockIndex", 0)
                    delta = delta_event.get("delta") or {}
                    if delta.get("text"):
                        text_parts.append(delta["text"])
                        on_delta("assistant", delta["text"])
                    if "toolUse" in delta:
                        buffer.append(index, (delta["toolUse"] or {}).get("input") or "")
                    reasoning = delta.get("reasoningContent") or {}
                    if reasoning.get("text"):
                        entry = thinking.setdefault(index, {"type": "text", "text": ""})
                        entry["text"] += reasoning["text"]
                        on_delta("thinking", reasoning["text"])
                    if reasoning.get("signature"):
                        entry = thinking.setdefault(index, {"type": "text", "text": ""})
                        entry["signature"] = entry.get("signature", "") + reasoning["signature"]
                    if reasoning.get("redactedContent"):
                        encoded = base64.b64encode(reasoning["redactedContent"]).decode("ascii")
                        thinking[index] = {"type": "redacted", "text": encoded}
                elif "messageStop" in event:
                    stop_reason = event["messageStop"].get("stopReason") or "end_turn"
                elif "metadata" in event:
                    usage = (event["metadata"] or {}).get("usage") or {}
        finally:
            stop.set()
            stream = holder.get("stream")
            if stream is not None and not worker.done():
                await asyncio.shield(loop.run_in_executor(None, _close_quietly, stream))
        if stop_reason == "max_tokens":
            raise truncated(self.label, buffer.names())
        if stop_reason is None:
            raise stream_cut(self.label)
        if stop_reason in ("guardrail_intervened", "content_filtered"):
            raise ProviderError.of("failed", f"{self.label} stopped the reply ({stop_reason})")
        if stop_reason == "model_context_window_exceeded":
            raise ProviderError.of(
                "failed",
                f"{self.label}: the conversation no longer fits the model's context window",
            )
        model = request.model
        logger.debug(
            "bedrock turn finished: provider=%s model=%s stop=%s",
            self.profile_id,
            model,
            stop_reason,
        )
        return ModelReply(
            wire="bedrock_converse",
            model=model,
            text="".join(text_parts),
            reasoning=claude_reasoning(thinking),
            tool_calls=buffer.calls(),
            finish_reason=stop_reason,
            usage=_usage(usage),
            max_context_tokens=max_context_tokens(model, self.profile),
            streamed=True,
        )

    def _failure(self, exc: BaseException) -> BaseException:
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, EventStreamError):
            error = exc.response.get("Error") or {}
            code = str(error.get("Code") or "")
            detail = short_detail(str(error.get("Message") or ""))
            kind: ProviderErrorKind = (
                "transient" if code.lower() in _TRANSIENT_STREAM_CODES else "failed"
            )
            message = f"{self.label} stream reported {code or 'an error'}"
            return ProviderError.of(kind, f"{message}: {detail}" if detail else message)
        if isinstance(exc, ClientError):
            error = exc.response.get("Error") or {}
            meta = exc.response.get("ResponseMetadata") or {}
            status = int(meta.get("HTTPStatusCode") or 0)
            code = str(error.get("Code") or "")
            detail = str(error.get("Message") or "")
            if not status:
                status = 429 if "throttl" in code.lower() else 500
            return status_error(
                self.label,
                status,
                headers=meta.get("HTTPHeaders") or {},
                body_text=f"{code} {detail}",
                detail=f"{code}: {detail}" if code else detail,
            )
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return ProviderError.of(
                "permanent",
                f"{self.label}: AWS credentials not found; set AWS_PROFILE or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or aws_profile in the provider profile",
            )
        if isinstance(exc, NoRegionError):
            return ProviderError.of(
                "permanent", f"{self.label}: AWS region missing; set AWS_REGION or aws_region"
            )
        if isinstance(exc, ParamValidationError):
            return ProviderError.of("failed", f"{self.label} rejected the request parameters")
        if isinstance(exc, TRANSPORT_EXCEPTIONS):
            return transport_error(self.label, exc)
        if isinstance(exc, BotoCoreError):
            return ProviderError.of(
                "transient", f"{self.label} client error ({type(exc).__name__}); it will be retried"
            )
        return exc

    async def aclose(self) -> None:
        """Close the boto3 client's connections."""
        client = self._client
        if client is not None:
            await asyncio.get_running_loop().run_in_executor(None, client.close)


def _close_quietly(stream: Any) -> None:
    try:
        stream.close()
    except Exception:  # noqa: BLE001 - closing a dead stream may fail in many ways
        logger.debug("closing a bedrock stream failed", exc_info=True)


def _usage(raw: dict[str, Any]) -> UsageReport:
    fresh = int(raw.get("inputTokens") or 0)
    read = int(raw.get("cacheReadInputTokens") or 0)
    written = int(raw.get("cacheWriteInputTokens") or 0)
    completion = int(raw.get("outputTokens") or 0)
    prompt = fresh + read + written
    return UsageReport(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=int(raw.get("totalTokens") or prompt + completion),
        cached_input_tokens=read,
        cache_creation_input_tokens=written,
    )


__all__ = [
    "CACHE_POINT_MODELS",
    "BedrockConverseProvider",
    "build_messages",
    "supports_cache_points",
]
