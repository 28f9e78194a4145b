"""Chat Completions streaming (SSE chunks ending in [DONE]) and error bodies."""

from __future__ import annotations

import json
from typing import Any

from .server import WireResponse
from .sse import split_args, sse
from .turns import FakeError, FakeTurn


def encode(turn: FakeTurn, model: str) -> WireResponse:
    events: list[bytes] = []
    first_delta: int | None = None
    name = turn.model or model

    def emit(
        choices: list[dict[str, Any]], *, usage: dict[str, Any] | None = None, delta: bool = False
    ) -> None:
        nonlocal first_delta
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": name,
            "choices": choices,
            "usage": usage,
        }
        events.append(sse(chunk))
        if delta and first_delta is None:
            first_delta = len(events)

    def choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "finish_reason": finish}]

    emit(choice({"role": "assistant", "content": ""}))
    for part in turn.thinking:
        emit(choice({"reasoning_content": part}), delta=True)
    for part in turn.text:
        emit(choice({"content": part}), delta=True)
    for index, call in enumerate(turn.calls):
        emit(
            choice(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for part in split_args(call.arguments):
            emit(choice({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    finish = "tool_calls" if turn.calls else "stop"
    if turn.finish == "length":
        finish = "length"
    emit(choice({}, finish))
    emit(
        [],
        usage={
            "prompt_tokens": turn.usage.input,
            "completion_tokens": turn.usage.output,
            "total_tokens": turn.usage.input + turn.usage.output,
            "prompt_tokens_details": {"cached_tokens": turn.usage.cached},
        },
    )
    events.append(b"data: [DONE]\n\n")
    return WireResponse(
        headers={"content-type": "text/event-stream"},
        chunks=events,
        cut_after=turn.cut_after_events,
        gate_after=first_delta if turn.gate_after_first_delta else None,
    )


def error(err: FakeError) -> WireResponse:
    body = {
        "error": {
            "message": err.message,
            "type": err.error_type or "server_error",
            "param": None,
            "code": None,
        }
    }
    return WireResponse(
        status=err.status,
        headers={"content-type": "application/json", **err.headers},
        body=json.dumps(body).encode(),
    )
