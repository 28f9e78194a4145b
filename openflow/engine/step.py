"""One reducer step: the working copy of a run while facts are folded in.

`Step` holds the copied snapshot, the events and intents the step produces, and the run's
bookkeeping every other module of the reducer uses: numbering, labels, the node states (frozen:
a change replaces a node's state in the step's `nodes`), the graph around a node, and the
settings that decide what a node may do. The turn machine (`conversation`, `turn`, `subagents`), request building (`requests`), scheduling
(`schedule`) and the fact dispatch (`facts`) are plain functions over a `Step`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from openflow.engine.copies import replaced
from openflow.engine.events import Error, PhaseTimed, RunEvent, SubagentStatus, stamped
from openflow.engine.graph import ancestors, execution_depths, parents, parents_map
from openflow.engine.policy import Tier, tool_tier
from openflow.engine.protocol import EVENT_ADAPTER
from openflow.engine.spec import Node, Workflow
from openflow.engine.state import (
    Intent,
    NodeState,
    PendingBatch,
    RunSnapshot,
    SubagentRecord,
)


class Step:
    """A mutable working copy of the snapshot and what the step has produced so far."""

    def __init__(self, snapshot: RunSnapshot, now_ms: int) -> None:
        self.s = snapshot.fork()
        self.now = now_ms
        self.events: list[RunEvent] = []
        self.intents: list[Intent] = []
        self.wf: Workflow = self.s.workflow
        self.by_id: dict[str, Node] = {n.id: n for n in self.wf.nodes}
        self._parents: Mapping[str, Sequence[str]] | None = None
        self._ancestors: dict[str, list[str]] = {}
        self._depths: dict[str, int] | None = None

    # --- the graph (the workflow never changes in a run) --------------------------------

    def parents_of(self, node_id: str) -> Sequence[str]:
        if self._parents is None:
            self._parents = parents_map(self.wf)
        found = self._parents.get(node_id)
        return found if found is not None else parents(self.wf, node_id)

    def ancestors_of(self, node_id: str) -> list[str]:
        found = self._ancestors.get(node_id)
        if found is None:
            found = self._ancestors[node_id] = ancestors(self.wf, node_id)
        return found

    def depths(self) -> dict[str, int]:
        """Each node's execution layer (spec 2.2); nodes on a cycle get none."""
        if self._depths is None:
            self._depths = execution_depths(self.wf)
        return self._depths

    # --- events and ids -----------------------------------------------------------------

    def emit(self, event: RunEvent) -> None:
        """Append an event to the step's log, numbered and timed."""
        self.s.event_seq += 1
        self.events.append(stamped(event, seq=self.s.event_seq, at_ms=self.now))

    def emit_reported(self, node_id: str, data: dict[str, Any]) -> None:
        """An event a tool batch reported; one that is not a valid run event is noted, not kept."""
        fields = dict(data)
        type_ = str(fields.pop("type", ""))
        fields.pop("seq", None)
        fields.pop("at_ms", None)
        fields.setdefault("node_id", node_id)
        try:
            event = EVENT_ADAPTER.validate_python({"type": type_, "seq": 0, "at_ms": 0, **fields})
        except ValidationError:
            self.emit(Error(message=f"ignored tool event {type_!r} of node {node_id!r}"))
            return
        self.emit(event)

    def time_model(self, node_id: str, ms: int | None) -> None:
        """Spec 9.1's `PhaseTimed` ai_invoke, from the duration the model call measured."""
        if ms is not None:
            label = self.by_id[node_id].label if node_id in self.by_id else node_id
            self.emit(PhaseTimed(phase="ai_invoke", label=label, node_id=node_id, duration_ms=ms))

    def time_tool(self, node_id: str, tool: str, ms: tuple[int, ...], index: int) -> None:
        """Spec 9.1's `PhaseTimed` tool, from the durations the batch measured."""
        if index < len(ms):
            self.emit(PhaseTimed(phase="tool", label=tool, node_id=node_id, duration_ms=ms[index]))

    def new_id(self, prefix: str) -> str:
        n = self.s.next_id
        self.s.next_id += 1
        return f"{prefix}-{n}"

    # --- nodes --------------------------------------------------------------------------

    def label(self, node_id: str) -> str:
        node = self.by_id.get(node_id)
        return node.label if node is not None else node_id

    def node(self, node_id: str) -> NodeState:
        """The node's state as the step holds it now (frozen: `update_node` changes it)."""
        return self.s.nodes[node_id]

    def update_node(self, node_id: str, **changes: Any) -> NodeState:
        """Replace fields of a node's state (a shallow copy, not validated); the new state."""
        ns = replaced(self.s.nodes[node_id], changes)
        self.s.nodes[node_id] = ns
        return ns

    def node_batches(self, node_id: str) -> list[PendingBatch]:
        return [b for b in self.s.batches.values() if b.node_id == node_id]

    def terminal(self, node_id: str, error: str) -> None:
        """Fail the run (the first reason wins), attributed to `node_id`."""
        if self.s.terminal_error is None:
            self.s.terminal_error = error
            self.s.terminal_node = node_id

    def set_status(self, subagent_id: str, status: SubagentStatus) -> None:
        record = self.s.subagents.get(subagent_id)
        if record is not None:
            self.s.subagents[subagent_id] = replaced(record, {"status": status})

    def subagent_name(self, subagent_id: str) -> str:
        record: SubagentRecord | None = self.s.subagents.get(subagent_id)
        return record.name if record is not None else subagent_id

    # --- what a node may do -------------------------------------------------------------

    def is_plan_source(self, node_id: str) -> bool:
        """The pinned Plan Mode source while the run is still planning."""
        return self.s.planning and node_id == self.s.plan_source

    def conversational(self, node_id: str) -> bool:
        return bool(self.by_id[node_id].agent.request_user_input) or self.is_plan_source(node_id)

    def approval_mode(self, node_id: str) -> str:
        patched = self.node(node_id).runtime_patch.get("approval_mode")
        if isinstance(patched, str):
            return patched
        mode = self.by_id[node_id].agent.tools.approval_mode
        return str(mode) if mode else "write"

    def tier_of(self, name: str, arguments: dict[str, Any] | None = None) -> Tier:
        """A call's approval tier: by name, or a read when the run's settings say the tool only
        reads (an MCP server marked `read`; the original always asked for those)."""
        if name in self.s.read_tools:
            return "read"
        return tool_tier(name, arguments)

    def node_model(self, node_id: str) -> str:
        patched = self.node(node_id).runtime_patch.get("model")
        return str(patched or self.by_id[node_id].agent.model or "").strip()


__all__ = ["Step"]
