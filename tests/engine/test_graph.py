"""Validation in the spec's order (2.1), execution layers (2.2) and ancestry."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openflow.engine import graph
from openflow.engine.errors import (
    EngineError,
    UnknownNodeError,
    WorkflowFormatError,
    WorkflowValidationError,
)
from openflow.engine.graph import (
    ancestors,
    children,
    descendants,
    execution_layers,
    parents,
    roots,
    validate_workflow,
    workflow_problems,
)
from openflow.engine.spec import Workflow

Doc = dict[str, Any]


def node(node_id: str, **agent: Any) -> Doc:
    config = {
        "system_prompt": f"You do {node_id}.",
        "task_prompt": f"Do {node_id}.",
        "model": "test-model",
        "output_schema": {"type": "object"},
    }
    config.update(agent)
    return {
        "id": node_id,
        "label": node_id.title(),
        "kind": "agent",
        "position": {"x": 0.0, "y": 0.0},
        "agent": config,
    }


def edge(from_: str, to: str, edge_id: str | None = None) -> Doc:
    return {"id": edge_id or f"{from_}-{to}", "from": from_, "to": to}


def doc(nodes: list[Doc], edges: list[Doc] | None = None, **settings: Any) -> Doc:
    data: Doc = {"id": "wf", "name": "Test", "nodes": nodes, "edges": edges or []}
    if settings:
        data["settings"] = settings
    return data


def load(data: Doc) -> Workflow:
    return Workflow.from_json_dict(data)


def diamond() -> Doc:
    # Nodes listed out of id order: layers must still come out sorted.
    return doc(
        [node("risk"), node("final"), node("plan"), node("idea")],
        [edge("idea", "plan"), edge("idea", "risk"), edge("plan", "final"), edge("risk", "final")],
    )


def first_error(data: Doc) -> WorkflowValidationError:
    with pytest.raises(WorkflowValidationError) as caught:
        validate_workflow(load(data))
    return caught.value


def test_layers_follow_the_spec_example() -> None:
    assert execution_layers(load(diamond())) == [["idea"], ["plan", "risk"], ["final"]]


def test_independent_roots_share_layer_zero_sorted_by_id() -> None:
    data = doc(
        [node("zeta"), node("beta"), node("alpha"), node("gamma")],
        [edge("beta", "gamma"), edge("zeta", "gamma")],
    )

    assert execution_layers(load(data)) == [["alpha", "beta", "zeta"], ["gamma"]]


def test_a_long_edge_puts_the_child_after_its_deepest_parent() -> None:
    data = doc(
        [node("a"), node("b"), node("c")],
        [edge("a", "b"), edge("b", "c"), edge("a", "c")],
    )

    assert execution_layers(load(data)) == [["a"], ["b"], ["c"]]


def test_ancestry() -> None:
    wf = load(diamond())

    assert parents(wf, "final") == ["plan", "risk"]
    assert parents(wf, "idea") == []
    assert children(wf, "idea") == ["plan", "risk"]
    assert ancestors(wf, "final") == ["idea", "plan", "risk"]
    assert descendants(wf, "plan") == ["final"]
    assert roots(wf) == ["idea"]


def test_unknown_node_ids_are_refused_with_the_id() -> None:
    with pytest.raises(UnknownNodeError, match="'ghost'") as caught:
        parents(load(diamond()), "ghost")

    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value, EngineError)


def test_a_valid_workflow_has_no_problems() -> None:
    wf = load(diamond())

    validate_workflow(wf)
    assert workflow_problems(wf) == []


# (name, broken workflow, code, node_id, edge_id, text the message must contain)
VARIANTS: list[tuple[str, Callable[[], Doc], str, str | None, str | None, str]] = [
    ("empty", lambda: doc([]), "EmptyWorkflow", None, None, "no nodes"),
    (
        "duplicate node",
        lambda: doc([node("a"), node("b"), node("a")]),
        "DuplicateNodeId",
        "a",
        None,
        "node 'a'",
    ),
    (
        "template without heading",
        lambda: doc([node("doc", handoff={"format": "markdown", "template": "just text"})]),
        "InvalidHandoffTemplate",
        "doc",
        None,
        "node 'doc'",
    ),
    (
        "invalid schema",
        lambda: doc([node("plan", output_schema={"properties": {"summary": "string"}})]),
        "InvalidOutputSchema",
        "plan",
        None,
        "node 'plan': output_schema is not a valid JSON Schema",
    ),
    (
        "invalid regex in schema",
        lambda: doc(
            [node("plan", output_schema={"type": "object", "properties": {"a": {"pattern": "("}}})]
        ),
        "InvalidOutputSchema",
        "plan",
        None,
        "regex",
    ),
    (
        "unknown meta-schema",
        lambda: doc([node("plan", output_schema={"$schema": "urn:nope", "type": "object"})]),
        "InvalidOutputSchema",
        "plan",
        None,
        "urn:nope",
    ),
    (
        "mcp selection",
        lambda: doc([node("r", mcpResources=[{"serverId": "a/b", "uri": "file:///x"}])]),
        "InvalidMcpContextSelection",
        "r",
        None,
        "serverId",
    ),
    (
        "duplicate edge",
        lambda: doc([node("a"), node("b"), node("c")], [edge("a", "b", "e"), edge("a", "c", "e")]),
        "DuplicateEdgeId",
        None,
        "e",
        "edge 'e'",
    ),
    (
        "self edge",
        lambda: doc([node("a")], [edge("a", "a", "loop")]),
        "SelfEdge",
        "a",
        "loop",
        "edge 'loop'",
    ),
    (
        "missing from",
        lambda: doc([node("a")], [edge("ghost", "a", "e")]),
        "MissingEndpoint",
        "ghost",
        "e",
        "'from' names node 'ghost'",
    ),
    (
        "missing to",
        lambda: doc([node("a")], [edge("a", "ghost", "e")]),
        "MissingEndpoint",
        "ghost",
        "e",
        "'to' names node 'ghost'",
    ),
    (
        "plan source missing",
        lambda: doc([node("a")], planMode={"evidenceSourceNodeId": "freeze"}),
        "PlanModeSourceMissing",
        "freeze",
        None,
        "'freeze' does not exist",
    ),
    (
        "plan source autonomous",
        lambda: doc([node("freeze")], planMode={"evidenceSourceNodeId": "freeze"}),
        "PlanModeSourceNotInteractive",
        "freeze",
        None,
        "requestUserInput",
    ),
    (
        "cycle",
        lambda: doc([node("a"), node("b")], [edge("a", "b"), edge("b", "a")]),
        "Cycle",
        "a",
        "a-b",
        "'a' -> 'b' -> 'a'",
    ),
]


@pytest.mark.parametrize(
    ("build", "code", "node_id", "edge_id", "text"),
    [v[1:] for v in VARIANTS],
    ids=[v[0] for v in VARIANTS],
)
def test_each_variant_names_what_is_wrong_and_how_to_fix_it(
    build: Callable[[], Doc], code: str, node_id: str | None, edge_id: str | None, text: str
) -> None:
    error = first_error(build())

    assert error.code == code
    assert error.node_id == node_id
    assert error.edge_id == edge_id
    assert text in str(error)
    assert " — " in str(error), "every message says what to do"
    assert "\n" not in str(error)
    assert workflow_problems(load(build()))[0] == error


def test_a_valid_plan_mode_source_passes() -> None:
    data = doc([node("freeze", requestUserInput=True)], planMode={"evidenceSourceNodeId": "freeze"})

    validate_workflow(load(data))


def test_markdown_handoffs_do_not_compile_the_output_schema() -> None:
    data = doc(
        [node("doc", handoff={"format": "markdown"}, output_schema={"properties": {"a": 1}})]
    )

    validate_workflow(load(data))


def test_a_non_object_schema_falls_back_and_is_valid() -> None:
    validate_workflow(load(doc([node("a", output_schema="string")])))


def test_problems_come_in_the_spec_order() -> None:
    data = doc(
        [
            node("a", output_schema={"properties": {"x": "bad"}}),
            node("a"),
            node("b", handoff={"format": "markdown", "template": "no heading"}),
            node("c", mcpPrompts=[{"serverId": "s", "name": "", "maxBytes": 10}]),
            node("d"),
        ],
        [
            edge("b", "c", "e1"),
            edge("c", "b", "e2"),
            edge("d", "d", "e1"),
            edge("d", "ghost", "e3"),
        ],
        planMode={"evidenceSourceNodeId": "nope"},
    )

    codes = [p.code for p in workflow_problems(load(data))]

    assert codes == [
        "DuplicateNodeId",
        "InvalidOutputSchema",
        "InvalidHandoffTemplate",
        "InvalidMcpContextSelection",
        "DuplicateEdgeId",
        "SelfEdge",
        "MissingEndpoint",
        "PlanModeSourceMissing",
        "Cycle",
    ]
    assert first_error(data).code == "DuplicateNodeId"


@pytest.mark.parametrize(
    ("first", "then", "expected"),
    [
        ("empty", "cycle", "EmptyWorkflow"),
        ("schema", "duplicate node", "DuplicateNodeId"),
        ("mcp", "schema", "InvalidOutputSchema"),
        ("edge", "mcp", "InvalidMcpContextSelection"),
        ("plan", "edge", "MissingEndpoint"),
        ("cycle", "plan", "PlanModeSourceMissing"),
    ],
)
def test_first_failure_wins(first: str, then: str, expected: str) -> None:
    broken: dict[str, Callable[[Doc], None]] = {
        "empty": lambda d: d.update(nodes=[]),
        "duplicate node": lambda d: d["nodes"].append(node("a")),
        "schema": lambda d: d["nodes"][1]["agent"].update(output_schema={"properties": 3}),
        "mcp": lambda d: d["nodes"][0]["agent"].update(mcpResources=[{"serverId": "", "uri": "x"}]),
        "edge": lambda d: d["edges"].append(edge("a", "ghost")),
        "plan": lambda d: d.update(settings={"planMode": {"evidenceSourceNodeId": "ghost"}}),
        "cycle": lambda d: d["edges"].append(edge("b", "a")),
    }
    data = doc([node("a"), node("b")], [edge("a", "b")])
    broken[first](data)
    broken[then](data)

    assert first_error(data).code == expected


def test_edge_checks_run_per_edge_in_file_order() -> None:
    data = doc([node("a"), node("b")], [edge("a", "ghost", "e1"), edge("b", "b", "e2")])

    error = first_error(data)

    assert (error.code, error.edge_id) == ("MissingEndpoint", "e1")


def test_from_is_checked_before_to() -> None:
    error = first_error(doc([node("a")], [edge("x", "y", "e")]))

    assert error.node_id == "x"


def mcp_node(**agent: Any) -> Doc:
    return doc([node("n", **agent)])


def resources(count: int, max_bytes: int = 1) -> list[Doc]:
    return [{"serverId": "s", "uri": f"file:///{i}", "maxBytes": max_bytes} for i in range(count)]


def prompt(**fields: Any) -> Doc:
    return {"serverId": "s", "name": "p", "maxBytes": 1} | fields


MCP_CASES: list[tuple[str, Doc, bool]] = [
    ("64 selections", mcp_node(mcpResources=resources(40), mcpPrompts=[prompt()] * 24), True),
    ("65 selections", mcp_node(mcpResources=resources(41), mcpPrompts=[prompt()] * 24), False),
    ("server id 128", mcp_node(mcpResources=[{"serverId": "s" * 128, "uri": "u"}]), True),
    ("server id 129", mcp_node(mcpResources=[{"serverId": "s" * 129, "uri": "u"}]), False),
    ("blank server id", mcp_node(mcpResources=[{"serverId": "  ", "uri": "u"}]), False),
    ("server id slash", mcp_node(mcpPrompts=[prompt(serverId="a/b")]), False),
    ("uri 4096", mcp_node(mcpResources=[{"serverId": "s", "uri": "u" * 4096}]), True),
    ("uri 4097", mcp_node(mcpResources=[{"serverId": "s", "uri": "u" * 4097}]), False),
    ("uri control char", mcp_node(mcpResources=[{"serverId": "s", "uri": "a\nb"}]), False),
    ("blank prompt name", mcp_node(mcpPrompts=[prompt(name=" ")]), False),
    ("max bytes 0", mcp_node(mcpResources=resources(1, 0)), False),
    ("max bytes negative", mcp_node(mcpResources=resources(1, -5)), False),
    ("max bytes limit", mcp_node(mcpResources=resources(1, 1_048_576)), True),
    ("max bytes over", mcp_node(mcpResources=resources(1, 1_048_577)), False),
    ("sum at limit", mcp_node(mcpResources=resources(16, 65_536)), True),
    ("sum over", mcp_node(mcpResources=resources(17, 65_536)), False),
    (
        "64 arguments",
        mcp_node(mcpPrompts=[prompt(arguments={str(i): "v" for i in range(64)})]),
        True,
    ),
    (
        "65 arguments",
        mcp_node(mcpPrompts=[prompt(arguments={str(i): "v" for i in range(65)})]),
        False,
    ),
    ("blank argument name", mcp_node(mcpPrompts=[prompt(arguments={"": "v"})]), False),
    ("argument name 257", mcp_node(mcpPrompts=[prompt(arguments={"n" * 257: "v"})]), False),
    ("argument value 16384", mcp_node(mcpPrompts=[prompt(arguments={"n": "v" * 16_384})]), True),
    ("argument value 16385", mcp_node(mcpPrompts=[prompt(arguments={"n": "é" * 8193})]), False),
    (
        "snapshots over",
        mcp_node(
            mcpContextSnapshots=[
                {"kind": "resource", "serverId": "s", "source": "u", "content": "x" * 600_000},
                {"kind": "prompt", "serverId": "s", "source": "p", "content": "x" * 600_000},
            ]
        ),
        False,
    ),
]


@pytest.mark.parametrize(
    ("data", "valid"), [c[1:] for c in MCP_CASES], ids=[c[0] for c in MCP_CASES]
)
def test_mcp_selection_limits(data: Doc, valid: bool) -> None:
    problems = workflow_problems(load(data))

    if valid:
        assert problems == []
    else:
        assert [p.code for p in problems][:1] == ["InvalidMcpContextSelection"]
        assert problems[0].node_id == "n"


def test_execution_layers_refuses_an_invalid_workflow() -> None:
    with pytest.raises(WorkflowValidationError) as caught:
        execution_layers(load(doc([node("a"), node("b")], [edge("a", "b"), edge("b", "a")])))

    assert caught.value.code == "Cycle"


def test_a_layering_that_loses_a_node_is_an_internal_consistency_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graph, "_layers", lambda wf: [["idea"], ["plan"]])

    error = first_error(diamond())

    assert error.code == "InternalConsistency"
    assert "report" in str(error)


def test_validation_errors_survive_pickling() -> None:
    import pickle

    error = first_error(doc([node("a")], [edge("a", "a", "loop")]))

    assert pickle.loads(pickle.dumps(error)) == error


# Any JSON at all, and JSON shaped enough like a workflow to reach every check.
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
ids = st.sampled_from(["a", "b", "c", "", "a/b"])
schemas = json_values | st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    },
    optional={"$schema": json_values, "required": json_values},
)
handoffs = st.fixed_dictionaries(
    {"format": st.sampled_from(["json", "markdown", "legacy", "pdf"])},
    optional={"template": st.text(alphabet="# \nab", max_size=20)},
)
mcp_resource = st.fixed_dictionaries(
    {"serverId": st.text(max_size=4) | ids, "uri": st.text(max_size=4)},
    optional={"maxBytes": st.integers(min_value=-10, max_value=2_000_000)},
)
mcp_prompt = st.fixed_dictionaries(
    {"serverId": ids, "name": st.text(max_size=4)},
    optional={
        "arguments": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3),
        "maxBytes": st.integers(min_value=-10, max_value=2_000_000),
    },
)
agents = st.fixed_dictionaries(
    {
        "system_prompt": st.text(max_size=4),
        "task_prompt": st.text(max_size=4),
        "output_schema": schemas,
    },
    optional={
        "handoff": handoffs,
        "requestUserInput": st.booleans(),
        "mcpResources": st.lists(mcp_resource, max_size=3),
        "mcpPrompts": st.lists(mcp_prompt, max_size=2),
        "tools": st.fixed_dictionaries(
            {}, optional={"approvalMode": st.sampled_from(["write", "nope"])}
        ),
        "extra": json_values,
    },
)
nodes = st.fixed_dictionaries(
    {
        "id": ids,
        "label": st.text(max_size=4),
        "kind": st.sampled_from(["agent", "Agent", "robot"]),
        "position": st.fixed_dictionaries({"x": st.floats(-1e6, 1e6), "y": st.floats(-1e6, 1e6)}),
        "agent": agents,
    }
)
edges = st.fixed_dictionaries({"id": st.sampled_from(["e1", "e2", "e3"]), "from": ids, "to": ids})
workflowish = st.fixed_dictionaries(
    {
        "id": st.text(max_size=4),
        "name": st.text(max_size=4),
        "nodes": st.lists(nodes, max_size=4),
        "edges": st.lists(edges, max_size=5),
    },
    optional={
        "settings": st.fixed_dictionaries(
            {},
            optional={
                "planMode": st.fixed_dictionaries({"evidenceSourceNodeId": ids}),
                "retry_policy": json_values,
                "strictLayers": st.booleans(),
            },
        )
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, workflowish))
def test_any_json_is_either_a_workflow_or_a_clear_error(document: Any) -> None:
    text = json.dumps(document)
    try:
        wf = Workflow.load_json(text)
    except WorkflowFormatError as exc:
        assert str(exc) and "\n" not in str(exc)
        return

    problems = workflow_problems(wf)
    try:
        validate_workflow(wf)
    except WorkflowValidationError as exc:
        assert problems and exc == problems[0]
    else:
        assert problems == []
        layers = execution_layers(wf)
        assert sorted(n for layer in layers for n in layer) == sorted(wf.node_ids)
    assert Workflow.load_json(wf.to_json()) == wf


def test_problems_do_not_mutate_the_workflow() -> None:
    data = diamond()
    wf = load(data)
    before = copy.deepcopy(wf.to_json_dict())

    workflow_problems(wf)
    execution_layers(wf)

    assert wf.to_json_dict() == before
