"""The per-node turn machine: what one model answer does to its node (spec 3, 4.3, 11, 3.9).

`Turns` is the working copy of a run while facts are folded in. It builds each node's request,
classifies replies and applies the turn protocol: completions (with Plan Mode's freeze gate),
tool calls (with the approval and Plan Mode policy), questions, text-only turns, errors and
their nudges, and output repair. The reducer in `advance` adds scheduling on top.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, assert_never

from pydantic import TypeAdapter, ValidationError

from openflow.engine import prompts
from openflow.engine.classify import (
    Completed,
    Message,
    NeedsUserInput,
    ToolCalls,
    TurnError,
    classify_failure,
    classify_reply,
    complete_submit,
)
from openflow.engine.events import RunEvent
from openflow.engine.graph import ancestors, parents
from openflow.engine.harness import cache_key_for, harness_tool_specs, submission_parameters
from openflow.engine.policy import (
    HARNESS_ASK_QUESTION,
    HARNESS_REQUEST_INPUT,
    HARNESS_SUBMIT,
    SEAL_TOOL,
    SEALED_FROM,
    approval_decision,
    batch_has_side_effects,
    plan_verdict,
    planning_tool_names,
    tool_tier,
)
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure
from openflow.engine.spec import (
    MAX_BACKOFF_MS,
    Node,
    Workflow,
    submission_schema,
    template_headings,
)
from openflow.engine.state import (
    CallModel,
    ChangeEvidencePacket,
    InFlightCall,
    Intent,
    NodeState,
    PendingBatch,
    RunSnapshot,
    SleepUntil,
    StoredItemRef,
    TranscriptDelta,
    WriteHandoff,
)
from openflow.engine.transcript import (
    AssistantItem,
    ReasoningItem,
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)

PROTOCOL_CAP = 3
AUTO_CONTINUE_CAP = 10
MAX_MODEL_ATTEMPT = 255
REPAIR_SUFFIX = "__output_repair"
_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
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
            items.append(
                ToolCallItem(
                    call=ToolCall(
                        id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        provider_call_id=call.provider_call_id,
                    )
                )
            )
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


class Turns:
    """A mutable working copy of the snapshot and the turn protocol of every node."""

    def __init__(self, snapshot: RunSnapshot, now_ms: int) -> None:
        self.s = snapshot.fork()
        self.now = now_ms
        self.events: list[RunEvent] = []
        self.intents: list[Intent] = []
        self.wf: Workflow = self.s.workflow
        self.by_id: dict[str, Node] = {n.id: n for n in self.wf.nodes}
        self._parents: dict[str, list[str]] = {}
        self._ancestors: dict[str, list[str]] = {}
        self._forked: set[str] = set()

    def parents_of(self, node_id: str) -> list[str]:
        """Direct parents, looked up once per step (the workflow never changes in a run)."""
        found = self._parents.get(node_id)
        if found is None:
            found = self._parents[node_id] = parents(self.wf, node_id)
        return found

    def ancestors_of(self, node_id: str) -> list[str]:
        found = self._ancestors.get(node_id)
        if found is None:
            found = self._ancestors[node_id] = ancestors(self.wf, node_id)
        return found

    # --- small helpers ------------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        self.s.event_seq += 1
        data = {"type": type_, "seq": self.s.event_seq, "at_ms": self.now, **fields}
        self.events.append(_EVENT.validate_python(data))

    def emit_reported(self, node_id: str, data: dict[str, Any]) -> None:
        """An event a tool batch reported; one that is not a valid run event is noted, not kept."""
        fields = dict(data)
        type_ = str(fields.pop("type", ""))
        fields.pop("seq", None)
        fields.pop("at_ms", None)
        fields.setdefault("node_id", node_id)
        try:
            event = _EVENT.validate_python({"type": type_, "seq": 0, "at_ms": 0, **fields})
        except ValidationError:
            self.emit("Error", message=f"ignored tool event {type_!r} of node {node_id!r}")
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
                "NodeErrored",
                node_id=node_id,
                label=self.label(node_id),
                error=error,
                model_attempt=ns.model_attempt,
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
            "ToolCompleted",
            node_id=node_id,
            tool_call_id=call.id,
            tool_name=call.name,
            content=content,
            is_error=is_error,
            artifact_ids=list(artifact_ids),
            output_meta=output_meta,
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

    def offered_tools(self, node_id: str) -> list[str]:
        names = self.s.tool_names or []
        read_only = self.approval_mode(node_id) == "read_only"
        if self.s.planning:
            return planning_tool_names(
                names, read_only=read_only, is_source=node_id == self.s.plan_source
            )
        if read_only:
            return [n for n in names if tool_tier(n) == "read"]
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
        ns = self.node(node_id)
        start = max(ns.persisted_len - ns.transcript_offset, 0)
        items: list[Any] = []
        for item, origin in zip(ns.transcript[start:], ns.origins[start:], strict=True):
            items.append(origin if origin is not None else item)
        return TranscriptDelta(base_len=ns.persisted_len, items=tuple(items))

    # --- model replies ------------------------------------------------------------------

    def on_reply(self, node_id: str, reply: ModelReply, reply_key: str) -> None:
        """Apply a node's classified reply (spec 3.4)."""
        ns = self.node(node_id)
        agent = self.by_id[node_id].agent
        self.report_usage(node_id, reply)
        headings = self.markdown_headings(node_id)
        result = classify_reply(reply, submission_schema(agent), headings)
        candidates = reply_items(reply)
        refs = {
            json.dumps(item.model_dump(mode="json"), sort_keys=True): StoredItemRef(
                store_key=reply_key, index=i
            )
            for i, item in enumerate(candidates)
        }

        def keep(item: TranscriptItem) -> None:
            key = json.dumps(item.model_dump(mode="json"), sort_keys=True)
            self.append(node_id, item, refs.get(key) if reply_key else None)

        for block in reply.reasoning:
            if block.type in ("text", "summary") and block.text.strip():
                self.emit("ChatMessage", node_id=node_id, role="thinking", content=block.text)
        if reply.text.strip() and not reply.streamed:
            self.emit("ChatMessage", node_id=node_id, role="assistant", content=reply.text.strip())
        reasoning: list[TranscriptItem] = (
            [ReasoningItem(blocks=reply.reasoning)] if reply.reasoning else []
        )
        outcome = result.outcome
        if isinstance(outcome, Completed):
            self.on_completed(node_id, outcome, reasoning, keep)
        elif isinstance(outcome, ToolCalls):
            self.on_tool_calls(node_id, outcome, reasoning, keep)
        elif isinstance(outcome, NeedsUserInput):
            if not self.conversational(node_id):
                self.text_only(node_id, outcome.assistant_message, reasoning, keep)
            else:
                self.on_input_request(node_id, outcome, reasoning, keep)
        elif isinstance(outcome, Message):
            if agent.conversation_mode:
                self.reset_protocol(ns)
                for item in reasoning:
                    keep(item)
                keep(AssistantItem(content=outcome.assistant_message))
                self.pause_for_input(node_id, None)
            else:
                self.text_only(node_id, outcome.assistant_message, reasoning, keep)
        elif isinstance(outcome, TurnError):
            self.on_error(node_id, outcome)
        else:
            assert_never(outcome)

    def report_usage(self, node_id: str, reply: ModelReply) -> None:
        if reply.usage is None:
            return
        self.s.tokens_in += reply.usage.prompt_tokens
        self.s.tokens_out += reply.usage.completion_tokens
        if reply.usage.cost_usd is not None:
            self.s.cost_usd = round((self.s.cost_usd or 0.0) + reply.usage.cost_usd, 6)
        self.emit(
            "UsageReported",
            node_id=node_id,
            usage=reply.usage.model_dump(),
            model=reply.model,
            max_context_tokens=reply.max_context_tokens,
        )

    def markdown_headings(self, node_id: str) -> list[str] | None:
        agent = self.by_id[node_id].agent
        if agent.handoff.format != "markdown":
            return None
        return template_headings(getattr(agent.handoff, "template", "") or "")

    def sealed(self, node_id: str) -> bool:
        """Whether the node's transcript holds a successful seal result with an artifact id."""
        return any(
            isinstance(item, ToolResultItem)
            and item.result.tool_name == SEAL_TOOL
            and not item.result.is_error
            and bool(item.result.artifact_ids)
            for item in self.node(node_id).transcript
        )

    def on_completed(
        self, node_id: str, outcome: Completed, reasoning: list[TranscriptItem], keep: Keep
    ) -> None:
        ns = self.node(node_id)
        agent = self.by_id[node_id].agent
        self.reset_protocol(ns)
        for item in reasoning:
            keep(item)
        if outcome.assistant_message.strip():
            self.append(node_id, AssistantItem(content=outcome.assistant_message.strip()))
        if self.is_plan_source(node_id) and not self.sealed(node_id):
            self.append(node_id, UserItem(content=prompts.PLAN_GATE_NUDGE))
            return
        fmt = agent.handoff.format
        if fmt in ("json", "markdown"):
            ns.handoff_job = {"output": outcome.output, "message": outcome.assistant_message}
            self.intents.append(WriteHandoff(node_id=node_id, format=fmt, output=outcome.output))
        else:
            self.store_output(node_id, outcome.output, None)

    def store_output(self, node_id: str, output: Any, handoff: dict[str, Any] | None) -> None:
        ns = self.node(node_id)
        ns.output = output
        ns.has_output = True
        ns.handoff = handoff
        if self.is_plan_source(node_id):
            self.s.packet = ChangeEvidencePacket.freeze(node_id, output)
        self.emit(
            "NodeCompleted",
            node_id=node_id,
            label=self.label(node_id),
            output=output,
            handoff=handoff,
        )

    def relativize(self, args: dict[str, Any]) -> dict[str, Any]:
        roots = [r.rstrip("/") for r in (self.s.project_root, self.s.execution_dir) if r]
        if not roots:
            return args

        def fix(value: Any) -> Any:
            if isinstance(value, str):
                for root in roots:
                    if value == root:
                        return "."
                    if value.startswith(root + "/"):
                        return value[len(root) + 1 :]
                return value
            if isinstance(value, list):
                return [fix(v) for v in value]
            return value

        return {k: fix(v) if k in ("path", "paths", "cwd") else v for k, v in args.items()}

    def call_decision(self, node_id: str, call: ToolCall, offered: set[str] | None) -> str:
        """`allow`, `prompt`, or the error result content of a call refused here (spec 4.3)."""
        args = call.arguments
        if call.name == "write" and args.get("content") is None:
            return prompts.MISSING_CONTENT_RESULT
        mode = self.approval_mode(node_id)
        verdict, reason = plan_verdict(
            call.name,
            args,
            plan_mode=self.s.plan_source is not None,
            planning=self.s.planning,
            is_source=node_id == self.s.plan_source,
            read_only=mode == "read_only",
        )
        if verdict == "deny":
            return prompts.denial_result(reason, by_user=False)
        decision = approval_decision(mode, tool_tier(call.name, args))
        if decision == "deny" and verdict == "normal":
            return prompts.denial_result(
                f"node {node_id!r} is read-only and {call.name!r} changes things", by_user=False
            )
        if offered is not None and call.name not in offered:
            return f"Tool unavailable: tool {call.name} is not offered to this node in this run"
        return verdict if verdict in ("allow", "prompt") else decision

    def on_tool_calls(
        self, node_id: str, outcome: ToolCalls, reasoning: list[TranscriptItem], keep: Keep
    ) -> None:
        ns = self.node(node_id)
        self.reset_protocol(ns)
        for item in reasoning:
            keep(item)
        if outcome.assistant_message.strip():
            keep(AssistantItem(content=outcome.assistant_message.strip()))
        offered = set(self.offered_tools(node_id)) if self.s.tool_names is not None else None
        surviving: list[tuple[ToolCall, str]] = []
        nudges: list[str] = []
        for raw in outcome.calls:
            args = self.relativize(raw.arguments)
            call = raw.model_copy(update={"arguments": args})
            if args == raw.arguments:
                keep(ToolCallItem(call=call))
            else:
                self.append(node_id, ToolCallItem(call=call))
            if raw.id in outcome.invalid_call_ids:
                self.add_result(
                    node_id,
                    call,
                    f"[invalid_args] {call.name}: arguments are not valid JSON — send one JSON "
                    "object with the tool's fields",
                    is_error=True,
                )
                continue
            decision = self.call_decision(node_id, call, offered)
            if decision not in ("allow", "prompt"):
                if decision == prompts.MISSING_CONTENT_RESULT:
                    nudges.append(prompts.MISSING_CONTENT_NUDGE)
                self.add_result(node_id, call, decision, is_error=True)
                continue
            surviving.append((call, decision))
        for text in dict.fromkeys(nudges):
            self.append(node_id, UserItem(content=text))
        if surviving:
            self.queue_batch(node_id, surviving)

    def queue_batch(self, node_id: str, surviving: list[tuple[ToolCall, str]]) -> None:
        calls = [c for c, _ in surviving]
        requires = any(d == "prompt" for _, d in surviving)
        batch_id = self.new_id("approval" if requires else "batch")
        batch = PendingBatch(
            batch_id=batch_id,
            node_id=node_id,
            calls=calls,
            requires_approval=requires,
            side_effects=batch_has_side_effects(
                [c.name for c in calls], [c.arguments for c in calls]
            ),
        )
        self.s.batches[batch_id] = batch
        label = self.label(node_id)
        for call in calls:
            self.emit("ToolCallProposed", node_id=node_id, label=label, tool_call=shown_call(call))
        if requires:
            self.announce_approval(batch_id)

    def announce_approval(self, batch_id: str) -> None:
        """Tell people a batch waits for their decision (one ToolApprovalRequested a batch)."""
        batch = self.s.batches[batch_id]
        calls = batch.calls
        first = calls[0]
        self.emit(
            "ToolApprovalRequested",
            request={
                "approvalId": batch_id,
                "nodeId": batch.node_id,
                "nodeLabel": self.label(batch.node_id),
                "toolCall": shown_call(first),
                "tier": tool_tier(first.name, first.arguments),
                "toolCalls": [shown_call(c) for c in calls],
            },
        )

    def record_seal(self, node_id: str, call: ToolCall, artifact_ids: tuple[str, ...]) -> None:
        """Point a successful seal call at its artifact instead of the plan text (spec 11)."""
        ns = self.node(node_id)
        for i, item in enumerate(ns.transcript):
            if isinstance(item, ToolCallItem) and item.call.id == call.id:
                args = {"artifact_id": artifact_ids[0], **SEALED_FROM}
                ns.transcript[i] = ToolCallItem(
                    call=item.call.model_copy(update={"arguments": args})
                )
                ns.origins[i] = None

    # --- text-only turns and questions --------------------------------------------------

    def wrote_recently(self, node_id: str) -> bool:
        for item in self.node(node_id).transcript[-40:]:
            if (
                isinstance(item, ToolResultItem)
                and item.result.tool_name == "write"
                and not item.result.is_error
            ):
                return True
        return False

    def text_only(
        self, node_id: str, text: str, reasoning: list[TranscriptItem], keep: Keep
    ) -> None:
        ns = self.node(node_id)
        self.reset_protocol(ns, keep_auto_continue=True)
        for item in reasoning:
            keep(item)
        if text.strip():
            keep(AssistantItem(content=text.strip()))
        conversational = self.conversational(node_id)
        if ns.counters.auto_continue >= AUTO_CONTINUE_CAP:
            if conversational:
                self.append(node_id, AssistantItem(content=prompts.NARRATION_HANDOFF))
                self.emit(
                    "ChatMessage",
                    node_id=node_id,
                    role="assistant",
                    content=prompts.NARRATION_HANDOFF,
                )
                self.pause_for_input(node_id, None)
            else:
                self.fail_node(
                    node_id,
                    f"node produced {AUTO_CONTINUE_CAP} consecutive turns without a tool call "
                    "while user input is disabled",
                )
            return
        ns.counters.auto_continue += 1
        tools_cfg = self.by_id[node_id].agent.tools
        nudge = prompts.text_only_nudge(
            conversational=conversational,
            narrated_write=prompts.narrates_write(text),
            wrote_before=self.wrote_recently(node_id),
            plan_source=self.is_plan_source(node_id),
            free_text_only=not tools_cfg.allow_structured_user_input,
        )
        self.append(node_id, UserItem(content=nudge))

    def on_input_request(
        self, node_id: str, outcome: NeedsUserInput, reasoning: list[TranscriptItem], keep: Keep
    ) -> None:
        ns = self.node(node_id)
        tools_cfg = self.by_id[node_id].agent.tools
        structured = outcome.structured_input
        structured_disabled = not tools_cfg.allow_structured_user_input
        if structured is not None and structured_disabled:
            structured = None
        problem: str | None
        if structured is not None:
            problem = structured_problem(structured)
        elif not outcome.assistant_message.strip():
            problem = "the question is empty"
        else:
            problem = None
        if problem is not None:
            if ns.counters.request_input >= PROTOCOL_CAP:
                self.fail_node(
                    node_id,
                    f"model made {PROTOCOL_CAP + 1} consecutive invalid human-input requests "
                    f"({problem})",
                )
                return
            ns.counters.request_input += 1
            self.append(
                node_id,
                UserItem(content=prompts.invalid_input_request_nudge(problem, structured_disabled)),
            )
            return
        self.reset_protocol(ns)
        for item in reasoning:
            keep(item)
        keep(AssistantItem(content=outcome.assistant_message.strip()))
        if outcome.assistant_message.strip():
            self.emit(
                "ChatMessage", node_id=node_id, role="assistant", content=outcome.assistant_message
            )
        self.pause_for_input(node_id, structured)

    def pause_for_input(self, node_id: str, structured: dict[str, Any] | None) -> None:
        ns = self.node(node_id)
        ns.awaiting = True
        ns.structured_input = structured
        context_parts = []
        for entry in self.node_input(node_id).get("upstream", []):
            pretty = json.dumps(entry["output"], indent=2, sort_keys=True)
            context_parts.append(f"{entry['node_id']}:\n{pretty}\n")
        if not context_parts:
            context_parts.append(f"Entrypoint: {self.s.entrypoint_text}\n")
        context = "".join(context_parts) + f"\nTask: {self.by_id[node_id].agent.task_prompt}"
        self.emit(
            "NodeAwaitingInput",
            node_id=node_id,
            label=self.label(node_id),
            context=context,
            is_initial=False,
            structured_input=structured,
        )

    # --- errors -------------------------------------------------------------------------

    def on_failure(self, node_id: str, failure: ProviderFailure) -> None:
        self.on_error(node_id, classify_failure(failure))

    def on_error(self, node_id: str, err: TurnError, allow_repair: bool = True) -> None:
        """Route an AgentError through the handlers of spec 3.5, first claim wins."""
        ns = self.node(node_id)
        if allow_repair and self.start_repair(node_id, err):
            return
        label = self.label(node_id)
        display = error_text(err)
        self.emit("AiInvokeFailed", node_id=node_id, label=label, error=display)
        agent = self.by_id[node_id].agent
        if err.error == "interrupted":
            self.interrupt(node_id)
            return
        if err.error == "malformed" and ns.counters.submit < PROTOCOL_CAP:
            ns.counters.submit += 1
            self.append(
                node_id,
                UserItem(content=prompts.malformed_nudge(err.message, submission_schema(agent))),
            )
            return
        if err.error == "mixed" and ns.counters.mixed < PROTOCOL_CAP:
            ns.counters.mixed += 1
            enabled = [HARNESS_SUBMIT]
            if self.conversational(node_id):
                if agent.tools.allow_free_text_user_input:
                    enabled.append(HARNESS_REQUEST_INPUT)
                if agent.tools.allow_structured_user_input:
                    enabled.append(HARNESS_ASK_QUESTION)
            self.append(node_id, UserItem(content=prompts.mixed_nudge(enabled)))
            return
        if err.error == "truncated" and ns.counters.truncation < PROTOCOL_CAP:
            ns.counters.truncation += 1
            self.append(node_id, UserItem(content=prompts.truncation_nudge(err.tool_names)))
            return
        if err.error == "empty" and self.on_empty(node_id):
            return
        if err.error == "transient" and self.schedule_backoff(node_id, err, display):
            return
        self.fail_node(node_id, display)

    def on_empty(self, node_id: str) -> bool:
        """Nudge after an empty turn, or hand a conversational node to its person at the cap."""
        ns = self.node(node_id)
        conversational = self.conversational(node_id)
        if ns.counters.empty < PROTOCOL_CAP:
            ns.counters.empty += 1
            narrated = any(
                isinstance(i, AssistantItem) and prompts.narrates_write(i.content)
                for i in ns.transcript[-3:]
            )
            nudge = prompts.empty_nudge(conversational, narrated, self.is_plan_source(node_id))
            self.append(node_id, UserItem(content=nudge))
            return True
        if not conversational:
            return False
        self.append(node_id, AssistantItem(content=prompts.EMPTY_TURNS_HANDOFF))
        self.emit(
            "ChatMessage", node_id=node_id, role="assistant", content=prompts.EMPTY_TURNS_HANDOFF
        )
        self.pause_for_input(node_id, None)
        return True

    def schedule_backoff(self, node_id: str, err: TurnError, display: str) -> bool:
        """Hold the node for its transient backoff (spec 5.3), unless the streak is spent."""
        ns = self.node(node_id)
        policy = self.wf.settings.retry_policy
        if ns.transient_streak >= policy.max_attempts:
            return False
        ns.transient_streak += 1
        ns.retries = min(ns.retries + 1, MAX_MODEL_ATTEMPT)
        delay = backoff_delay_ms(policy.backoff_ms, ns.transient_streak) + jitter_ms(node_id)
        if err.retry_after_ms is not None:
            delay = max(delay, err.retry_after_ms)
        ns.backoff_until_ms = self.now + delay
        self.emit(
            "NodeRetrying",
            node_id=node_id,
            label=self.label(node_id),
            attempt=ns.model_attempt,
            backoff_ms=delay,
            error=display,
        )
        self.intents.append(SleepUntil(node_id=node_id, wake_at_ms=ns.backoff_until_ms))
        return True

    def interrupt(self, node_id: str) -> None:
        ns = self.node(node_id)
        ns.interrupted = True
        ns.backoff_until_ms = None
        ns.pending_repair = None
        for batch in self.node_batches(node_id):
            self.s.batches.pop(batch.batch_id)
        self.close_dangling(node_id, prompts.INTERRUPTED_RESULT)
        self.emit("NodeInterrupted", node_id=node_id, label=self.label(node_id))

    # --- output repair (spec 3.9) -------------------------------------------------------

    def build_repair_request(self, node_id: str, err: TurnError) -> AgentRequest | None:
        node = self.by_id[node_id]
        model = (self.wf.settings.output_repair_model or "").strip() or self.node_model(node_id)
        if not model:
            return None
        repair_id = node_id + REPAIR_SUFFIX
        envelope = submission_parameters(
            AgentRequest(
                workflow_id=self.wf.id,
                node_id=node_id,
                node_label=node.label,
                model=model,
                output_schema=submission_schema(node.agent),
            )
        )
        request = AgentRequest(
            workflow_id=self.wf.id,
            run_id=self.s.run_id,
            node_id=repair_id,
            node_label=f"{node.label} (output repair)",
            model=model,
            provider_id=node.agent.provider_id or self.wf.settings.provider_id,
            system_messages=(prompts.REPAIR_SYSTEM,),
            task_prompt=prompts.REPAIR_TASK,
            input={
                "malformed_arguments": err.candidate,
                "validation_detail": err.message,
                "tool_name": HARNESS_SUBMIT,
                "expected_output_schema": envelope,
            },
            output_schema=dict(prompts.REPAIR_OUTPUT_SCHEMA),
            cache_key=cache_key_for(self.wf.id, repair_id, []),
            turn_index=self.node(node_id).repairs_done,
        )
        harness = harness_tool_specs(request)
        return request.model_copy(update={"harness_tools": tuple(harness)})

    def start_repair(self, node_id: str, err: TurnError) -> bool:
        """Ask the repair model to fix a malformed submit before nudging the node."""
        ns = self.node(node_id)
        if err.error != "malformed" or err.candidate is None or ns.pending_repair is not None:
            return False
        request = self.build_repair_request(node_id, err)
        if request is None:
            return False
        call_id = self.new_id(f"repair:{node_id}")
        ns.pending_repair = {"error": err.model_dump(mode="json"), "model": request.model}
        ns.in_flight = InFlightCall(call_id=call_id, model_attempt=ns.model_attempt, kind="repair")
        self.emit("OutputRepairStarted", node_id=node_id, model=request.model)
        self.intents.append(
            CallModel(
                call_id=call_id,
                node_id=node_id,
                model_attempt=ns.model_attempt,
                request=request,
                delta=TranscriptDelta(base_len=0),
                purpose="repair",
            )
        )
        return True

    def take_repair(self, node_id: str) -> TurnError | None:
        ns = self.node(node_id)
        job, ns.pending_repair = ns.pending_repair, None
        ns.repairs_done += 1
        if job is None:
            return None
        try:
            return TurnError.model_validate(job.get("error"))
        except ValidationError:
            return None

    def on_repair_reply(self, node_id: str, reply: ModelReply) -> None:
        original = self.take_repair(node_id)
        if original is None:
            return
        self.report_usage(node_id, reply)
        outcome = classify_reply(reply, prompts.REPAIR_OUTPUT_SCHEMA).outcome
        if isinstance(outcome, Completed) and isinstance(outcome.output, dict):
            args = outcome.output.get("repaired_arguments")
            if isinstance(args, dict):
                schema = submission_schema(self.by_id[node_id].agent)
                repaired = complete_submit(
                    args, json.dumps(args), schema, None, self.markdown_headings(node_id)
                )
                if isinstance(repaired, Completed):
                    self.emit(
                        "OutputRepairSucceeded", node_id=node_id, model=reply.model or "repair"
                    )
                    self.on_completed(
                        node_id, repaired, [], lambda item: self.append(node_id, item)
                    )
                    return
                reason = f"the repaired arguments are still invalid: {repaired.message}"
            else:
                reason = "the repair model returned no repaired_arguments object"
        elif isinstance(outcome, TurnError):
            reason = error_text(outcome)
        else:
            reason = "the repair model did not submit repaired arguments"
        self.emit("OutputRepairFailed", node_id=node_id, reason=reason)
        self.on_error(node_id, original, allow_repair=False)

    def on_repair_failure(self, node_id: str, failure: ProviderFailure) -> None:
        original = self.take_repair(node_id)
        if original is None:
            return
        self.emit(
            "OutputRepairFailed", node_id=node_id, reason=error_text(classify_failure(failure))
        )
        if failure.kind == "interrupted":
            self.interrupt(node_id)
            return
        self.on_error(node_id, original, allow_repair=False)


__all__ = [
    "AUTO_CONTINUE_CAP",
    "MAX_MODEL_ATTEMPT",
    "PROTOCOL_CAP",
    "REPAIR_SUFFIX",
    "Turns",
    "backoff_delay_ms",
    "error_text",
    "jitter_ms",
    "reply_items",
    "shown_call",
    "structured_problem",
]
