"""Workflow validation (spec 2.1), execution layers (spec 2.2) and node ancestry.

`validate_workflow` raises the first problem in the spec's order; `workflow_problems` lists
them all in the same order, for editors and `openflow validate`. Every message names the node
or edge at fault and says what to change. The limits of `engine.limits` come first: a workflow
over one of them gets only those problems, and no other rule looks at it.
"""

from __future__ import annotations

import functools
import json
import unicodedata
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import networkx as nx
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from openflow.engine.errors import UnknownNodeError, ValidationCode, WorkflowValidationError
from openflow.engine.limits import (
    MAX_EDGES,
    MAX_JSON_DEPTH,
    MAX_NODES,
    MAX_WORKFLOW_BYTES,
    Limit,
    schema_limit_problem,
)
from openflow.engine.spec import (
    MCP_CONTEXT_MAX_BYTES,
    MarkdownHandoff,
    Node,
    Workflow,
    effective_output_schema,
    template_headings,
)

MAX_MCP_SELECTIONS = 64
MAX_MCP_SERVER_ID_BYTES = 128
MAX_MCP_SOURCE_BYTES = 4096
MAX_MCP_PROMPT_ARGUMENTS = 64
MAX_MCP_ARGUMENT_NAME_BYTES = 256
MAX_MCP_ARGUMENT_VALUE_BYTES = 16_384
_MAX_DETAIL_CHARS = 300


def validate_workflow(wf: Workflow, *, limits: bool = True) -> None:
    """Raise the first WorkflowValidationError in the spec's order, or return if valid."""
    first = next(_problems(wf, limits), None)
    if first is not None:
        raise first


def workflow_problems(wf: Workflow, *, limits: bool = True) -> list[WorkflowValidationError]:
    """Every problem of the workflow, in the order `validate_workflow` checks them.

    `limits=False` leaves out the limits (runs recorded before them replay as they ran).
    """
    return list(_problems(wf, limits))


def limit_problems(wf: Workflow) -> list[WorkflowValidationError]:
    """The limits the workflow is over (code `LimitExceeded`, `detail` the limit's name)."""
    return list(_limit_problems(wf))


def execution_layers(wf: Workflow) -> list[list[str]]:
    """Kahn layers by depth, each sorted by node id; raises if the workflow is invalid."""
    validate_workflow(wf)
    return _layers(wf) or []


def parents(wf: Workflow, node_id: str) -> list[str]:
    """The direct upstream node ids of `node_id`, sorted."""
    return list(_topology(wf, node_id).parents[node_id])


def parents_map(wf: Workflow) -> Mapping[str, Sequence[str]]:
    """Every node's direct upstream node ids, sorted (read-only; the same object per workflow)."""
    if not wf.nodes:
        return {}
    return _topology(wf, wf.nodes[0].id).parents


def children(wf: Workflow, node_id: str) -> list[str]:
    """The direct downstream node ids of `node_id`, sorted."""
    return list(_topology(wf, node_id).children[node_id])


def ancestors(wf: Workflow, node_id: str) -> list[str]:
    """Every node `node_id` transitively depends on, sorted."""
    return list(_topology(wf, node_id).ancestors(node_id))


def descendants(wf: Workflow, node_id: str) -> list[str]:
    """Every node that transitively depends on `node_id`, sorted."""
    return list(_topology(wf, node_id).descendants(node_id))


def execution_depths(wf: Workflow) -> dict[str, int]:
    """Each node's execution layer (Kahn by depth, spec 2.2); nodes on a cycle get none."""
    if not wf.nodes:
        return {}
    return dict(_topology(wf, wf.nodes[0].id).depths)


class _Topology:
    """Parent, child and ancestor lists of one workflow shape, computed once and shared."""

    def __init__(self, shape: tuple[tuple[str, ...], tuple[tuple[str, str], ...]]) -> None:
        nodes, edges = shape
        known = set(nodes)
        ups: dict[str, set[str]] = {n: set() for n in nodes}
        downs: dict[str, set[str]] = {n: set() for n in nodes}
        for src, dst in edges:
            if src != dst and src in known and dst in known:
                ups[dst].add(src)
                downs[src].add(dst)
        self.parents = {n: tuple(sorted(v)) for n, v in ups.items()}
        self.children = {n: tuple(sorted(v)) for n, v in downs.items()}
        self._ancestors: dict[str, tuple[str, ...]] = {}

        self._depths: dict[str, int] | None = None

    def ancestors(self, node_id: str) -> tuple[str, ...]:
        found = self._ancestors.get(node_id)
        if found is None:
            found = self._ancestors[node_id] = _reach(self.parents, node_id)
        return found

    def descendants(self, node_id: str) -> tuple[str, ...]:
        return _reach(self.children, node_id)

    @property
    def depths(self) -> dict[str, int]:
        """Kahn by depth: a node's layer is one past its deepest parent's; a cycle gets none."""
        if self._depths is None:
            depths: dict[str, int] = {}
            pending = sorted(self.parents)
            while pending:
                placed = [n for n in pending if all(p in depths for p in self.parents[n])]
                if not placed:
                    break
                for n in placed:
                    depths[n] = 1 + max((depths[p] for p in self.parents[n]), default=-1)
                pending = [n for n in pending if n not in depths]
            self._depths = depths
        return self._depths

    def layers(self) -> list[list[str]] | None:
        """The nodes by layer, each sorted by id, or None when the edges form a cycle."""
        depths = self.depths
        if len(depths) < len(self.parents):
            return None
        layers: list[list[str]] = [[] for _ in range(1 + max(depths.values(), default=-1))]
        for node_id in sorted(depths):
            layers[depths[node_id]].append(node_id)
        return layers


def _reach(edges: Mapping[str, Sequence[str]], node_id: str) -> tuple[str, ...]:
    """Every node reachable from `node_id` along `edges` (itself left out), sorted."""
    seen: set[str] = set()
    stack = list(edges[node_id])
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(edges[current])
    seen.discard(node_id)
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=256)
def _topology_of(shape: tuple[tuple[str, ...], tuple[tuple[str, str], ...]]) -> _Topology:
    return _Topology(shape)


_recent: dict[int, tuple[weakref.ref[Workflow], int, int, _Topology]] = {}


def _topology(wf: Workflow, node_id: str) -> _Topology:
    """The workflow's topology; the same workflow object asks only once."""
    known = _recent.get(id(wf))
    if (
        known is not None
        and known[0]() is wf
        and known[1] == len(wf.nodes)
        and known[2] == len(wf.edges)
    ):
        topology = known[3]
    else:
        shape = (
            tuple(node.id for node in wf.nodes),
            tuple((edge.from_, edge.to) for edge in wf.edges),
        )
        topology = _topology_of(shape)
        if len(_recent) > 256:
            _recent.clear()
        _recent[id(wf)] = (weakref.ref(wf), len(wf.nodes), len(wf.edges), topology)
    if node_id not in topology.parents:
        raise UnknownNodeError(node_id, wf.id)
    return topology


def roots(wf: Workflow) -> list[str]:
    """The node ids without upstream nodes (they receive the entrypoint), sorted."""
    return sorted(node_id for node_id, ups in parents_map(wf).items() if not ups)


def dependency_graph(wf: Workflow) -> Any:
    """The workflow as a `networkx.DiGraph` over its valid edges (parent -> child)."""
    return _graph(wf)


def _graph(wf: Workflow) -> Any:
    graph = nx.DiGraph()
    graph.add_nodes_from(node.id for node in wf.nodes)
    for edge in wf.edges:
        if edge.from_ != edge.to and edge.from_ in graph and edge.to in graph:
            graph.add_edge(edge.from_, edge.to)
    return graph


def _layers(wf: Workflow) -> list[list[str]] | None:
    """Kahn layering over the valid edges, or None when they form a cycle."""
    if not wf.nodes:
        return []
    return _topology(wf, wf.nodes[0].id).layers()


def _problems(wf: Workflow, limits: bool = True) -> Iterator[WorkflowValidationError]:
    if limits:
        over = list(_limit_problems(wf))
        if over:
            yield from over
            return
    if not wf.nodes:
        yield _error("EmptyWorkflow", "the workflow has no nodes — add at least one node")
    yield from _duplicate_nodes(wf)
    for node in wf.nodes:
        yield from _output_contract(node)
    for node in wf.nodes:
        yield from _mcp_selections(node)
    yield from _edges(wf)
    yield from _plan_mode(wf)
    yield from _layering(wf)


def _error(
    code: ValidationCode,
    message: str,
    *,
    node_id: str | None = None,
    edge_id: str | None = None,
    detail: str = "",
) -> WorkflowValidationError:
    return WorkflowValidationError(code, message, node_id=node_id, edge_id=edge_id, detail=detail)


def _over(limit: Limit, message: str, node_id: str | None = None) -> WorkflowValidationError:
    return _error("LimitExceeded", message, node_id=node_id, detail=limit.name)


def _limit_problems(wf: Workflow) -> Iterator[WorkflowValidationError]:
    if len(wf.nodes) > MAX_NODES.value:
        fix = "split it into smaller workflows"
        yield _over(MAX_NODES, MAX_NODES.message("the workflow", len(wf.nodes), fix, verb="has"))
    if len(wf.edges) > MAX_EDGES.value:
        fix = "split it into smaller workflows"
        yield _over(MAX_EDGES, MAX_EDGES.message("the workflow", len(wf.edges), fix, verb="has"))
    if len(wf.nodes) > MAX_NODES.value or len(wf.edges) > MAX_EDGES.value:
        return
    deep = False
    for node in wf.nodes:
        found = schema_limit_problem(node.agent.output_schema, f"node {node.id!r}: output_schema")
        if found is not None:
            deep = deep or found[0].name == "max_schema_depth"
            yield _over(found[0], found[1], node_id=node.id)
    if deep:
        return  # the workflow cannot be measured as JSON safely
    try:
        size = len(wf.model_dump_json(by_alias=True).encode("utf-8", "surrogatepass"))
        # Resolved MCP context has limits of its own (spec 2.1) and is not the workflow's text.
        size -= sum(
            len(json.dumps(snapshot.content, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            for node in wf.nodes
            for snapshot in node.agent.mcp_context_snapshots
        )
    except (ValueError, RecursionError):
        # Only a workflow built in code can hold values this deep (files and bodies are
        # measured before they are parsed).
        fix = "flatten the values of its unknown keys"
        deeper = f"the workflow nests deeper than {MAX_JSON_DEPTH.name} — {fix}"
        yield _over(MAX_JSON_DEPTH, deeper)
        return
    if size > MAX_WORKFLOW_BYTES.value:
        fix = "shorten its prompts and schemas, or split it into smaller workflows"
        yield _over(MAX_WORKFLOW_BYTES, MAX_WORKFLOW_BYTES.message("the workflow", size, fix))


def _duplicate_nodes(wf: Workflow) -> Iterator[WorkflowValidationError]:
    seen: set[str] = set()
    reported: set[str] = set()
    for node in wf.nodes:
        if node.id in seen and node.id not in reported:
            reported.add(node.id)
            yield _error(
                "DuplicateNodeId",
                f"node {node.id!r}: more than one node has this id — give each node a unique id",
                node_id=node.id,
                detail="duplicate node id",
            )
        seen.add(node.id)


def _output_contract(node: Node) -> Iterator[WorkflowValidationError]:
    handoff = node.agent.handoff
    if isinstance(handoff, MarkdownHandoff):
        if not template_headings(handoff.template):
            detail = "template requires at least one Markdown heading"
            yield _error(
                "InvalidHandoffTemplate",
                f"node {node.id!r}: the Markdown handoff template has no heading — add at "
                "least one heading line such as '## Summary'",
                node_id=node.id,
                detail=detail,
            )
        return
    problem = schema_problem(effective_output_schema(node.agent))
    if problem is not None:
        yield _error(
            "InvalidOutputSchema",
            f"node {node.id!r}: output_schema is not a valid JSON Schema: {problem} — fix the "
            "schema",
            node_id=node.id,
            detail=problem,
        )


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` is not a usable JSON Schema (draft 2020-12 unless `$schema` says), or None."""
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return _check_schema(schema)
    return _cached_schema_problem(canonical)


@functools.lru_cache(maxsize=1024)
def _cached_schema_problem(canonical: str) -> str | None:
    # Checking against the meta-schema costs about half a millisecond; nodes often share one.
    return _check_schema(json.loads(canonical))


def _check_schema(schema: dict[str, Any]) -> str | None:
    meta = schema.get("$schema")
    if meta is not None and not isinstance(meta, str):
        return "$schema must be a meta-schema URI string"
    try:
        if meta is None:
            cls: Any = Draft202012Validator
        else:
            cls = cast(Any, validator_for)(schema, default=None)
            if cls is None:
                return f"$schema {meta!r} is not a JSON Schema draft this engine knows"
        cls.check_schema(schema)
    except SchemaError as exc:
        return _one_line(f"{exc.message} (at {exc.json_path})")
    except RecursionError:
        return "the schema is nested too deeply"
    return None


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _MAX_DETAIL_CHARS:
        flat = flat[: _MAX_DETAIL_CHARS - 3] + "..."
    return flat


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def _mcp_selections(node: Node) -> Iterator[WorkflowValidationError]:
    for detail in _mcp_details(node):
        yield _error(
            "InvalidMcpContextSelection",
            f"node {node.id!r}: MCP context selection is invalid: {detail} — fix the node's "
            "mcpResources/mcpPrompts",
            node_id=node.id,
            detail=detail,
        )


def _mcp_details(node: Node) -> Iterator[str]:
    agent = node.agent
    count = len(agent.mcp_resources) + len(agent.mcp_prompts)
    if count > MAX_MCP_SELECTIONS:
        yield (f"at most {MAX_MCP_SELECTIONS} resources and prompts may be selected, found {count}")
    selections = [
        (f"mcpResources[{i}]", s.server_id, "uri", s.uri, s.max_bytes)
        for i, s in enumerate(agent.mcp_resources)
    ] + [
        (f"mcpPrompts[{i}]", s.server_id, "name", s.name, s.max_bytes)
        for i, s in enumerate(agent.mcp_prompts)
    ]
    requested = 0
    for where, server_id, source_key, source, max_bytes in selections:
        if (
            not server_id.strip()
            or _utf8_len(server_id) > MAX_MCP_SERVER_ID_BYTES
            or ("/" in server_id)
        ):
            yield (f"{where}: serverId must be 1-{MAX_MCP_SERVER_ID_BYTES} characters without '/'")
        if not source.strip() or _utf8_len(source) > MAX_MCP_SOURCE_BYTES or _has_control(source):
            yield (f"{where}: {source_key} must be 1-{MAX_MCP_SOURCE_BYTES} printable characters")
        if not 1 <= max_bytes <= MCP_CONTEXT_MAX_BYTES:
            yield f"{where}: maxBytes must be 1-{MCP_CONTEXT_MAX_BYTES}, found {max_bytes}"
        requested += max(max_bytes, 0)
    if requested > MCP_CONTEXT_MAX_BYTES:
        yield (
            f"the combined maxBytes of all selections must not exceed {MCP_CONTEXT_MAX_BYTES} "
            f"bytes, found {requested}"
        )
    for i, prompt in enumerate(agent.mcp_prompts):
        arguments = prompt.arguments
        if len(arguments) > MAX_MCP_PROMPT_ARGUMENTS or any(
            not name.strip()
            or _utf8_len(name) > MAX_MCP_ARGUMENT_NAME_BYTES
            or _has_control(name)
            or _utf8_len(value) > MAX_MCP_ARGUMENT_VALUE_BYTES
            for name, value in arguments.items()
        ):
            yield (
                f"mcpPrompts[{i}]: arguments exceed the limits (at most "
                f"{MAX_MCP_PROMPT_ARGUMENTS} arguments, names 1-{MAX_MCP_ARGUMENT_NAME_BYTES} "
                f"printable characters, values at most {MAX_MCP_ARGUMENT_VALUE_BYTES} bytes)"
            )
    resolved = sum(_utf8_len(snapshot.content) for snapshot in agent.mcp_context_snapshots)
    if resolved > MCP_CONTEXT_MAX_BYTES:
        yield (
            f"resolved MCP context must not exceed {MCP_CONTEXT_MAX_BYTES} bytes, found {resolved}"
        )


def _edges(wf: Workflow) -> Iterator[WorkflowValidationError]:
    node_ids = {node.id for node in wf.nodes}
    seen: set[str] = set()
    for edge in wf.edges:
        if edge.id in seen:
            yield _error(
                "DuplicateEdgeId",
                f"edge {edge.id!r}: more than one edge has this id — give each edge a unique id",
                edge_id=edge.id,
                detail="duplicate edge id",
            )
        seen.add(edge.id)
        if edge.from_ == edge.to:
            yield _error(
                "SelfEdge",
                f"edge {edge.id!r}: connects node {edge.from_!r} to itself — remove the edge "
                "or point it at another node",
                edge_id=edge.id,
                node_id=edge.from_,
                detail="edge connects a node to itself",
            )
        for end, missing in (("from", edge.from_), ("to", edge.to)):
            if missing not in node_ids:
                yield _error(
                    "MissingEndpoint",
                    f"edge {edge.id!r}: '{end}' names node {missing!r}, which does not exist — "
                    "point it at an existing node or remove the edge",
                    edge_id=edge.id,
                    node_id=missing,
                    detail=f"edge references missing node {missing!r}",
                )


def _plan_mode(wf: Workflow) -> Iterator[WorkflowValidationError]:
    plan_mode = wf.settings.plan_mode
    if plan_mode is None:
        return
    source_id = plan_mode.evidence_source_node_id
    source = wf.find_node(source_id)
    if source is None:
        yield _error(
            "PlanModeSourceMissing",
            f"settings.planMode: evidence source node {source_id!r} does not exist — pick an "
            "existing node or turn plan mode off",
            node_id=source_id,
            detail="plan mode source node does not exist",
        )
    elif not source.agent.request_user_input:
        yield _error(
            "PlanModeSourceNotInteractive",
            f"node {source_id!r}: it is the plan mode evidence source but does not allow user "
            "input — set its requestUserInput to true or pick another node",
            node_id=source_id,
            detail="plan mode source node must allow user input",
        )


def _layering(wf: Workflow) -> Iterator[WorkflowValidationError]:
    if not wf.nodes:
        return
    layers = _layers(wf)
    if layers is None:
        yield _cycle_error(wf)
        return
    unique_ids = {node.id for node in wf.nodes}
    flat = [node_id for layer in layers for node_id in layer]
    if len(flat) != len(unique_ids) or set(flat) != unique_ids:
        detail = f"layering reached {len(flat)} of {len(unique_ids)} nodes"
        yield _error(
            "InternalConsistency",
            f"internal consistency: {detail} — this is a bug in the engine; please report it "
            "with the workflow file",
            detail=detail,
        )


def _cycle_error(wf: Workflow) -> WorkflowValidationError:
    graph = _graph(wf)
    cycle = [(str(u), str(v)) for u, v in nx.find_cycle(graph)]
    edge_ids = [next(e.id for e in wf.edges if e.from_ == u and e.to == v) for u, v in cycle]
    path = " -> ".join([repr(u) for u, _ in cycle] + [repr(cycle[0][0])])
    names = ", ".join(repr(edge_id) for edge_id in edge_ids)
    return _error(
        "Cycle",
        f"the edges form a cycle {path} (edges {names}) — remove one of these edges so the "
        "workflow has no cycle",
        node_id=cycle[0][0],
        edge_id=edge_ids[0],
        detail=f"cycle {path}",
    )


__all__ = [
    "MAX_MCP_ARGUMENT_NAME_BYTES",
    "MAX_MCP_ARGUMENT_VALUE_BYTES",
    "MAX_MCP_PROMPT_ARGUMENTS",
    "MAX_MCP_SELECTIONS",
    "MAX_MCP_SERVER_ID_BYTES",
    "MAX_MCP_SOURCE_BYTES",
    "ancestors",
    "children",
    "dependency_graph",
    "descendants",
    "execution_depths",
    "execution_layers",
    "limit_problems",
    "parents",
    "roots",
    "schema_problem",
    "validate_workflow",
    "workflow_problems",
]
