"""OpenAI Responses streaming (SSE events) and error bodies."""

from __future__ import annotations

import json
from typing import Any

from .server import WireResponse
from .sse import split_args, sse
from .turns import FakeError, FakeTurn


def encode(turn: FakeTurn, model: str) -> WireResponse:
    events: list[bytes] = []
    first_delta: int | None = None
    seq = 0

    def emit(name: str, data: dict[str, Any], *, delta: bool = False) -> None:
        nonlocal first_delta, seq
        events.append(sse({"type": name, "sequence_number": seq, **data}, event=name))
        seq += 1
        if delta and first_delta is None:
            first_delta = len(events)

    name = turn.model or model
    base = {"id": "resp_1", "object": "response", "created_at": 1, "model": name, "output": []}
    emit("response.created", {"response": {**base, "status": "in_progress"}})
    emit("response.in_progress", {"response": {**base, "status": "in_progress"}})
    output: list[dict[str, Any]] = []
    index = 0
    if turn.thinking:
        item = {"type": "reasoning", "id": "rs_1", "summary": []}
        emit("response.output_item.added", {"output_index": index, "item": item})
        for part in turn.thinking:
            emit(
                "response.reasoning_summary_text.delta",
                {"item_id": "rs_1", "output_index": index, "summary_index": 0, "delta": part},
                delta=True,
            )
        done = {
            **item,
            "summary": [{"type": "summary_text", "text": "".join(turn.thinking)}],
            "encrypted_content": "enc-1",
        }
        emit("response.output_item.done", {"output_index": index, "item": done})
        output.append(done)
        index += 1
    if turn.text:
        item = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        emit("response.output_item.added", {"output_index": index, "item": item})
        emit(
            "response.content_part.added",
            {
                "item_id": "msg_1",
                "output_index": index,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            },
        )
        for part in turn.text:
            emit(
                "response.output_text.delta",
                {
                    "item_id": "msg_1",
                    "output_index": index,
                    "content_index": 0,
                    "delta": part,
                    "logprobs": [],
                },
                delta=True,
            )
        text = "".join(turn.text)
        emit(
            "response.output_text.done",
            {
                "item_id": "msg_1",
                "output_index": index,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
        )
        done = {
            **item,
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        emit("response.output_item.done", {"output_index": index, "item": done})
        output.append(done)
        index += 1
    for n, call in enumerate(turn.calls):
        item_id = f"fc_{n}"
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call.id,
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        emit("response.output_item.added", {"output_index": index, "item": item})
        for part in split_args(call.arguments):
            emit(
                "response.function_call_arguments.delta",
                {"item_id": item_id, "output_index": index, "delta": part},
            )
        if turn.finish != "length":
            emit(
                "response.function_call_arguments.done",
                {"item_id": item_id, "output_index": index, "arguments": call.arguments},
            )
            done = {**item, "arguments": call.arguments, "status": "completed"}
            emit("response.output_item.done", {"output_index": index, "item": done})
            output.append(done)
        index += 1
    usage = {
        "input_tokens": turn.usage.input,
        "input_tokens_details": {"cached_tokens": turn.usage.cached},
        "output_tokens": turn.usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": turn.usage.input + turn.usage.output,
    }
    if turn.finish == "length":
        final = {
            **base,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": output,
            "usage": usage,
        }
        emit("response.incomplete", {"response": final})
    else:
        final = {**base, "status": "completed", "output": output, "usage": usage}
        emit("response.completed", {"response": final})
    return WireResponse(
        headers={"content-type": "text/event-stream", "x-request-id": "req_1"},
        chunks=events,
        cut_after=turn.cut_after_events,
        gate_after=first_delta if turn.gate_after_first_delta else None,
    )


def error(err: FakeError) -> WireResponse:
    body = {
        "error": {
            "message": err.message,
            "type": err.error_type or "api_error",
            "param": None,
            "code": None,
        }
    }
    return WireResponse(
        status=err.status,
        headers={"content-type": "application/json", **err.headers},
        body=json.dumps(body).encode(),
    )
