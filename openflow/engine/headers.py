"""A request header's per-run constants, stored once and sent by reference.

Most of a node's request header is the same for every call of the run: the system messages
(the runtime preamble, the node's own prompt, the workflow context), the harness tools, the
output schema and the offered tool names. They are a pure function of the prepared workflow,
so the run's start (`expected_parts`) stores each once in the run store, named by its digest,
and a call's header carries only digests for them (`by_reference`); the model turn puts the
header back together (`restore`). What the start did not foresee travels inline, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from openflow.engine.build import build_request
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.review import review_request, reviewer_node
from openflow.engine.state import RunSnapshot
from openflow.engine.step import Step
from openflow.engine.wire import OmitDefaults


def part_digest(value: Any) -> str:
    """The name of a part: a digest of its canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_parts(request: AgentRequest) -> list[Any]:
    """A header's parts as JSON values: each system message, each harness tool, the output
    schema and the offered tool names."""
    parts: list[Any] = list(request.system_messages)
    parts += [tool.model_dump(mode="json") for tool in request.harness_tools]
    if request.output_schema:
        parts.append(request.output_schema)
    if request.tool_names:
        parts.append(list(request.tool_names))
    return parts


def expected_parts(snapshot: RunSnapshot) -> dict[str, Any]:
    """The parts a new run's calls are expected to carry, by digest: each node's as its first
    call will have them, and the post-run review's."""
    step = Step(snapshot, 0)
    requests: list[AgentRequest] = []
    for node in sorted(snapshot.workflow.nodes, key=lambda n: n.id):
        request = build_request(step, node.id)
        if request is not None:
            requests.append(request)
    reviewer = reviewer_node(snapshot) if snapshot.review_enabled else None
    if reviewer is not None:
        requests.append(review_request(snapshot, reviewer))
    found: dict[str, Any] = {}
    for request in requests:
        for part in request_parts(request):
            found.setdefault(part_digest(part), part)
    return dict(sorted(found.items()))


class HeaderRefs(OmitDefaults, BaseModel):
    """Which of a header's parts travel by reference: a digest for each system message and
    harness tool, in order ("" for one the header carries inline, in the same order), and
    for the output schema and the tool names ("" when inline)."""

    model_config = ConfigDict(frozen=True)

    system_messages: tuple[str, ...] = ()
    harness_tools: tuple[str, ...] = ()
    output_schema: str = ""
    tool_names: str = ""


def by_reference(
    header: AgentRequest, stored: Collection[str]
) -> tuple[AgentRequest, HeaderRefs | None]:
    """The header without its parts that are `stored`, and the references to them (None when
    none of its parts is stored)."""
    if not stored:
        return header, None
    system = [part_digest(m) for m in header.system_messages]
    system = [d if d in stored else "" for d in system]
    tools = [part_digest(t.model_dump(mode="json")) for t in header.harness_tools]
    tools = [d if d in stored else "" for d in tools]
    schema = part_digest(header.output_schema) if header.output_schema else ""
    schema = schema if schema in stored else ""
    names = part_digest(list(header.tool_names)) if header.tool_names else ""
    names = names if names in stored else ""
    if not any(system) and not any(tools) and not schema and not names:
        return header, None
    update: dict[str, Any] = {
        "system_messages": tuple(
            m for m, d in zip(header.system_messages, system, strict=True) if not d
        ),
        "harness_tools": tuple(
            t for t, d in zip(header.harness_tools, tools, strict=True) if not d
        ),
    }
    if schema:
        update["output_schema"] = {}
    if names:
        update["tool_names"] = ()
    refs = HeaderRefs(
        system_messages=tuple(system) if any(system) else (),
        harness_tools=tuple(tools) if any(tools) else (),
        output_schema=schema,
        tool_names=names,
    )
    return header.model_copy(update=update), refs


def restore(header: AgentRequest, refs: HeaderRefs, parts: Mapping[str, Any]) -> AgentRequest:
    """The whole header again; a `KeyError` names a part that `parts` lacks."""
    inline_messages = iter(header.system_messages)
    messages = [str(parts[d]) if d else next(inline_messages) for d in refs.system_messages]
    messages += list(inline_messages)
    inline_tools = iter(header.harness_tools)
    tools = [
        ToolSpec.model_validate(parts[d]) if d else next(inline_tools) for d in refs.harness_tools
    ]
    tools += list(inline_tools)
    update: dict[str, Any] = {"system_messages": tuple(messages), "harness_tools": tuple(tools)}
    if refs.output_schema:
        update["output_schema"] = dict(parts[refs.output_schema])
    if refs.tool_names:
        update["tool_names"] = tuple(parts[refs.tool_names])
    return header.model_copy(update=update)


__all__ = [
    "HeaderRefs",
    "by_reference",
    "expected_parts",
    "part_digest",
    "request_parts",
    "restore",
]
