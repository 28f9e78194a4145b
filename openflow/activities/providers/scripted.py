"""The `scripted` provider: model turns read from a script (CONTRACT section 4).

Each node's turns are taken in call order; the index is the engine's count of the node's
settled model calls, so a retried activity or a resumed run takes the same turn again instead
of skipping one.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openflow.activities.providers.errors import ProviderError
from openflow.engine.policy import HARNESS_ASK_QUESTION, HARNESS_REQUEST_INPUT, HARNESS_SUBMIT
from openflow.engine.request import AgentRequest, ModelReply, RawToolCall, ToolSpec, UsageReport
from openflow.engine.review import REVIEW_NODE
from openflow.engine.transcript import (
    AssistantItem,
    ToolCallItem,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)

Script = Mapping[str, Sequence[Mapping[str, Any]]]
_ERROR_KINDS = {"transient", "permanent", "failed"}


class ScriptError(ValueError):
    """A script file that cannot be used; the message says what to fix."""


def load_script(
    inline: Script | None = None, path: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The script of a profile: inline, else `script_path`, else `$OPENFLOW_SCRIPT`."""
    if inline is not None:
        return {str(k): [dict(t) for t in v] for k, v in inline.items()}
    source = path or (env if env is not None else os.environ).get("OPENFLOW_SCRIPT")
    if not source:
        return {}
    try:
        data = json.loads(Path(source).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ScriptError(f"script file {source!r} does not exist") from exc
    except ValueError as exc:
        raise ScriptError(f"script file {source!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ScriptError(f"script file {source!r} must map node ids to lists of turns")
    return {str(k): [dict(t) for t in v] for k, v in data.items()}


def _summary_of(output: Any) -> str:
    if isinstance(output, dict) and isinstance(output.get("summary"), str):
        return str(output["summary"])
    return json.dumps(output, sort_keys=True, separators=(",", ":"))


def echo_summary(request: AgentRequest) -> str:
    """The entrypoint text, or the upstream summaries joined in node-id order."""
    data = request.input or {}
    upstream = data.get("upstream") or []
    if upstream:
        entries = sorted(upstream, key=lambda e: str(e.get("node_id", "")))
        return "\n".join(_summary_of(e.get("output")) for e in entries)
    entry = data.get("entrypoint") or {}
    return str(entry.get("text", ""))


def _chars(item: TranscriptItem) -> int:
    """About how much text an item puts before the model (for the scripted usage estimate)."""
    if isinstance(item, AssistantItem | UserItem):
        return len(item.content) + 20
    if isinstance(item, ToolResultItem):
        return len(item.result.content) + 40
    if isinstance(item, ToolCallItem):
        return len(item.call.name) + 40 + 8 * len(item.call.arguments)
    return 80


class ScriptedProvider:
    """A provider whose answers come from a script instead of a model."""

    def __init__(self, script: Script, exhausted: str | None = None) -> None:
        self._script = script
        self._exhausted = exhausted

    def turn_for(self, request: AgentRequest) -> Mapping[str, Any] | None:
        turns = self._script.get(request.node_id) or []
        if request.turn_index < len(turns):
            return turns[request.turn_index]
        if self._exhausted == "echo":
            return {"echo": True}
        return None

    async def complete(
        self,
        request: AgentRequest,
        transcript: Sequence[TranscriptItem],
        tools: Sequence[ToolSpec],
        on_delta: Callable[[str, str], None],
    ) -> ModelReply:
        turn = self.turn_for(request)
        if turn is None:
            raise ProviderError.of("failed", "scripted model exhausted")
        delay = turn.get("delay_ms")
        if isinstance(delay, int | float) and delay > 0:
            await asyncio.sleep(delay / 1000)
        reply = self._reply(request, turn)
        if turn.get("stream") and reply.text:
            for start in range(0, len(reply.text), 16):
                on_delta("assistant", reply.text[start : start + 16])
            reply = reply.model_copy(update={"streamed": True})
        words = sum(_chars(i) for i in transcript) // 4
        usage = UsageReport(
            prompt_tokens=words + 100,
            completion_tokens=len(reply.text) // 4 + 10,
            total_tokens=words + 110 + len(reply.text) // 4,
        )
        return reply.model_copy(update={"usage": usage})

    def _call(
        self, request: AgentRequest, name: str, args: dict[str, Any], i: int = 0
    ) -> RawToolCall:
        call_id = f"call-{request.node_id}-{request.turn_index + 1}-{i + 1}"
        return RawToolCall(id=call_id, name=name, arguments=args, arguments_raw=json.dumps(args))

    def _reply(self, request: AgentRequest, turn: Mapping[str, Any]) -> ModelReply:
        model = request.model
        if "error" in turn:
            kind = str(turn["error"])
            if kind not in _ERROR_KINDS:
                raise ProviderError.of("failed", f"script turn has unknown error kind {kind!r}")
            retry_after = turn.get("retry_after_ms")
            raise ProviderError.of(
                kind,  # type: ignore[arg-type]
                str(turn.get("message", f"scripted {kind} error")),
                retry_after_ms=int(retry_after) if isinstance(retry_after, int | float) else None,
            )
        if "submit" in turn:
            args = {"output": turn["submit"], "assistant_message": str(turn.get("say", ""))}
            return ModelReply(
                wire="scripted",
                model=model,
                tool_calls=(self._call(request, HARNESS_SUBMIT, args),),
            )
        if "submit_raw" in turn:
            raw = str(turn["submit_raw"])
            call = RawToolCall(
                id=f"call-{request.node_id}-{request.turn_index + 1}-1",
                name=HARNESS_SUBMIT,
                arguments=None,
                arguments_raw=raw,
            )
            return ModelReply(wire="scripted", model=model, tool_calls=(call,))
        if "tools" in turn:
            calls = []
            for i, spec in enumerate(turn["tools"]):
                call = self._call(request, str(spec["name"]), dict(spec.get("args") or {}), i)
                if spec.get("id"):
                    call = call.model_copy(update={"id": str(spec["id"])})
                calls.append(call)
            return ModelReply(
                wire="scripted", model=model, text=str(turn.get("say", "")), tool_calls=tuple(calls)
            )
        if "ask" in turn:
            args = {"assistant_message": str(turn["ask"])}
            return ModelReply(
                wire="scripted",
                model=model,
                tool_calls=(self._call(request, HARNESS_REQUEST_INPUT, args),),
            )
        if "question" in turn:
            return ModelReply(
                wire="scripted",
                model=model,
                tool_calls=(self._call(request, HARNESS_ASK_QUESTION, dict(turn["question"])),),
            )
        if "message" in turn:
            return ModelReply(wire="scripted", model=model, text=str(turn["message"]))
        if turn.get("echo"):
            # The post-run review echoes with no suggestions: there is nothing to advise.
            output: dict[str, Any] = (
                {"suggestions": []}
                if request.node_id == REVIEW_NODE
                else {"summary": echo_summary(request)}
            )
            args = {"output": output, "assistant_message": ""}
            return ModelReply(
                wire="scripted",
                model=model,
                tool_calls=(self._call(request, HARNESS_SUBMIT, args),),
            )
        raise ProviderError.of(
            "failed",
            f"script turn {request.turn_index + 1} of node {request.node_id!r} has no known shape",
        )


__all__ = ["ScriptError", "ScriptedProvider", "echo_summary", "load_script"]
