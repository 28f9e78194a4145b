"""Bedrock ConverseStream: `application/vnd.amazon.eventstream` binary frames, CRC32 included."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from .server import WireResponse
from .sse import split_args
from .turns import FakeError, FakeTurn

_STRING = 7
_ERROR_CODES = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack(">B", len(raw_name)) + raw_name
        encoded += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(name: str, body: dict[str, Any]) -> bytes:
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(body).encode())


def exception(name: str, message: str) -> bytes:
    headers = {
        ":exception-type": name,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, json.dumps({"message": message}).encode())


def encode(turn: FakeTurn, model: str) -> WireResponse:
    events: list[bytes] = [event("messageStart", {"role": "assistant"})]
    first_delta: int | None = None

    def delta(index: int, body: dict[str, Any], *, counts: bool = False) -> None:
        nonlocal first_delta
        events.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": body}))
        if counts and first_delta is None:
            first_delta = len(events)

    index = 0
    if turn.thinking:
        for part in turn.thinking:
            delta(index, {"reasoningContent": {"text": part}}, counts=True)
        delta(index, {"reasoningContent": {"signature": "sig-1"}})
        events.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if turn.text:
        for part in turn.text:
            delta(index, {"text": part}, counts=True)
        events.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for call in turn.calls:
        events.append(
            event(
                "contentBlockStart",
                {
                    "contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": call.id, "name": call.name}},
                },
            )
        )
        for part in split_args(call.arguments):
            delta(index, {"toolUse": {"input": part}})
        events.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    stop = "tool_use" if turn.calls else "end_turn"
    if turn.finish == "length":
        stop = "max_tokens"
    events.append(event("messageStop", {"stopReason": stop}))
    usage = turn.usage
    events.append(
        event(
            "metadata",
            {
                "usage": {
                    "inputTokens": usage.input,
                    "outputTokens": usage.output,
                    "totalTokens": usage.input + usage.cached + usage.cache_write + usage.output,
                    "cacheReadInputTokens": usage.cached,
                    "cacheWriteInputTokens": usage.cache_write,
                },
                "metrics": {"latencyMs": 5},
            },
        )
    )
    return WireResponse(
        headers={"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "req-1"},
        chunks=events,
        cut_after=turn.cut_after_events,
        gate_after=first_delta if turn.gate_after_first_delta else None,
    )


def error(err: FakeError) -> WireResponse:
    code = err.error_type or _ERROR_CODES.get(err.status, "InternalServerException")
    return WireResponse(
        status=err.status,
        headers={
            "content-type": "application/json",
            "x-amzn-errortype": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            **err.headers,
        },
        body=json.dumps({"message": err.message}).encode(),
    )
