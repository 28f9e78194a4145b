"""The spans and metrics of model calls and tool calls, with the GenAI semantic conventions.

Attributes carry names, models, token counts and outcomes; prompt and completion text only when
`OPENFLOW_TRACE_CONTENT` is on. Nothing here may fail a turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from temporalio import activity

from openflow import contracts as c
from openflow import telemetry
from openflow.engine.request import AgentRequest, ModelReply

__all__ = [
    "count_retry",
    "elapsed_ms",
    "model_span",
    "record_failure",
    "record_reply",
    "record_tool",
    "tool_span",
]

_PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "bedrock": "aws.bedrock"}


def elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))


def _provider(inp: c.ModelTurnInput) -> str:
    return _PROVIDER_NAMES.get(inp.provider_id, inp.provider_id or "unknown")


def _meter() -> Any | None:
    try:
        return activity.metric_meter()
    except RuntimeError:
        return None


@contextmanager
def model_span(inp: c.ModelTurnInput, request: AgentRequest) -> Iterator[Any]:
    """The span of one model call: `chat {model}`, a client span."""
    provider = _provider(inp)
    with telemetry.span(
        f"chat {request.model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_output_tokens,
            "openflow.run_id": inp.run_id,
            "openflow.node_id": inp.node_id,
            "openflow.call_id": inp.call_id,
            "openflow.model_attempt": inp.model_attempt,
            "openflow.turn_index": inp.turn_index,
        },
        kind="client",
    ) as span:
        yield span


def record_reply(
    span: Any,
    inp: c.ModelTurnInput,
    request: AgentRequest,
    reply: ModelReply,
    transcript: Sequence[Any],
) -> None:
    """Put the reply's model, tokens and finish reason on the span and into the metrics."""
    usage = reply.usage
    attributes: dict[str, Any] = {
        "gen_ai.response.model": reply.model or request.model,
        "gen_ai.response.finish_reasons": [
            reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        ],
        "openflow.tool_calls": len(reply.tool_calls),
    }
    if usage is not None:
        attributes |= {
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            "openflow.estimated_cost_usd": usage.cost_usd,
        }
    # Text goes only on a span that records (the check reads the environment).
    if telemetry.enabled() and telemetry.content_enabled():
        attributes |= {
            "gen_ai.system_instructions": json.dumps(list(request.system_messages))[:16000],
            "gen_ai.input.messages": _last_input(transcript),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": reply.text}])[
                :16000
            ],
        }
    span.set(attributes)
    meter = _meter()
    if meter is None:
        return
    model = reply.model or request.model
    labels = {"provider": _provider(inp), "model": model}
    telemetry.count(meter, "openflow_model_turns", 1, labels | {"outcome": "ok"})
    if inp.model_attempt > 1 and inp.turn_index == 0:
        telemetry.count(meter, "openflow_retries", 1, {"what": "model"})
    if usage is not None:
        for kind, value in (
            ("input", usage.prompt_tokens),
            ("output", usage.completion_tokens),
            ("cached", usage.cached_input_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
        ):
            telemetry.count(meter, "openflow_tokens", value, labels | {"kind": kind})
        if usage.cost_usd:
            telemetry.count(meter, "openflow_estimated_cost_usd", float(usage.cost_usd), labels)


def record_failure(inp: c.ModelTurnInput, request: AgentRequest, kind: str) -> None:
    meter = _meter()
    if meter is not None:
        labels = {"provider": _provider(inp), "model": request.model, "outcome": kind}
        telemetry.count(meter, "openflow_model_turns", 1, labels)


def _last_input(transcript: Sequence[Any]) -> str:
    if not transcript:
        return "[]"
    last = transcript[-1]
    dump = last.model_dump(mode="json") if hasattr(last, "model_dump") else str(last)
    return json.dumps([dump])[:16000]


@contextmanager
def tool_span(node_id: str, call_id: str, name: str, tier: str) -> Iterator[Any]:
    """The span of one tool call: `execute_tool {name}`."""
    with telemetry.span(
        f"execute_tool {name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "openflow.node_id": node_id,
            "openflow.tool.tier": tier,
        },
    ) as span:
        yield span


def record_tool(span: Any, name: str, outcome: str, duration_ms: int) -> None:
    """Put a tool call's outcome and duration on its span and into the metrics."""
    span.set({"openflow.tool.outcome": outcome, "openflow.tool.duration_ms": duration_ms})
    if outcome == "error":
        span.error(f"{name} returned an error")
    meter = _meter()
    if meter is not None:
        telemetry.count(meter, "openflow_tool_calls", 1, {"tool": name, "outcome": outcome})


def count_retry(what: str) -> None:
    meter = _meter()
    if meter is not None:
        telemetry.count(meter, "openflow_retries", 1, {"what": what})
