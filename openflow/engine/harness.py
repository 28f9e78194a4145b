"""Harness tools (OPENFLOW_SPEC 3.1) and the prompt cache key every wire shares.

The harness tools are how a node ends its turn, so every provider offers them first, in this
order, and the engine recognises them by name when it classifies a reply.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from openflow.engine.copies import json_copy
from openflow.engine.policy import HARNESS_ASK_QUESTION as ASK_QUESTION_TOOL
from openflow.engine.policy import HARNESS_REQUEST_INPUT as REQUEST_INPUT_TOOL
from openflow.engine.policy import HARNESS_SUBMIT as SUBMIT_TOOL
from openflow.engine.policy import HARNESS_TOOLS as HARNESS_TOOL_NAMES
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.spec import DEFAULT_OUTPUT_SCHEMA, object_schema_or_default

FILE_PATH_HINT = (
    "If this would repeat a large file's contents, pass the repo-relative file path instead."
)

_SUBMIT_DESCRIPTION = (
    "Finish this node: submit its output (matching the output schema) together with a short "
    "assistant_message for the person following the run. Call it alone, never alongside other "
    "tools."
)
_REQUEST_INPUT_DESCRIPTION = (
    "Pause and ask the person running the workflow a free-text question. Put the question in "
    "assistant_message. Call it alone."
)
_ASK_QUESTION_DESCRIPTION = (
    "Pause and ask the person 1 to 3 multiple-choice questions, each with 2 or 3 options. "
    "Call it alone."
)

_ASK_QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
                    "header": {"type": "string", "maxLength": 12},
                    "question": {"type": "string"},
                    "options": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 3,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "label": {"type": "string"},
                                "description": {"type": "string"},
                            },
                            "required": ["label", "description"],
                        },
                    },
                },
                "required": ["id", "header", "question", "options"],
            },
        }
    },
    "required": ["questions"],
}


def _with_path_hints(schema: dict[str, Any], *, skip: frozenset[str]) -> dict[str, Any]:
    """Append the file-path hint to every string property, except the names in `skip`."""
    result = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        hinted: dict[str, Any] = {}
        for name, prop in properties.items():
            if not isinstance(prop, dict) or name in skip:
                hinted[name] = prop
            elif _is_string_schema(prop):
                description = str(prop.get("description", "")).strip()
                text = f"{description} {FILE_PATH_HINT}" if description else FILE_PATH_HINT
                hinted[name] = {**prop, "description": text}
            else:
                hinted[name] = _with_path_hints(prop, skip=frozenset())
        result["properties"] = hinted
    items = schema.get("items")
    if isinstance(items, dict):
        result["items"] = _with_path_hints(items, skip=frozenset())
    return result


def _is_string_schema(prop: dict[str, Any]) -> bool:
    kind = prop.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def submission_parameters(request: AgentRequest) -> dict[str, Any]:
    """JSON Schema of `openflow_submit_node_output` for this request."""
    output = _with_path_hints(
        object_schema_or_default(request.output_schema), skip=frozenset({"markdown"})
    )
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"output": output, "assistant_message": {"type": "string"}},
        "required": ["output", "assistant_message"],
    }


def harness_tool_specs(
    request: AgentRequest,
    *,
    allow_free_text_input: bool = True,
    allow_structured_input: bool = True,
) -> list[ToolSpec]:
    """The harness tools offered on every request, in order (spec 3.1).

    The two flags are the node's `allowFreeTextUserInput` / `allowStructuredUserInput`; the input
    tools are offered only when the request also allows user input.
    """
    specs = [
        ToolSpec(
            name=SUBMIT_TOOL,
            description=_SUBMIT_DESCRIPTION,
            parameters=submission_parameters(request),
            tier="read",
        )
    ]
    if request.allow_user_input and allow_free_text_input:
        specs.append(
            ToolSpec(
                name=REQUEST_INPUT_TOOL,
                description=_REQUEST_INPUT_DESCRIPTION,
                parameters={
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"assistant_message": {"type": "string"}},
                    "required": ["assistant_message"],
                },
                tier="read",
            )
        )
    if request.allow_user_input and allow_structured_input:
        specs.append(
            ToolSpec(
                name=ASK_QUESTION_TOOL,
                description=_ASK_QUESTION_DESCRIPTION,
                parameters=json_copy(_ASK_QUESTION_SCHEMA),
                tier="read",
            )
        )
    return specs


def offered_tools(request: AgentRequest, tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """Harness tools, then the executable tools in their given order, each name once."""
    harness = list(request.harness_tools) or harness_tool_specs(request)
    seen = {spec.name for spec in harness}
    offered = list(harness)
    for spec in tools:
        if spec.name not in seen:
            seen.add(spec.name)
            offered.append(spec)
    return offered


def cache_key_for(workflow_id: str, node_id: str, tool_names: Iterable[str]) -> str:
    """A stable prompt cache key for one node and tool catalog that reveals nothing readable."""
    return _cache_key(workflow_id, node_id, tuple(tool_names))


@functools.lru_cache(maxsize=1024)
def _cache_key(workflow_id: str, node_id: str, tool_names: tuple[str, ...]) -> str:
    # Every turn of a node asks again for the same key: hashed once.
    material = json.dumps([workflow_id, node_id, list(tool_names)], separators=(",", ":"))
    return "of_" + hashlib.sha256(material.encode("utf-8")).hexdigest()[:40]


__all__ = [
    "ASK_QUESTION_TOOL",
    "DEFAULT_OUTPUT_SCHEMA",
    "FILE_PATH_HINT",
    "HARNESS_TOOL_NAMES",
    "REQUEST_INPUT_TOOL",
    "SUBMIT_TOOL",
    "cache_key_for",
    "harness_tool_specs",
    "offered_tools",
    "submission_parameters",
]
