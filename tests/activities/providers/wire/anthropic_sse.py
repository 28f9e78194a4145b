"""Anthropic Messages streaming (SSE events) and error bodies."""

from __future__ import annotations

import json

from .server import WireResponse
from .sse import split_args, sse
from .turns import FakeError, FakeTurn

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def encode(turn: FakeTurn, model: str) -> WireResponse:
    events: list[bytes] = []
    first_delta: int | None = None

    def emit(name: str, data: dict[str, object], *, delta: bool = False) -> None:
        nonlocal first_delta
        events.append(sse({"type": name, **data}, event=name))
        if delta and first_delta is None:
            first_delta = len(events)

    usage = turn.usage
    emit(
        "message_start",
        {
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": turn.model or model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage.input,
                    "output_tokens": 1,
                    "cache_read_input_tokens": usage.cached,
                    "cache_creation_input_tokens": usage.cache_write,
                },
            }
        },
    )
    events.append(sse({"type": "ping"}, event="ping"))
    index = 0
    if turn.thinking:
        emit(
            "content_block_start",
            {
                "index": index,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        )
        for part in turn.thinking:
            emit(
                "content_block_delta",
                {"index": index, "delta": {"type": "thinking_delta", "thinking": part}},
                delta=True,
            )
        emit(
            "content_block_delta",
            {"index": index, "delta": {"type": "signature_delta", "signature": "sig-1"}},
        )
        emit("content_block_stop", {"index": index})
        index += 1
    if turn.text:
        emit("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        for part in turn.text:
            emit(
                "content_block_delta",
                {"index": index, "delta": {"type": "text_delta", "text": part}},
                delta=True,
            )
        emit("content_block_stop", {"index": index})
        index += 1
    for call in turn.calls:
        emit(
            "content_block_start",
            {
                "index": index,
                "content_block": {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": {},
                },
            },
        )
        for part in split_args(call.arguments):
            emit(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": part}},
            )
        if turn.finish != "length":
            emit("content_block_stop", {"index": index})
        index += 1
    stop = "tool_use" if turn.calls else "end_turn"
    if turn.finish == "length":
        stop = "max_tokens"
    emit(
        "message_delta",
        {
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage.output},
        },
    )
    emit("message_stop", {})
    return WireResponse(
        headers={"content-type": "text/event-stream", "request-id": "req_1"},
        chunks=events,
        cut_after=turn.cut_after_events,
        gate_after=first_delta if turn.gate_after_first_delta else None,
    )


def error(err: FakeError) -> WireResponse:
    body = {
        "type": "error",
        "error": {
            "type": err.error_type or _ERROR_TYPES.get(err.status, "api_error"),
            "message": err.message,
        },
    }
    return WireResponse(
        status=err.status,
        headers={"content-type": "application/json", **err.headers},
        body=json.dumps(body).encode(),
    )
