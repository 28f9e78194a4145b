"""Request headers by reference: what leaves the header comes back whole, in order."""

from __future__ import annotations

import json

import pytest

from openflow.engine.advance import start
from openflow.engine.build import build_request
from openflow.engine.headers import (
    MIN_PART_BYTES,
    by_reference,
    expected_parts,
    part_digest,
    request_parts,
    restore,
)
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.review import review_request
from openflow.engine.spec import Workflow
from openflow.engine.step import Step
from openflow.testing import agent_node

TOOL = ToolSpec(name="t", description="a tool", parameters={"type": "object"})
HEADER = AgentRequest(
    workflow_id="wf",
    node_id="n",
    node_label="N",
    model="m",
    system_messages=("one", "two", "three"),
    output_schema={"type": "object"},
    harness_tools=(TOOL, TOOL.model_copy(update={"name": "u"})),
    tool_names=("read", "write"),
)


@pytest.mark.parametrize(
    "kept", [[], ["one"], ["two", "u"], ["one", "two", "three", "t", "u", "schema", "names"]]
)
def test_a_header_by_reference_restores_to_itself(kept: list[str]) -> None:
    values = {
        "one": "one",
        "two": "two",
        "three": "three",
        "t": TOOL.model_dump(mode="json"),
        "u": HEADER.harness_tools[1].model_dump(mode="json"),
        "schema": {"type": "object"},
        "names": ["read", "write"],
    }
    parts = {part_digest(values[k]): values[k] for k in kept}
    slim, refs = by_reference(HEADER, set(parts))
    if not kept:
        assert slim == HEADER and refs is None
        return
    assert refs is not None
    assert len(slim.system_messages) + len(slim.harness_tools) < 5
    assert restore(slim, refs, parts) == HEADER
    with pytest.raises(KeyError):
        restore(slim, refs, {})


def test_the_start_foretells_every_part_of_a_nodes_first_call() -> None:
    wf = Workflow.model_validate(
        {
            "id": "wf",
            "name": "wf",
            "nodes": [agent_node("a"), agent_node("b", system_prompt="b's own")],
            "edges": [{"id": "e", "from": "a", "to": "b"}],
        }
    )
    plan = start(wf, "run-1", 0, tool_names=["read", "write"])
    parts = expected_parts(plan.snapshot)
    for node_id in ("a", "b"):
        request = build_request(Step(plan.snapshot, 5), node_id)
        assert request is not None
        large = [p for p in request_parts(request) if len(json.dumps(p)) > MIN_PART_BYTES]
        assert {part_digest(p) for p in large} <= set(parts)
        slim, refs = by_reference(request, set(parts))
        assert refs is not None and not slim.harness_tools
        # What stays inline costs less than its reference would.
        assert all(len(m) < MIN_PART_BYTES for m in slim.system_messages)
        assert restore(slim, refs, parts) == request


def test_the_reviews_evidence_names_the_nodes_prompts() -> None:
    prompt = "Check everything twice. " * 100
    wf = Workflow.model_validate(
        {
            "id": "wf",
            "name": "wf",
            "nodes": [agent_node("a", system_prompt=prompt), agent_node("b")],
            "edges": [],
        }
    )
    plan = start(wf, "run-1", 0, tool_names=["read"])
    parts = expected_parts(plan.snapshot)
    request = review_request(plan.snapshot, "b")
    slim, refs = by_reference(request, set(parts))
    assert refs is not None and refs.evidence_prompts
    assert prompt not in slim.model_dump_json()
    whole = restore(slim, refs, parts)
    assert whole == request
    assert list(whole.input["runEvidence"]["nodes"][0]) == list(
        request.input["runEvidence"]["nodes"][0]
    )
