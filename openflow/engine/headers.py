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
from openflow.engine.copies import replaced
from openflow.engine.recipes import foretold
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.review import review_request, reviewer_node
from openflow.engine.state import RunSnapshot
from openflow.engine.step import Step
from openflow.engine.wire import OmitDefaults

#: A part smaller than this (its JSON, in bytes) costs less inline than its reference.
MIN_PART_BYTES = 32


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def part_digest(value: Any) -> str:
    """The name of a part: a digest of its canonical JSON."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:16]


#: Digests of the texts and tools that headers carry call after call (a node's system
#: messages and harness tools, an evidence prompt), by the text or by the tool's JSON: a
#: digest is a pure function of it, so one made is kept (up to `_KNOWN_DIGESTS` of them).
_digests: dict[str, str] = {}
_KNOWN_DIGESTS = 1024


def _remember(key: str, digest: str) -> str:
    if len(_digests) >= _KNOWN_DIGESTS:
        _digests.clear()
    _digests[key] = digest
    return digest


def text_digest(text: str) -> str:
    """`part_digest(text)`, made once a text."""
    found = _digests.get(text)
    return found if found is not None else _remember(text, part_digest(text))


#: The digests of the tools lately digested, by identity (a tool is frozen, and the harness
#: tools of a node's requests are one set of tools, `build._node_harness`): (tool, digest).
_tools: dict[int, tuple[ToolSpec, str]] = {}


def tool_digest(tool: ToolSpec) -> str:
    """`part_digest` of a tool's JSON dump, made once a tool."""
    known = _tools.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    key = "\0" + tool.model_dump_json()
    found = _digests.get(key)
    if found is None:
        found = _remember(key, part_digest(tool.model_dump(mode="json")))
    if len(_tools) >= _KNOWN_DIGESTS:
        _tools.clear()
    _tools[id(tool)] = (tool, found)
    return found


_names: dict[tuple[str, ...], str] = {}


def names_digest(names: tuple[str, ...]) -> str:
    """`part_digest(list(names))`, made once a list of tool names."""
    found = _names.get(names)
    if found is None:
        if len(_names) >= _KNOWN_DIGESTS:
            _names.clear()
        found = _names[names] = part_digest(list(names))
    return found


def _keep(found: dict[str, Any], value: Any) -> None:
    text = _canonical(value)
    if len(text.encode()) >= MIN_PART_BYTES:
        found.setdefault(hashlib.sha256(text.encode()).hexdigest()[:16], value)


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


#: The prompts of each node the post-run review's evidence repeats (`review.run_evidence`).
EVIDENCE_PROMPTS = ("systemPrompt", "taskPrompt")


def _evidence_nodes(header: AgentRequest) -> list[dict[str, Any]] | None:
    evidence = (header.input or {}).get("runEvidence")
    nodes = evidence.get("nodes") if isinstance(evidence, dict) else None
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        return None
    return nodes


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
            _keep(found, part)
    if reviewer is not None:
        # The review's evidence repeats every node's prompts.
        for node in snapshot.workflow.nodes:
            for prompt in (node.agent.system_prompt, node.agent.task_prompt):
                if prompt:
                    _keep(found, prompt)
    # Each node's header set: a call whose header matches it sends one reference and its input.
    stored = set(found)
    for request in requests:
        rest, refs = by_reference(request.model_copy(update={"turn_index": 0}), stored)
        if refs is not None:
            _keep(found, header_set(rest, refs))
            # The review's input as a clean run leaves it: its call sends what differs.
            base = foretold(rest.input)
            if base is not None:
                _keep(found, base)
    return dict(sorted(found.items()))


#: A header's fields that change from call to call, and its run (the activity knows that); the
#: rest of a node's header is the same for every call, and every run of the same workflow.
VARYING = frozenset({"input", "run_id", "turn_index"})


def header_set(rest: AgentRequest, refs: HeaderRefs) -> dict[str, Any]:
    """A node's header set: the references of a header by reference (`by_reference`) and the
    fields of what travels besides them that do not change from call to call."""
    return {
        "refs": refs.model_dump(mode="json"),
        "rest": rest.model_dump(mode="json", exclude=set(VARYING)),
    }


def from_set(
    found: Any, header_input: dict[str, Any] | None, run_id: str
) -> tuple[AgentRequest, HeaderRefs]:
    """The header by reference and its references again, from a stored header set, the
    call's input and its run; a `ValueError` (or `KeyError`, `TypeError`) when `found` is not
    a set."""
    rest = AgentRequest.model_validate({**found["rest"], "input": header_input, "run_id": run_id})
    return rest, HeaderRefs.model_validate(found["refs"])


class HeaderRefs(OmitDefaults, BaseModel):
    """Which of a header's parts travel by reference: a digest for each system message and
    harness tool, in order ("" for one the header carries inline, in the same order), and
    for the output schema and the tool names ("" when inline)."""

    model_config = ConfigDict(frozen=True)

    system_messages: tuple[str, ...] = ()
    harness_tools: tuple[str, ...] = ()
    output_schema: str = ""
    tool_names: str = ""
    #: For the post-run review: each evidence node's `EVIDENCE_PROMPTS`, digests in order
    #: ("" for one left in the evidence).
    evidence_prompts: tuple[tuple[str, ...], ...] = ()


def by_reference(
    header: AgentRequest, stored: Collection[str]
) -> tuple[AgentRequest, HeaderRefs | None]:
    """The header without its parts that are `stored`, and the references to them (None when
    none of its parts is stored)."""
    if not stored:
        return header, None
    system = [text_digest(m) for m in header.system_messages]
    system = [d if d in stored else "" for d in system]
    tools = [tool_digest(t) for t in header.harness_tools]
    tools = [d if d in stored else "" for d in tools]
    schema = part_digest(header.output_schema) if header.output_schema else ""
    schema = schema if schema in stored else ""
    names = names_digest(header.tool_names) if header.tool_names else ""
    names = names if names in stored else ""
    evidence: list[tuple[str, ...]] = []
    nodes = _evidence_nodes(header)
    for node in nodes or []:
        digests = []
        for key in EVIDENCE_PROMPTS:
            value = node.get(key)
            digest = text_digest(value) if isinstance(value, str) and value else ""
            digests.append(digest if digest in stored else "")
        evidence.append(tuple(digests))
    if not any(any(d) for d in evidence):
        evidence = []
    if not any(system) and not any(tools) and not schema and not names and not evidence:
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
    if evidence and nodes is not None and header.input is not None:
        slim_nodes = [
            {k: v for k, v in node.items() if k not in keys}
            for node, digests in zip(nodes, evidence, strict=True)
            for keys in [{k for k, d in zip(EVIDENCE_PROMPTS, digests, strict=True) if d}]
        ]
        run_evidence = {**header.input["runEvidence"], "nodes": slim_nodes}
        update["input"] = {**header.input, "runEvidence": run_evidence}
    refs = HeaderRefs(
        system_messages=tuple(system) if any(system) else (),
        harness_tools=tuple(tools) if any(tools) else (),
        output_schema=schema,
        tool_names=names,
        evidence_prompts=tuple(evidence),
    )
    return replaced(header, update), refs


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
    nodes = _evidence_nodes(header) if refs.evidence_prompts else None
    if nodes is not None and header.input is not None:
        whole = []
        for node, digests in zip(nodes, refs.evidence_prompts, strict=True):
            node = dict(node)
            for key, digest in zip(EVIDENCE_PROMPTS, digests, strict=True):
                if digest:
                    node[key] = str(parts[digest])
            whole.append(_in_order(node))
        run_evidence = {**header.input["runEvidence"], "nodes": whole}
        update["input"] = {**header.input, "runEvidence": run_evidence}
    return replaced(header, update)


#: An evidence node's keys in the order `review.run_evidence` writes them.
_EVIDENCE_ORDER = ("id", "label", "model", *EVIDENCE_PROMPTS)


def _in_order(node: dict[str, Any]) -> dict[str, Any]:
    """The node's keys back in their order (what the reviewer reads is rendered from it)."""
    first = {k: node[k] for k in _EVIDENCE_ORDER if k in node}
    return {**first, **{k: v for k, v in node.items() if k not in first}}


__all__ = [
    "EVIDENCE_PROMPTS",
    "MIN_PART_BYTES",
    "HeaderRefs",
    "VARYING",
    "by_reference",
    "expected_parts",
    "from_set",
    "header_set",
    "part_digest",
    "request_parts",
    "restore",
]
