"""The reducer: `advance(snapshot, facts, now_ms) -> Plan`.

Pure and total: the same snapshot, facts and time give the same plan, and run-time conditions
never raise; they become node states and events. Sets are sorted by node id before they reach
a plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, assert_never

from pydantic import TypeAdapter

from openflow.engine import prompts
from openflow.engine.classify import (
    Completed,
    Message,
    NeedsUserInput,
    ToolCalls,
    TurnError,
    classify_failure,
    classify_reply,
)
from openflow.engine.events import RunEvent
from openflow.engine.graph import ancestors, execution_layers, parents
from openflow.engine.harness import cache_key_for, harness_tool_specs
from openflow.engine.policy import (
    HARNESS_ASK_QUESTION,
    HARNESS_REQUEST_INPUT,
    HARNESS_SUBMIT,
    approval_decision,
    batch_has_side_effects,
    tool_tier,
)
from openflow.engine.request import AgentRequest, ModelReply
from openflow.engine.spec import (
    MAX_BACKOFF_MS,
    Node,
    Workflow,
    submission_schema,
    template_headings,
)
from openflow.engine.state import (
    ApprovalDecided,
    Awaiting,
    CallModel,
    CancelRequested,
    CancelWork,
    CatalogFrozen,
    Fact,
    HandoffStored,
    InFlightCall,
    InputGiven,
    Intent,
    MessageSent,
    ModelFailed,
    ModelReplied,
    NodeState,
    PendingBatch,
    Plan,
    RetryRequested,
    RunSnapshot,
    RunStatus,
    RunTools,
    SleepUntil,
    StoredItemRef,
    TimerFired,
    ToolsFinished,
    ToolsOutcomeUnknown,
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
_EVENT = TypeAdapter(RunEvent)
_QUESTION_ID = r"^[a-z][a-z0-9_]*$"


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
    exponent = max(streak, 1) - 1
    return int(min(backoff_ms * (2**exponent), MAX_BACKOFF_MS))


class _Run:
    """A mutable working copy of the snapshot while one batch of facts is folded in."""

    def __init__(self, snapshot: RunSnapshot, now_ms: int) -> None:
        self.s = snapshot.model_copy(deep=True)
        self.now = now_ms
        self.events: list[RunEvent] = []
        self.intents: list[Intent] = []
        self.wf: Workflow = self.s.workflow
        self.by_id: dict[str, Node] = {n.id: n for n in self.wf.nodes}

    # --- small helpers ------------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        self.s.event_seq += 1
        data = {"type": type_, "seq": self.s.event_seq, "at_ms": self.now, **fields}
        self.events.append(_EVENT.validate_python(data))

    def new_id(self, prefix: str) -> str:
        n = self.s.next_id
        self.s.next_id += 1
        return f"{prefix}-{n}"

    def label(self, node_id: str) -> str:
        node = self.by_id.get(node_id)
        return node.label if node is not None else node_id

    def node(self, node_id: str) -> NodeState:
        return self.s.nodes[node_id]

    def append(
        self, node_id: str, item: TranscriptItem, origin: StoredItemRef | None = None
    ) -> None:
        ns = self.node(node_id)
        ns.transcript.append(item)
        ns.origins.append(origin)

    def conversational(self, node_id: str) -> bool:
        return bool(self.by_id[node_id].agent.request_user_input)

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
        ns.failed = error
        ns.awaiting = False
        if ns.errored_attempt < ns.model_attempt:
            ns.errored_attempt = ns.model_attempt
            self.emit("NodeErrored", node_id=node_id, label=self.label(node_id), error=error)

    def terminal(self, node_id: str, error: str) -> None:
        if self.s.terminal_error is None:
            self.s.terminal_error = error
            self.s.terminal_node = node_id

    def close_dangling(self, node_id: str, content: str) -> None:
        """Give every tool call of the node without a result an error result (spec 5.5)."""
        ns = self.node(node_id)
        answered = {
            item.result.tool_call_id for item in ns.transcript if isinstance(item, ToolResultItem)
        }
        open_calls = [
            item.call
            for item in ns.transcript
            if isinstance(item, ToolCallItem) and item.call.id not in answered
        ]
        for call in open_calls:
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
        if prompts.RUNTIME_MARKER not in own:
            messages.append(prompts.RUNTIME_PREAMBLE)
        if not agent.request_user_input:
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
        for parent in parents(self.wf, node_id):
            pn = self.node(parent)
            if not pn.has_output:
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
        for anc in ancestors(self.wf, node_id):
            an = self.node(anc)
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
        return data

    def offered_tools(self, node_id: str) -> list[str]:
        names = self.s.tool_names or []
        if self.approval_mode(node_id) == "read_only":
            return [n for n in names if tool_tier(n) == "read"]
        return list(names)

    def build_request(self, node_id: str) -> AgentRequest | None:
        node = self.by_id[node_id]
        agent = node.agent
        ns = self.node(node_id)
        patch = ns.runtime_patch
        model = str(patch.get("model") or agent.model or "").strip()
        if not model:
            self.terminal(
                node_id,
                f'node "{node.label}" has no model configured — select a model '
                "(or a provider profile with a default_model) before running",
            )
            return None
        schema = submission_schema(agent)
        allow_input = bool(agent.request_user_input)
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
            output_schema=schema,
            tool_names=tuple(tool_names),
            tool_choice="auto" if conversation else "required",
            reasoning_effort=effort if isinstance(effort, str) else None,
            reasoning_budget_tokens=budget if isinstance(budget, int) else None,
            fast_mode=bool(patch.get("fast_mode", self.wf.settings.fast_mode)),
            allow_user_input=allow_input,
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

    # --- dispatch -----------------------------------------------------------------------

    def ready(self, node_id: str) -> bool:
        if self.wf.settings.strict_layers:
            for layer in execution_layers(self.wf):
                if node_id in layer:
                    return True
                if not all(self.node(n).has_output for n in layer):
                    return False
            return False
        return all(self.node(p).has_output for p in parents(self.wf, node_id))

    def blocked(self, node_id: str) -> bool:
        ns = self.node(node_id)
        return (
            ns.has_output
            or ns.awaiting
            or ns.in_flight is not None
            or ns.handoff_job is not None
            or ns.interrupted
            or ns.failed is not None
            or ns.backoff_until_ms is not None
            or bool(self.node_batches(node_id))
        )

    def dispatch_model(self, node_id: str) -> None:
        ns = self.node(node_id)
        for text in ns.queued_messages:
            self.append(node_id, UserItem(content=text))
        ns.queued_messages = []
        request = self.build_request(node_id)
        if request is None:
            return
        attempt = ns.model_attempt
        if ns.announced_attempt < attempt:
            ns.announced_attempt = attempt
            label = self.label(node_id)
            self.emit("NodeQueued", node_id=node_id, label=label, model_attempt=attempt)
            self.emit("NodeStarted", node_id=node_id, label=label, model_attempt=attempt)
        ns.turn_seq += 1
        call_id = self.new_id(f"model:{node_id}")
        ns.in_flight = InFlightCall(call_id=call_id, model_attempt=attempt)
        self.intents.append(
            CallModel(
                call_id=call_id,
                node_id=node_id,
                model_attempt=attempt,
                request=request,
                delta=self.delta(node_id),
            )
        )

    def dispatch_batch(self, batch: PendingBatch) -> None:
        batch.in_flight = True
        for call in batch.calls:
            self.emit(
                "ToolStarted",
                node_id=batch.node_id,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
            )
        self.intents.append(
            RunTools(
                batch_id=batch.batch_id,
                node_id=batch.node_id,
                calls=tuple(batch.calls),
                side_effects=batch.side_effects,
                model_attempt=self.node(batch.node_id).model_attempt,
            )
        )

    def schedule(self) -> None:
        if self.s.finished:
            return
        if self.s.cancel_requested:
            self.stop()
            return
        if self.s.terminal_error is not None:
            self.fail_run()
            return
        for batch_id in sorted(self.s.batches):
            batch = self.s.batches[batch_id]
            if not batch.in_flight and not batch.requires_approval:
                self.dispatch_batch(batch)
        for node in sorted(self.wf.nodes, key=lambda n: n.id):
            if self.ready(node.id) and not self.blocked(node.id):
                self.dispatch_model(node.id)
                if self.s.terminal_error is not None:
                    self.fail_run()
                    return
        if self.busy():
            self.s.status = "running"
            return
        if all(ns.has_output for ns in self.s.nodes.values()):
            self.complete()
            return
        if self.awaiting().any:
            self.s.status = "paused"
            return
        stuck = sorted(n for n, ns in self.s.nodes.items() if not ns.has_output)
        first = stuck[0] if stuck else ""
        self.terminal(first, f"no runnable nodes: {', '.join(stuck)} cannot start")
        self.fail_run()

    def busy(self) -> bool:
        return any(
            ns.in_flight is not None
            or ns.handoff_job is not None
            or ns.backoff_until_ms is not None
            for ns in self.s.nodes.values()
        ) or any(b.in_flight for b in self.s.batches.values())

    def awaiting(self) -> Awaiting:
        nodes = sorted(self.s.nodes.items())
        return Awaiting(
            inputs=tuple(n for n, ns in nodes if ns.awaiting),
            approvals=tuple(
                sorted(b.batch_id for b in self.s.batches.values() if b.requires_approval)
            ),
            retryables=tuple(n for n, ns in nodes if ns.failed is not None or ns.interrupted),
        )

    # --- run endings --------------------------------------------------------------------

    def complete(self) -> None:
        outputs = [{"node_id": n, "output": ns.output} for n, ns in sorted(self.s.nodes.items())]
        report = {
            "workflow_id": self.wf.id,
            "outputs": outputs,
            "read_calls": self.s.read_calls,
            "redundant_reads": self.s.redundant_reads,
            "tokens_in": self.s.tokens_in,
            "suggestions": [],
        }
        self.s.report = report
        self.s.finished = True
        self.s.status = "completed"
        self.emit("Finished", report=report)

    def fail_run(self) -> None:
        node_id = self.s.terminal_node or ""
        self.s.finished = True
        self.s.status = "failed"
        for ns in self.s.nodes.values():
            ns.in_flight = None
            ns.backoff_until_ms = None
        ids = [b.batch_id for b in self.s.batches.values() if b.in_flight]
        if ids:
            self.intents.append(CancelWork(ids=tuple(sorted(ids))))
        self.emit(
            "NodeFailed",
            node_id=node_id,
            label=self.label(node_id),
            error=self.s.terminal_error or "run failed",
        )

    def stop(self) -> None:
        ids: list[str] = []
        for node_id, ns in sorted(self.s.nodes.items()):
            if ns.in_flight is not None:
                ids.append(ns.in_flight.call_id)
                ns.in_flight = None
                ns.interrupted = True
            ns.backoff_until_ms = None
            if ns.handoff_job is not None:
                ns.handoff_job = None
                ns.interrupted = True
        for batch_id, batch in sorted(self.s.batches.items()):
            if batch.in_flight:
                ids.append(batch_id)
                self.s.batches.pop(batch_id)
                self.node(batch.node_id).interrupted = True
                self.close_dangling(batch.node_id, prompts.INTERRUPTED_RESULT)
        if ids:
            self.intents.append(CancelWork(ids=tuple(sorted(ids))))
        self.s.finished = True
        self.s.status = "stopped"
        self.emit("Aborted")

    # --- facts --------------------------------------------------------------------------

    def on_fact(self, fact: Fact) -> None:
        if self.s.finished and not isinstance(fact, CancelRequested):
            return
        if isinstance(fact, ModelReplied):
            self.on_model_replied(fact)
        elif isinstance(fact, ModelFailed):
            self.on_model_failed(fact)
        elif isinstance(fact, ToolsFinished):
            self.on_tools_finished(fact)
        elif isinstance(fact, ToolsOutcomeUnknown):
            self.on_tools_unknown(fact)
        elif isinstance(fact, HandoffStored):
            self.on_handoff(fact)
        elif isinstance(fact, InputGiven | ApprovalDecided | RetryRequested | MessageSent):
            reason = check(self.s, fact)
            if reason is not None:
                self.emit("ActionIgnored", action=fact.model_dump(mode="json"), reason=reason)
            else:
                self.on_action(fact)
        elif isinstance(fact, TimerFired):
            if fact.node_id in self.s.nodes:
                self.node(fact.node_id).backoff_until_ms = None
        elif isinstance(fact, CancelRequested):
            if not self.s.finished:
                self.s.cancel_requested = True
        elif isinstance(fact, CatalogFrozen):
            if self.s.tool_names is None:
                self.s.tool_names = sorted(fact.tool_names)
        else:
            assert_never(fact)

    def take_call(self, node_id: str, call_id: str, persisted: int | None) -> NodeState | None:
        if node_id not in self.s.nodes:
            return None
        ns = self.node(node_id)
        if ns.in_flight is None or ns.in_flight.call_id != call_id:
            return None
        ns.in_flight = None
        if persisted is not None:
            ns.persisted_len = persisted
        return ns

    def on_model_replied(self, fact: ModelReplied) -> None:
        ns = self.take_call(fact.node_id, fact.call_id, fact.persisted_len)
        if ns is None:
            return
        ns.calls_done += 1
        node_id = fact.node_id
        agent = self.by_id[node_id].agent
        reply = fact.reply
        if reply.usage is not None:
            self.s.tokens_in += reply.usage.prompt_tokens
            self.emit(
                "UsageReported",
                node_id=node_id,
                usage=reply.usage.model_dump(),
                model=reply.model,
                max_context_tokens=reply.max_context_tokens,
            )
        headings = (
            template_headings(agent.handoff.template or "")
            if agent.handoff.format == "markdown"
            else None
        )
        result = classify_reply(reply, submission_schema(agent), headings)
        candidates = reply_items(reply)
        refs = {
            json.dumps(item.model_dump(mode="json"), sort_keys=True): StoredItemRef(
                store_key=fact.reply_key, index=i
            )
            for i, item in enumerate(candidates)
        }

        def keep(item: TranscriptItem) -> None:
            key = json.dumps(item.model_dump(mode="json"), sort_keys=True)
            self.append(node_id, item, refs.get(key) if fact.reply_key else None)

        for block in reply.reasoning:
            if block.type in ("text", "summary") and block.text.strip():
                self.emit("ChatMessage", node_id=node_id, role="thinking", content=block.text)
        if reply.text.strip() and not reply.streamed:
            self.emit("ChatMessage", node_id=node_id, role="assistant", content=reply.text.strip())
        reasoning = [ReasoningItem(blocks=reply.reasoning)] if reply.reasoning else []
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

    def on_model_failed(self, fact: ModelFailed) -> None:
        ns = self.take_call(fact.node_id, fact.call_id, fact.persisted_len)
        if ns is None:
            return
        if not fact.lost:
            ns.calls_done += 1
        self.on_error(fact.node_id, classify_failure(fact.failure))

    def on_completed(
        self, node_id: str, outcome: Completed, reasoning: list[Any], keep: Any
    ) -> None:
        ns = self.node(node_id)
        agent = self.by_id[node_id].agent
        self.reset_protocol(ns)
        for item in reasoning:
            keep(item)
        if outcome.assistant_message.strip():
            self.append(node_id, AssistantItem(content=outcome.assistant_message.strip()))
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
        self.emit(
            "NodeCompleted",
            node_id=node_id,
            label=self.label(node_id),
            output=output,
            handoff=handoff,
        )

    def on_handoff(self, fact: HandoffStored) -> None:
        if fact.node_id not in self.s.nodes:
            return
        ns = self.node(fact.node_id)
        job = ns.handoff_job
        if job is None:
            return
        ns.handoff_job = None
        if fact.error is not None or fact.manifest is None:
            self.fail_node(
                fact.node_id, f"permanent: node handoff could not be stored: {fact.error}"
            )
            return
        output = job["output"]
        if fact.manifest.get("format") == "markdown":
            message = str(job.get("message") or "").strip()
            output = {"summary": message or "See the Markdown handoff artifact."}
        self.store_output(fact.node_id, output, fact.manifest)

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

    def on_tool_calls(
        self, node_id: str, outcome: ToolCalls, reasoning: list[Any], keep: Any
    ) -> None:
        ns = self.node(node_id)
        self.reset_protocol(ns)
        for item in reasoning:
            keep(item)
        if outcome.assistant_message.strip():
            keep(AssistantItem(content=outcome.assistant_message.strip()))
        mode = self.approval_mode(node_id)
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
            if call.name == "write" and args.get("content") is None:
                self.add_result(node_id, call, prompts.MISSING_CONTENT_RESULT, is_error=True)
                nudges.append(prompts.MISSING_CONTENT_NUDGE)
                continue
            if offered is not None and call.name not in offered:
                self.add_result(
                    node_id,
                    call,
                    f"Tool unavailable: tool {call.name} is not offered to this node in this run",
                    is_error=True,
                )
                continue
            decision = approval_decision(mode, tool_tier(call.name, args))
            if decision == "deny":
                self.add_result(
                    node_id,
                    call,
                    prompts.denial_result(
                        f"node {node_id!r} is read-only and {call.name!r} changes things",
                        by_user=False,
                    ),
                    is_error=True,
                )
                continue
            surviving.append((call, decision))
        for text in dict.fromkeys(nudges):
            self.append(node_id, UserItem(content=text))
        if not surviving:
            return
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
            self.emit(
                "ToolCallProposed",
                node_id=node_id,
                label=label,
                tool_call=call.model_dump(mode="json"),
            )
        if requires:
            first = calls[0]
            self.emit(
                "ToolApprovalRequested",
                request={
                    "approvalId": batch_id,
                    "nodeId": node_id,
                    "nodeLabel": label,
                    "toolCall": first.model_dump(mode="json"),
                    "tier": tool_tier(first.name, first.arguments),
                    "toolCalls": [c.model_dump(mode="json") for c in calls],
                },
            )

    def wrote_recently(self, node_id: str) -> bool:
        for item in self.node(node_id).transcript[-40:]:
            if (
                isinstance(item, ToolResultItem)
                and item.result.tool_name == "write"
                and not item.result.is_error
            ):
                return True
        return False

    def text_only(self, node_id: str, text: str, reasoning: list[Any], keep: Any) -> None:
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
            plan_source=False,
            free_text_only=not tools_cfg.allow_structured_user_input,
        )
        self.append(node_id, UserItem(content=nudge))

    def on_input_request(
        self, node_id: str, outcome: NeedsUserInput, reasoning: list[Any], keep: Any
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

    def on_error(self, node_id: str, err: TurnError) -> None:
        ns = self.node(node_id)
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
            if agent.request_user_input:
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
        if err.error == "empty":
            conversational = self.conversational(node_id)
            if ns.counters.empty < PROTOCOL_CAP:
                ns.counters.empty += 1
                narrated = any(
                    isinstance(i, AssistantItem) and prompts.narrates_write(i.content)
                    for i in ns.transcript[-3:]
                )
                self.append(
                    node_id,
                    UserItem(content=prompts.empty_nudge(conversational, narrated, False)),
                )
                return
            if conversational:
                self.append(node_id, AssistantItem(content=prompts.EMPTY_TURNS_HANDOFF))
                self.emit(
                    "ChatMessage",
                    node_id=node_id,
                    role="assistant",
                    content=prompts.EMPTY_TURNS_HANDOFF,
                )
                self.pause_for_input(node_id, None)
                return
        if err.error == "transient":
            policy = self.wf.settings.retry_policy
            if ns.transient_streak < policy.max_attempts:
                ns.transient_streak += 1
                ns.retries = min(ns.retries + 1, MAX_MODEL_ATTEMPT)
                delay = backoff_delay_ms(policy.backoff_ms, ns.transient_streak) + jitter_ms(
                    node_id
                )
                if err.retry_after_ms is not None:
                    delay = max(delay, err.retry_after_ms)
                ns.backoff_until_ms = self.now + delay
                self.emit(
                    "NodeRetrying",
                    node_id=node_id,
                    label=label,
                    attempt=ns.model_attempt,
                    backoff_ms=delay,
                    error=display,
                )
                self.intents.append(SleepUntil(node_id=node_id, wake_at_ms=ns.backoff_until_ms))
                return
        self.fail_node(node_id, display)

    def interrupt(self, node_id: str) -> None:
        ns = self.node(node_id)
        ns.interrupted = True
        ns.backoff_until_ms = None
        for batch in self.node_batches(node_id):
            self.s.batches.pop(batch.batch_id)
        self.close_dangling(node_id, prompts.INTERRUPTED_RESULT)
        self.emit("NodeInterrupted", node_id=node_id, label=self.label(node_id))

    def on_tools_finished(self, fact: ToolsFinished) -> None:
        batch = self.s.batches.get(fact.batch_id)
        if batch is None or not batch.in_flight:
            return
        self.s.batches.pop(fact.batch_id)
        node_id = batch.node_id
        ns = self.node(node_id)
        for event in fact.events:
            data = dict(event)
            type_ = str(data.pop("type", ""))
            data.pop("seq", None)
            data.pop("at_ms", None)
            data.setdefault("node_id", node_id)
            self.emit(type_, **data)
        by_id = {r.tool_call_id: (i, r) for i, r in enumerate(fact.results)}
        for call in batch.calls:
            found = by_id.get(call.id)
            if found is None:
                continue
            index, result = found
            origin = (
                StoredItemRef(store_key=fact.store_key, index=index) if fact.store_key else None
            )
            self.add_result(
                node_id,
                call,
                result.content,
                result.is_error,
                origin=origin,
                artifact_ids=result.artifact_ids,
                output_meta=result.output_meta,
            )
            if call.name == "read" and not result.is_error:
                self.s.read_calls += 1
                path = str(call.arguments.get("path", ""))
                if any(
                    any(r.get("path") == path for r in self.node(a).reads)
                    for a in ancestors(self.wf, node_id)
                ):
                    self.s.redundant_reads += 1
        ns.changed_files.extend(dict(r) for r in fact.changed_files)
        ns.reads.extend(dict(r) for r in fact.reads)
        if fact.interrupted:
            self.interrupt(node_id)
        else:
            self.close_dangling(node_id, prompts.INTERRUPTED_RESULT)

    def on_tools_unknown(self, fact: ToolsOutcomeUnknown) -> None:
        batch = self.s.batches.pop(fact.batch_id, None)
        if batch is None:
            return
        for call in batch.calls:
            self.emit(
                "ToolOutcomeUnknown",
                node_id=batch.node_id,
                tool_call_id=call.id,
                tool_name=call.name,
            )
        self.close_dangling(batch.node_id, prompts.UNKNOWN_OUTCOME_RESULT)

    def on_action(self, fact: InputGiven | ApprovalDecided | RetryRequested | MessageSent) -> None:
        if isinstance(fact, InputGiven):
            self.give_input(fact.node_id, fact.text)
        elif isinstance(fact, ApprovalDecided):
            batch = self.s.batches[fact.approval_id]
            if fact.allow:
                batch.requires_approval = False
                for call in batch.calls:
                    self.emit(
                        "ToolApproved",
                        approval_id=batch.batch_id,
                        node_id=batch.node_id,
                        tool_call_id=call.id,
                        tool_name=call.name,
                    )
            else:
                self.s.batches.pop(batch.batch_id)
                text = prompts.denial_result(fact.reason)
                for call in batch.calls:
                    self.emit(
                        "ToolDenied",
                        approval_id=batch.batch_id,
                        node_id=batch.node_id,
                        tool_call_id=call.id,
                        tool_name=call.name,
                        reason=fact.reason or "Tool call denied by the user.",
                    )
                    self.add_result(batch.node_id, call, text, is_error=True)
        elif isinstance(fact, RetryRequested):
            self.retry(fact.node_id, fact.message)
        elif isinstance(fact, MessageSent):
            ns = self.node(fact.node_id)
            if ns.awaiting:
                self.give_input(fact.node_id, fact.text)
            elif ns.failed is not None or ns.interrupted:
                self.retry(fact.node_id, fact.text)
            else:
                ns.queued_messages.append(fact.text)
                self.emit("ChatMessage", node_id=fact.node_id, role="user", content=fact.text)
        else:
            assert_never(fact)

    def give_input(self, node_id: str, text: str) -> None:
        ns = self.node(node_id)
        ns.awaiting = False
        ns.structured_input = None
        self.append(node_id, UserItem(content=text))
        self.emit("ChatMessage", node_id=node_id, role="user", content=text)

    def retry(self, node_id: str, message: str | None) -> None:
        ns = self.node(node_id)
        ns.failed = None
        ns.interrupted = False
        self.reset_protocol(ns)
        ns.retries = min(ns.retries + 1, MAX_MODEL_ATTEMPT)
        if message:
            self.append(node_id, UserItem(content=message))
            self.emit("ChatMessage", node_id=node_id, role="user", content=message)


def structured_problem(structured: dict[str, Any]) -> str | None:
    """Why a structured question request is invalid (spec 3.4), or None."""
    import re

    questions = structured.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= 3:
        return "structured questions need 1-3 questions"
    seen: set[str] = set()
    for q in questions:
        if not isinstance(q, dict):
            return "each question must be an object"
        qid = q.get("id")
        if not isinstance(qid, str) or not re.match(_QUESTION_ID, qid) or qid in seen:
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


def check(snapshot: RunSnapshot, action: Any) -> str | None:
    """Why a human action matches nothing pending, or None when it applies (the `act` validator)."""
    if snapshot.finished:
        return f"the run is {snapshot.status}; resume it first"
    nodes = snapshot.nodes
    if isinstance(action, InputGiven | RetryRequested | MessageSent):
        if action.node_id not in nodes:
            return f"unknown node {action.node_id!r}"
        ns = nodes[action.node_id]
    if isinstance(action, InputGiven):
        if not ns.awaiting:
            waiting = sorted(n for n, s in nodes.items() if s.awaiting)
            if waiting:
                return f"node {action.node_id!r} is not waiting for input (waiting: {', '.join(waiting)})"
            return "no node is waiting for input"
        return None
    if isinstance(action, ApprovalDecided):
        batch = snapshot.batches.get(action.approval_id)
        if batch is None or not batch.requires_approval:
            return f"no pending approval {action.approval_id!r}"
        return None
    if isinstance(action, RetryRequested):
        if ns.failed is None and not ns.interrupted:
            return f"node {action.node_id!r} is not failed or interrupted, so it cannot be retried"
        return None
    if isinstance(action, MessageSent):
        if ns.awaiting or ns.failed is not None or ns.interrupted:
            return None
        node = next(n for n in snapshot.workflow.nodes if n.id == action.node_id)
        if not (node.agent.request_user_input or node.agent.conversation_mode):
            return (
                f"live messages are disabled for node {action.node_id!r} (requestUserInput is off)"
            )
        live = ns.in_flight is not None or any(
            b.node_id == action.node_id for b in snapshot.batches.values()
        )
        if not live:
            return f"node {action.node_id!r} is not active"
        return None
    return "unknown action"


def _finish(run: _Run) -> Plan:
    awaiting = run.awaiting()
    status: RunStatus = run.s.status
    return Plan(
        snapshot=run.s,
        events=tuple(run.events),
        intents=tuple(run.intents),
        awaiting=awaiting,
        done=run.s.finished,
        status=status,
    )


def start(
    workflow: Workflow,
    run_id: str,
    now_ms: int,
    entrypoint_text: str = "",
    execution_dir: str = "",
    project_root: str | None = None,
    tool_names: Iterable[str] | None = None,
) -> Plan:
    """A new run's first plan: the initial snapshot and its first model calls."""
    snapshot = RunSnapshot(
        run_id=run_id,
        workflow=workflow,
        entrypoint_text=entrypoint_text,
        execution_dir=execution_dir,
        project_root=project_root,
        tool_names=sorted(tool_names) if tool_names is not None else None,
        nodes={n.id: NodeState() for n in sorted(workflow.nodes, key=lambda n: n.id)},
    )
    run = _Run(snapshot, now_ms)
    run.emit(
        "RunStarted",
        workflow_id=workflow.id,
        workflow_name=workflow.name,
        entrypoint_text=entrypoint_text,
    )
    run.schedule()
    return _finish(run)


def advance(snapshot: RunSnapshot, facts: Sequence[Fact], now_ms: int) -> Plan:
    """Fold facts into the run and plan what comes next."""
    run = _Run(snapshot, now_ms)
    for fact in facts:
        run.on_fact(fact)
    run.schedule()
    return _finish(run)


def resume(snapshot: RunSnapshot, now_ms: int) -> Plan:
    """Continue a stopped, paused or failed run: interrupted nodes are retried at once.

    Work that was in flight when the snapshot was taken is settled first: model calls are
    retried, read-only tool batches are sent again, and side-effecting batches are settled as
    outcome unknown (never re-sent).
    """
    run = _Run(snapshot, now_ms)
    previous = run.s.status
    run.s.finished = False
    run.s.cancel_requested = False
    run.s.terminal_error = None
    run.s.terminal_node = None
    run.s.status = "running"
    run.emit("RunResumed", from_status=previous)
    for batch_id, batch in sorted(run.s.batches.items()):
        if batch.in_flight and batch.side_effects:
            run.on_tools_unknown(ToolsOutcomeUnknown(batch_id=batch_id))
        elif batch.in_flight:
            batch.in_flight = False
    for node_id, ns in sorted(run.s.nodes.items()):
        ns.backoff_until_ms = None
        if ns.in_flight is not None:
            ns.in_flight = None
            ns.interrupted = True
        if ns.handoff_job is not None:
            job = ns.handoff_job
            run.intents.append(
                WriteHandoff(
                    node_id=node_id,
                    format=run.by_id[node_id].agent.handoff.format,  # type: ignore[arg-type]
                    output=job["output"],
                )
            )
        if ns.interrupted:
            run.retry(node_id, None)
    run.schedule()
    return _finish(run)


__all__ = [
    "advance",
    "backoff_delay_ms",
    "check",
    "error_text",
    "jitter_ms",
    "reply_items",
    "resume",
    "start",
    "structured_problem",
]
