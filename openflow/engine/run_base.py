"""The working copy of a run while facts are folded in: bookkeeping and request building.

`RunBase` holds the forked snapshot, emits events, keeps transcripts, and builds each node's
request (system messages, node input, offered tools, transcript delta). The turn machine
(`turn.Turns`) and the reducer (`advance`) build on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from openflow.engine import prompts
from openflow.engine.events import (
    Error,
    NodeErrored,
    PhaseTimed,
    RunEvent,
    ToolCompleted,
    stamped,
)
from openflow.engine.graph import ancestors, parents, parents_map
from openflow.engine.harness import cache_key_for, harness_tool_specs
from openflow.engine.policy import (
    Tier,
    planning_tool_names,
    tool_tier,
)
from openflow.engine.protocol import (
    EVENT_ADAPTER,
)
from openflow.engine.request import AgentRequest
from openflow.engine.spec import (
    Node,
    Workflow,
    submission_schema,
)
from openflow.engine.state import (
    Intent,
    NodeState,
    PendingBatch,
    RunSnapshot,
    StoredItemRef,
    TranscriptDelta,
    in_place,
    pack_refs,
)
from openflow.engine.transcript import (
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    TranscriptItem,
)


class RunBase:
    """A mutable working copy of the snapshot: bookkeeping and request building."""

    def __init__(self, snapshot: RunSnapshot, now_ms: int) -> None:
        self.s = snapshot.fork()
        self.now = now_ms
        self.events: list[RunEvent] = []
        self.intents: list[Intent] = []
        self.wf: Workflow = self.s.workflow
        self.by_id: dict[str, Node] = {n.id: n for n in self.wf.nodes}
        self._parents: Mapping[str, Sequence[str]] | None = None
        self._ancestors: dict[str, list[str]] = {}
        self._forked: set[str] = set()

    def parents_of(self, node_id: str) -> Sequence[str]:
        """Direct parents (the workflow never changes in a run)."""
        if self._parents is None:
            self._parents = parents_map(self.wf)
        found = self._parents.get(node_id)
        return found if found is not None else parents(self.wf, node_id)

    def ancestors_of(self, node_id: str) -> list[str]:
        found = self._ancestors.get(node_id)
        if found is None:
            found = self._ancestors[node_id] = ancestors(self.wf, node_id)
        return found

    # --- small helpers ------------------------------------------------------------------

    def emit(self, event: RunEvent) -> None:
        """Append an event to the step's log, numbered and timed."""
        self.s.event_seq += 1
        self.events.append(stamped(event, seq=self.s.event_seq, at_ms=self.now))

    def time_model(self, node_id: str, ms: int | None) -> None:
        """Spec 9.1's `PhaseTimed` ai_invoke, from the duration the model call measured."""
        if ms is not None:
            label = self.by_id[node_id].label if node_id in self.by_id else node_id
            self.emit(PhaseTimed(phase="ai_invoke", label=label, node_id=node_id, duration_ms=ms))

    def time_tool(self, node_id: str, tool: str, ms: tuple[int, ...], index: int) -> None:
        """Spec 9.1's `PhaseTimed` tool, from the durations the batch measured."""
        if index < len(ms):
            self.emit(PhaseTimed(phase="tool", label=tool, node_id=node_id, duration_ms=ms[index]))

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
        self.s.event_seq += 1
        self.events.append(event.model_copy(update={"seq": self.s.event_seq, "at_ms": self.now}))

    def new_id(self, prefix: str) -> str:
        n = self.s.next_id
        self.s.next_id += 1
        return f"{prefix}-{n}"

    def label(self, node_id: str) -> str:
        node = self.by_id.get(node_id)
        return node.label if node is not None else node_id

    def node(self, node_id: str) -> NodeState:
        """The node's state, copied on first use in this step (nodes not touched are shared)."""
        if node_id not in self._forked:
            self.s.nodes[node_id] = self.s.nodes[node_id].fork()
            self._forked.add(node_id)
        return self.s.nodes[node_id]

    def append(
        self, node_id: str, item: TranscriptItem, origin: StoredItemRef | None = None
    ) -> None:
        ns = self.node(node_id)
        ns.transcript.append(item)
        ns.origins.append(origin)

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

    def reset_protocol(self, ns: NodeState, keep_auto_continue: bool = False) -> None:
        streak = ns.counters.auto_continue
        ns.counters = type(ns.counters)()
        if keep_auto_continue:
            ns.counters.auto_continue = streak
        ns.transient_streak = 0
        ns.backoff_until_ms = None

    def fail_node(self, node_id: str, error: str) -> None:
        ns = self.node(node_id)
        newly = ns.failed is None
        ns.failed = error
        ns.awaiting = False
        if newly:
            ns.errored_attempt = ns.model_attempt
            self.emit(
                NodeErrored(
                    node_id=node_id,
                    label=self.label(node_id),
                    error=error,
                    model_attempt=ns.model_attempt,
                )
            )

    def terminal(self, node_id: str, error: str) -> None:
        if self.s.terminal_error is None:
            self.s.terminal_error = error
            self.s.terminal_node = node_id

    def close_dangling(self, node_id: str, content: str) -> None:
        """Give every tool call of the node without a result an error result (spec 5.5).

        Calls still queued and the call a running subagent answers are not dangling.
        """
        ns = self.node(node_id)
        answered = {
            item.result.tool_call_id for item in ns.transcript if isinstance(item, ToolResultItem)
        }
        pending = {c.id for b in self.node_batches(node_id) for c in b.calls}
        if ns.child is not None:
            pending.add(ns.child.call.id)
        open_calls = [
            item.call
            for item in ns.transcript
            if isinstance(item, ToolCallItem)
            and item.call.id not in answered
            and item.call.id not in pending
        ]
        for call in open_calls:
            answered.add(call.id)
            self.add_result(node_id, call, content, is_error=True)

    def add_result(
        self,
        node_id: str,
        call: ToolCall,
        content: str,
        is_error: bool,
        origin: StoredItemRef | None = None,
        artifact_ids: tuple[str, ...] = (),
        output_meta: dict[str, Any] | None = None,
    ) -> None:
        result = ToolResult(
            tool_call_id=call.id,
            tool_name=call.name,
            content=content,
            is_error=is_error,
            artifact_ids=artifact_ids,
            output_meta=output_meta,
        )
        self.append(node_id, ToolResultItem(result=result), origin)
        self.emit(
            ToolCompleted(
                node_id=node_id,
                tool_call_id=call.id,
                tool_name=call.name,
                content=content,
                is_error=is_error,
                artifact_ids=list(artifact_ids),
                output_meta=output_meta,
            )
        )

    def node_batches(self, node_id: str) -> list[PendingBatch]:
        return [b for b in self.s.batches.values() if b.node_id == node_id]

    # --- request building ---------------------------------------------------------------

    def system_messages(self, node: Node) -> list[str]:
        agent = node.agent
        messages: list[str] = []
        own = (agent.system_prompt or "").strip()
        plan_source = self.is_plan_source(node.id)
        if prompts.RUNTIME_MARKER not in own:
            messages.append(prompts.RUNTIME_PREAMBLE)
        if plan_source:
            messages.append(prompts.PLAN_SOURCE_BLOCK)
        if not agent.request_user_input and not plan_source:
            messages.append(prompts.AUTONOMOUS_BLOCK)
        if agent.conversation_mode:
            messages.append(prompts.CONVERSATION_BLOCK)
        block = prompts.handoff_block(
            agent.handoff.format, getattr(agent.handoff, "template", None)
        )
        if block:
            messages.append(block)
        if self.s.project_root:
            messages.append(prompts.project_block(self.s.project_root))
        if own:
            messages.append(own)
        shared = (self.wf.settings.shared_context or "").strip()
        if shared:
            messages.append(f"--- Workflow context ---\n{shared}")
        return messages

    def node_input(self, node_id: str) -> dict[str, Any]:
        upstream: list[dict[str, Any]] = []
        for parent in self.parents_of(node_id):
            pn = self.s.nodes.get(parent)
            if pn is None or not pn.has_output:
                continue
            entry: dict[str, Any] = {"node_id": parent, "output": pn.output}
            if pn.handoff is not None:
                entry["handoff"] = pn.handoff
            upstream.append(entry)
        data: dict[str, Any] = {}
        if not upstream and self.s.entrypoint_text.strip():
            data["entrypoint"] = {"text": self.s.entrypoint_text}
        data["upstream"] = upstream
        changed: dict[str, dict[str, Any]] = {}
        reads: list[dict[str, Any]] = []
        for anc in self.ancestors_of(node_id):
            an = self.s.nodes.get(anc)
            if an is None:
                continue
            for record in an.changed_files:
                path = str(record.get("rename_to") or record.get("path", ""))
                prior = changed.get(path)
                if prior is None or int(record.get("timestamp_ms", 0)) >= int(
                    prior.get("timestamp_ms", 0)
                ):
                    changed[path] = record
            reads.extend(an.reads)
        if changed:
            data["changed_files"] = [
                {
                    k: v
                    for k, v in (
                        ("path", r.get("path")),
                        ("op", r.get("op")),
                        ("renameTo", r.get("rename_to")),
                        ("diffSummary", r.get("diff_summary")),
                    )
                    if v is not None
                }
                for _, r in sorted(changed.items())
            ]
        if reads and self.wf.settings.forward_upstream_reads:
            data["reads"] = [
                {k: v for k, v in (("path", r.get("path")), ("outline", r.get("outline"))) if v}
                for r in reads
            ]
        if self.s.packet is not None:
            data["change_evidence_packet"] = self.s.packet.as_input()
        return data

    def tier_of(self, name: str, arguments: dict[str, Any] | None = None) -> Tier:
        """A call's approval tier: by name, or a read when the run's settings say the tool only
        reads (an MCP server marked `read`; the original always asked for those)."""
        if name in self.s.read_tools:
            return "read"
        return tool_tier(name, arguments)

    def offered_tools(self, node_id: str) -> list[str]:
        names = self.s.tool_names or []
        read_only = self.approval_mode(node_id) == "read_only"
        if self.s.planning:
            return planning_tool_names(
                names, read_only=read_only, is_source=node_id == self.s.plan_source
            )
        if read_only:
            return [n for n in names if self.tier_of(n) == "read"]
        return list(names)

    def node_model(self, node_id: str) -> str:
        patched = self.node(node_id).runtime_patch.get("model")
        return str(patched or self.by_id[node_id].agent.model or "").strip()

    def build_request(self, node_id: str) -> AgentRequest | None:
        node = self.by_id[node_id]
        agent = node.agent
        ns = self.node(node_id)
        patch = ns.runtime_patch
        model = self.node_model(node_id)
        if not model:
            self.terminal(
                node_id,
                f'node "{node.label}" has no model configured — select a model '
                "(or a provider profile with a default_model) before running",
            )
            return None
        tools_cfg = agent.tools
        effort = patch.get("reasoning_effort", agent.reasoning_effort)
        budget = patch.get("reasoning_budget_tokens", agent.reasoning_budget_tokens)
        tool_names = self.offered_tools(node_id)
        conversation = bool(agent.conversation_mode)
        request = AgentRequest(
            workflow_id=self.wf.id,
            run_id=self.s.run_id,
            node_id=node_id,
            node_label=node.label,
            model=model,
            provider_id=agent.provider_id or self.wf.settings.provider_id,
            system_messages=tuple(self.system_messages(node)),
            task_prompt=agent.task_prompt,
            input=self.node_input(node_id),
            output_schema=submission_schema(agent),
            tool_names=tuple(tool_names),
            tool_choice="auto" if conversation else "required",
            reasoning_effort=effort if isinstance(effort, str) else None,
            reasoning_budget_tokens=budget if isinstance(budget, int) else None,
            fast_mode=bool(patch.get("fast_mode", self.wf.settings.fast_mode)),
            tool_access_policy="planning" if self.s.planning else "execution",
            allow_user_input=self.conversational(node_id),
            conversation_mode=conversation,
            cache_key=cache_key_for(self.wf.id, node_id, tool_names),
            turn_index=ns.calls_done,
        )
        harness = harness_tool_specs(
            request,
            allow_free_text_input=bool(tools_cfg.allow_free_text_user_input),
            allow_structured_input=bool(tools_cfg.allow_structured_user_input),
        )
        return request.model_copy(update={"harness_tools": tuple(harness)})

    def delta(self, node_id: str) -> TranscriptDelta:
        """What the next call must append: stored references, or the items themselves once a
        call found its references missing from the run store (`inline_next`, then cleared)."""
        ns = self.node(node_id)
        start = max(ns.persisted_len - ns.transcript_offset, 0)
        inline = ns.inline_next
        ns.inline_next = False
        if not inline:
            # What the last model turn wrote to the transcript itself is there already.
            held = in_place(ns.origins[start:], ns.persisted_len)
            ns.persisted_len += held
            start += held
        items: list[Any] = []
        for item, origin in zip(ns.transcript[start:], ns.origins[start:], strict=True):
            items.append(origin if origin is not None and not inline else item)
        return TranscriptDelta(base_len=ns.persisted_len, items=pack_refs(items))


__all__ = ["RunBase"]
