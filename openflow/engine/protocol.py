"""The turn protocol's constants and pure helpers: caps, backoff, attempt numbers, display text."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from openflow.engine.classify import (
    TurnError,
)
from openflow.engine.events import RunEvent, ToolStarted
from openflow.engine.policy import (
    SEAL_TOOL,
    SEALED_FROM,
)
from openflow.engine.request import ModelReply
from openflow.engine.spec import (
    MAX_BACKOFF_MS,
)
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningItem,
    ToolCall,
    ToolCallItem,
    TranscriptItem,
)

PROTOCOL_CAP = 3
AUTO_CONTINUE_CAP = 10
MAX_MODEL_ATTEMPT = 255
REPAIR_SUFFIX = "__output_repair"
EVENT_ADAPTER: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
_QUESTION_ID = re.compile(r"^[a-z][a-z0-9_]*$")

Keep = Callable[[TranscriptItem], None]


def reply_items(reply: ModelReply) -> list[TranscriptItem]:
    """The transcript items a reply can contribute; the model-turn activity stores this list."""
    items: list[TranscriptItem] = []
    if reply.reasoning:
        items.append(ReasoningItem(blocks=reply.reasoning))
    if reply.text.strip():
        items.append(AssistantItem(content=reply.text.strip()))
    for call in reply.tool_calls:
        if call.arguments is not None:
            items.append(ToolCallItem(call=call.as_call()))
    return items


def jitter_ms(node_id: str) -> int:
    """Deterministic per-node jitter (spec 5.3): 100 + (31-multiplier hash % 400)."""
    h = 0
    for byte in node_id.encode():
        h = (h * 31 + byte) & 0xFFFFFFFF
    return 100 + (h % 400)


def backoff_delay_ms(backoff_ms: int, streak: int) -> int:
    """The transient backoff of the `streak`-th consecutive failure, capped at 30 s."""
    exponent = max(streak, 1) - 1
    return int(min(backoff_ms * (2**exponent), MAX_BACKOFF_MS))


def structured_problem(structured: dict[str, Any]) -> str | None:
    """Why a structured question request is invalid (spec 3.4), or None."""
    questions = structured.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= 3:
        return "structured questions need 1-3 questions"
    seen: set[str] = set()
    for q in questions:
        if not isinstance(q, dict):
            return "each question must be an object"
        qid = q.get("id")
        if not isinstance(qid, str) or not _QUESTION_ID.match(qid) or qid in seen:
            return "question ids must be unique and look like `scope`"
        seen.add(qid)
        header = q.get("header")
        if not isinstance(header, str) or not header.strip() or len(header) > 12:
            return "headers must be 1-12 characters"
        text = q.get("question")
        if not isinstance(text, str) or not text.strip():
            return "each question needs its text"
        options = q.get("options")
        if not isinstance(options, list) or not 2 <= len(options) <= 3:
            return "each question needs 2-3 options"
        labels: set[str] = set()
        for o in options:
            if not isinstance(o, dict):
                return "each option must be an object"
            lab, desc = o.get("label"), o.get("description")
            if not isinstance(lab, str) or not lab.strip() or lab in labels:
                return "option labels must be non-empty and unique"
            if not isinstance(desc, str) or not desc.strip():
                return "every option needs a description"
            labels.add(lab)
    return None


def error_text(err: TurnError) -> str:
    """An AgentError's display text (spec 3.5)."""
    if err.error == "transient":
        return f"transient: {err.message}"
    if err.error == "permanent":
        return f"permanent: {err.message}"
    if err.error == "mixed":
        return f"model {err.message}"
    if err.error == "truncated":
        named = f" ({', '.join(err.tool_names)})" if err.tool_names else ""
        return f"model response hit the output token limit{named}: {err.message}"
    if err.error == "malformed":
        return f"malformed submit output: {err.message}"
    if err.error == "interrupted":
        return "interrupted by user"
    return err.message


def shown_call(call: ToolCall) -> dict[str, Any]:
    """A call as events show it: the seal call's arguments become `{sealed_from}` (spec 11)."""
    if call.name == SEAL_TOOL:
        return call.model_copy(update={"arguments": dict(SEALED_FROM)}).model_dump(mode="json")
    return call.model_dump(mode="json")


def tool_started(node_id: str, call: ToolCall) -> ToolStarted:
    """The event of a call that starts running, its arguments as events show them."""
    return ToolStarted(
        node_id=node_id,
        tool_call_id=call.id,
        tool_name=call.name,
        arguments=shown_call(call)["arguments"],
    )


__all__ = [
    "AUTO_CONTINUE_CAP",
    "EVENT_ADAPTER",
    "MAX_MODEL_ATTEMPT",
    "PROTOCOL_CAP",
    "REPAIR_SUFFIX",
    "Keep",
    "backoff_delay_ms",
    "error_text",
    "jitter_ms",
    "reply_items",
    "shown_call",
    "structured_problem",
    "tool_started",
]
