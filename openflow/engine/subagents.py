"""Subagents (spec 6): saved and declared agents a node calls, run durably as child turns.

A node offered the runtime tools (execution, not read-only) may declare ad-hoc subagents with
`openflow_declare_subagents` and call them, or the saved agents it lists, with
`openflow_call_subagent`. The parent's call is approved like any write-tier call of its node;
that decision is the only one: the child never asks people anything.

A call starts a child conversation inside the snapshot (`NodeState.child`): its own transcript,
counters and model attempt. Every child turn is a normal `CallModel` whose request is the
subagent's (`request.node_id` is the subagent id, so the model-turn activity keeps its
transcript apart) while `CallModel.node_id` is the parent; the facts come back by call id. The
child's executable calls run as `RunTools` batches without approval, one batch at a time, under
the subagent id; the runtime tools are refused to it (nesting depth 1). Plain-text and
input-request turns get the autonomous nudge and the tenth in a row fails the subagent;
transient errors back off with the workflow's retry policy (timer key `subagent:{id}`), other
errors fail it. When the child submits, the parent's call gets
`{"output": ..., "message": "Subagent '<name>' completed."}` and the parent continues.

A batch mixing runtime and executable calls runs in order: executable calls between runtime
calls go out as their own batches, and the rest waits until each one (or the child) is done.

Stop, an interrupt, a terminal failure and resume end a running child cleanly: it is reported
as `SubagentFailed` ("interrupted by user") and the parent's call gets the interrupted result,
so nothing is left without a result. The subagent keeps the status it had before the call, so
the parent (retried when the run resumes) may call it again; that call starts from scratch.
"""

from __future__ import annotations

import json
from typing import Any, assert_never

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
from openflow.engine.errors import EngineError
from openflow.engine.events import (
    AiInvokeFailed,
    ChatMessage,
    NodeCompleted,
    NodeQueued,
    NodeRetrying,
    NodeStarted,
    SubagentCompleted,
    SubagentFailed,
    SubagentsDeclared,
    SubagentStarted,
    SubagentStatus,
    SubagentSummary,
    ToolCallProposed,
    ToolCompleted,
    ToolOutcomeUnknown,
    ToolStarted,
)
from openflow.engine.harness import DEFAULT_OUTPUT_SCHEMA, cache_key_for, harness_tool_specs
from openflow.engine.policy import (
    CALL_SUBAGENT,
    DECLARE_SUBAGENTS,
    RUNTIME_TOOLS,
    approval_decision,
    batch_has_side_effects,
    plan_verdict,
)
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.spec import CallableAgent, Workflow, effective_output_schema
from openflow.engine.state import (
    CallModel,
    CancelWork,
    ChildRun,
    InFlightCall,
    ModelFailed,
    ModelReplied,
    PendingBatch,
    SleepUntil,
    StoredItemRef,
    SubagentRecord,
    ToolsFinished,
    TranscriptDelta,
    in_place,
    pack_refs,
    stored_reply,
    stored_result,
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
from openflow.engine.turn import (
    MAX_MODEL_ATTEMPT,
    Keep,
    Turns,
    backoff_delay_ms,
    error_text,
    jitter_ms,
    reply_items,
    shown_call,
)

SUBAGENT_TEXT_CAP = 10
CALLABLE: frozenset[SubagentStatus] = frozenset({"declared", "completed"})

_DECLARE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "subagents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}, "purpose": {"type": "string"}},
                "required": ["name", "purpose"],
            },
        }
    },
    "required": ["subagents"],
}
_CALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"subagent_id": {"type": "string"}, "input": {"type": "string"}},
    "required": ["subagent_id", "input"],
}


def snapshot_agents(workflow: Workflow, agents: list[CallableAgent]) -> list[CallableAgent]:
    """The saved agents a run keeps (spec 6): those nodes name (or all), first of an id wins."""
    if any(node.agent.allow_all_callable_agents for node in workflow.nodes):
        chosen = list(agents)
    else:
        wanted = {aid for node in workflow.nodes for aid in node.agent.callable_agents}
        chosen = [agent for agent in agents if agent.id in wanted]
    kept: dict[str, CallableAgent] = {}
    for agent in chosen:
        kept.setdefault(agent.id, agent)
    return list(kept.values())


def declare_tool_spec() -> ToolSpec:
    """`openflow_declare_subagents` as models see it."""
    return ToolSpec(
        name=DECLARE_SUBAGENTS,
        description=prompts.DECLARE_SUBAGENTS_DESCRIPTION,
        parameters=json.loads(json.dumps(_DECLARE_PARAMETERS)),
        tier="write",
        concurrency="shared",
    )


def call_tool_spec(available: list[tuple[str, str]]) -> ToolSpec:
    """`openflow_call_subagent`, its description listing `(name, id)` of the callable ones."""
    return ToolSpec(
        name=CALL_SUBAGENT,
        description=prompts.call_subagent_description(available),
        parameters=json.loads(json.dumps(_CALL_PARAMETERS)),
        tier="write",
        concurrency="shared",
    )


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Subagents(Turns):
    """The turn machine plus the runtime tools and the child conversations they start."""

    # --- who may be called --------------------------------------------------------------

    def saved_agent(self, subagent_id: str) -> CallableAgent | None:
        return next((a for a in self.s.agents if a.id == subagent_id), None)

    def saved_agents_of(self, node_id: str) -> list[CallableAgent]:
        """The saved agents a node may call, in the order it lists them."""
        agent = self.by_id[node_id].agent
        if agent.allow_all_callable_agents:
            return list(self.s.agents)
        found = [self.saved_agent(aid) for aid in dict.fromkeys(agent.callable_agents)]
        return [a for a in found if a is not None]

    def callable_records(self, node_id: str) -> list[SubagentRecord]:
        """The node's saved agents, then the subagents it declared, as records."""
        records = [self.s.subagents.get(a.id) for a in self.saved_agents_of(node_id)]
        records += [r for r in self.s.subagents.values() if r.owner == node_id]
        return [r for r in records if r is not None]

    def offers_runtime(self, node_id: str) -> bool:
        """Whether the node is offered the runtime tools (spec 4.2: execution, not read-only)."""
        return not self.s.planning and self.approval_mode(node_id) != "read_only"

    def set_status(self, subagent_id: str, status: SubagentStatus) -> None:
        record = self.s.subagents.get(subagent_id)
        if record is not None:
            self.s.subagents[subagent_id] = record.model_copy(update={"status": status})

    def summary(self, record: SubagentRecord) -> SubagentSummary:
        return SubagentSummary(
            id=record.id, name=record.name, purpose=record.purpose, status=record.status
        )

    # --- the parent's request -----------------------------------------------------------

    def offered_tools(self, node_id: str) -> list[str]:
        names = super().offered_tools(node_id)
        if self.offers_runtime(node_id):
            names += [n for n in RUNTIME_TOOLS if n not in names]
        return names

    def build_request(self, node_id: str) -> AgentRequest | None:
        """The node's request, the runtime tools riding with the harness tools (per-node text)."""
        request = super().build_request(node_id)
        if request is None or not self.offers_runtime(node_id):
            return request
        available = [(r.name, r.id) for r in self.callable_records(node_id)]
        specs = (declare_tool_spec(), call_tool_spec(available))
        return request.model_copy(update={"harness_tools": (*request.harness_tools, *specs)})

    def announce_subagents(self, node_id: str) -> None:
        """Announce the node's saved agents once, on its first model call."""
        ns = self.node(node_id)
        if ns.subagents_announced:
            return
        ns.subagents_announced = True
        records = [self.s.subagents.get(a.id) for a in self.saved_agents_of(node_id)]
        summaries = [self.summary(r) for r in records if r is not None]
        if summaries:
            self.emit(SubagentsDeclared(node_id=node_id, summaries=summaries))

    # --- runtime calls of the parent ----------------------------------------------------

    def runtime_batch(self, batch: PendingBatch) -> bool:
        return batch.subagent_id is None and any(c.name in RUNTIME_TOOLS for c in batch.calls)

    def batch_waits(self, batch: PendingBatch) -> bool:
        """A parent's batch waits while its child runs or another of its batches is out."""
        if batch.subagent_id is not None:
            return False
        if self.s.nodes[batch.node_id].child is not None:
            return True
        return any(
            b.in_flight and b.node_id == batch.node_id and b.batch_id != batch.batch_id
            for b in self.s.batches.values()
        )

    def step_runtime_batch(self, batch: PendingBatch) -> PendingBatch | None:
        """Answer runtime calls in order; split off the next executable run as a batch to send."""
        node_id = batch.node_id
        segment: PendingBatch | None = None
        while batch.calls:
            first = batch.calls[0]
            if first.name not in RUNTIME_TOOLS:
                calls: list[ToolCall] = []
                while batch.calls and batch.calls[0].name not in RUNTIME_TOOLS:
                    calls.append(batch.calls.pop(0))
                segment = PendingBatch(
                    batch_id=self.new_id("batch"),
                    node_id=node_id,
                    calls=calls,
                    requires_approval=False,
                    side_effects=batch_has_side_effects(
                        [c.name for c in calls], [c.arguments for c in calls]
                    ),
                )
                self.s.batches[segment.batch_id] = segment
                break
            batch.calls.pop(0)
            self.emit(
                ToolStarted(
                    node_id=node_id,
                    tool_call_id=first.id,
                    tool_name=first.name,
                    arguments=shown_call(first)["arguments"],
                )
            )
            if first.name == DECLARE_SUBAGENTS:
                self.declare(node_id, first)
            elif self.call_subagent(node_id, first):
                break
        if not batch.calls:
            self.s.batches.pop(batch.batch_id, None)
        return segment

    def declare(self, node_id: str, call: ToolCall) -> None:
        """`openflow_declare_subagents`: register ad-hoc subagents `{node_id}-subagent-{n}`."""
        parsed = _declared_pairs(call.arguments)
        if isinstance(parsed, str):
            text = prompts.invalid_subagent_args(
                DECLARE_SUBAGENTS, parsed, prompts.DECLARE_SHAPE_HINT
            )
            self.add_result(node_id, call, text, is_error=True)
            return
        count = sum(1 for r in self.s.subagents.values() if r.owner == node_id)
        declared: list[SubagentRecord] = []
        for name, purpose in parsed:
            count += 1
            while f"{node_id}-subagent-{count}" in self.s.subagents:
                count += 1
            record = SubagentRecord(
                id=f"{node_id}-subagent-{count}", name=name, purpose=purpose, owner=node_id
            )
            self.s.subagents[record.id] = record
            declared.append(record)
        self.emit(SubagentsDeclared(node_id=node_id, summaries=[self.summary(r) for r in declared]))
        content = prompts.subagents_declared(
            [
                {"id": r.id, "name": r.name, "purpose": r.purpose, "status": "declared"}
                for r in declared
            ]
        )
        self.add_result(node_id, call, content, is_error=False)

    def call_subagent(self, node_id: str, call: ToolCall) -> bool:
        """`openflow_call_subagent`: start the child, or answer why not; True when started."""
        args = call.arguments
        subagent_id, task = args.get("subagent_id"), args.get("input")
        problem = None
        if set(args) - {"subagent_id", "input"}:
            problem = "unexpected keys " + ", ".join(sorted(set(args) - {"subagent_id", "input"}))
        elif not isinstance(subagent_id, str) or not subagent_id.strip():
            problem = "`subagent_id` must be the id of a subagent"
        elif not isinstance(task, str) or not task.strip():
            problem = "`input` must be the task text for the subagent"
        if problem is not None or not isinstance(subagent_id, str) or not isinstance(task, str):
            hint = 'send {"subagent_id": "<id>", "input": "<the whole task>"}'
            text = prompts.invalid_subagent_args(CALL_SUBAGENT, problem or "invalid", hint)
            self.add_result(node_id, call, text, is_error=True)
            return False
        record = next((r for r in self.callable_records(node_id) if r.id == subagent_id), None)
        if record is None:
            self.add_result(node_id, call, prompts.subagent_not_found(subagent_id), is_error=True)
            return False
        if record.status not in CALLABLE:
            text = prompts.subagent_not_callable(subagent_id, record.status)
            self.add_result(node_id, call, text, is_error=True)
            return False
        if record.owner is None:
            first = prompts.saved_subagent_first_message(record.name, task)
        else:
            first = prompts.adhoc_subagent_first_message(record.name, record.purpose, task)
        self.node(node_id).child = ChildRun(
            subagent_id=subagent_id,
            call=call,
            task=task,
            prior_status=record.status,
            transcript=[UserItem(content=first)],
            origins=[None],
        )
        self.set_status(subagent_id, "active")
        self.emit(SubagentStarted(node_id=node_id, subagent_id=subagent_id))
        return True

    # --- the child's model calls --------------------------------------------------------

    def child_of(self, node_id: str) -> ChildRun:
        """The node's running child, copied for this step (callers know there is one)."""
        child = self.node(node_id).child
        if child is None:
            raise EngineError(f"node {node_id!r} has no running subagent to update")
        return child

    def child_name(self, child: ChildRun) -> str:
        record = self.s.subagents.get(child.subagent_id)
        return record.name if record is not None else child.subagent_id

    def child_blocked(self, node_id: str) -> bool:
        child = self.s.nodes[node_id].child
        return (
            child is None
            or child.in_flight is not None
            or child.backoff_until_ms is not None
            or any(b.subagent_id == child.subagent_id for b in self.node_batches(node_id))
        )

    def child_config(self, node_id: str, child: ChildRun) -> tuple[str, dict[str, Any], str, str]:
        """The child's system prompt, output schema, approval mode and model."""
        record = self.s.subagents.get(child.subagent_id)
        saved = self.saved_agent(child.subagent_id)
        if record is not None and record.owner is None and saved is not None:
            mode = saved.tools.approval_mode or "write"
            model = saved.model.strip() or self.node_model(node_id)
            return saved.system_prompt, effective_output_schema(saved), str(mode), model
        name = record.name if record is not None else child.subagent_id
        purpose = record.purpose if record is not None else ""
        system = prompts.adhoc_subagent_system(name, purpose)
        schema = json.loads(json.dumps(DEFAULT_OUTPUT_SCHEMA))
        return system, schema, self.approval_mode(node_id), self.node_model(node_id)

    def child_tools(self, mode: str) -> list[str]:
        """The executable tools a subagent is offered (spec 4.2 subagent catalog)."""
        names = self.s.tool_names or []
        if mode == "read_only":
            return [n for n in names if self.tier_of(n) == "read"]
        return list(names)

    def child_request(self, node_id: str, child: ChildRun) -> AgentRequest | None:
        """The subagent's request (spec 6), or None when no model is configured."""
        system, schema, mode, model = self.child_config(node_id, child)
        if not model:
            return None
        settings = self.wf.settings
        message = prompts.subagent_system_message(system, settings.shared_context or "")
        record = self.s.subagents.get(child.subagent_id)
        tool_names = self.child_tools(mode)
        parent = self.by_id[node_id].agent
        request = AgentRequest(
            workflow_id=self.wf.id,
            run_id=self.s.run_id,
            node_id=child.subagent_id,
            node_label=self.child_name(child),
            model=model,
            provider_id=parent.provider_id or settings.provider_id,
            system_messages=(message,) if message else (),
            task_prompt=child.task,
            input=None,
            output_schema=schema,
            tool_names=tuple(tool_names),
            tool_choice="required",
            fast_mode=bool(settings.fast_mode),
            tool_access_policy="execution",
            allow_user_input=False,
            conversation_mode=False,
            cache_key=cache_key_for(self.wf.id, child.subagent_id, tool_names),
            turn_index=record.calls_done if record is not None else 0,
        )
        harness = harness_tool_specs(request)
        if mode != "read_only":
            harness.append(declare_tool_spec())
        return request.model_copy(update={"harness_tools": tuple(harness)})

    def dispatch_child(self, node_id: str) -> None:
        """Send the child's next model call."""
        child = self.child_of(node_id)
        request = self.child_request(node_id, child)
        if request is None:
            self.fail_child(node_id, "no model is configured for the subagent or its parent node")
            return
        attempt = child.model_attempt
        if child.announced_attempt < attempt:
            child.announced_attempt = attempt
            label = request.node_label
            sid = child.subagent_id
            self.emit(NodeQueued(node_id=sid, label=label, model_attempt=attempt))
            self.emit(NodeStarted(node_id=sid, label=label, model_attempt=attempt))
        call_id = self.new_id(f"model:{child.subagent_id}")
        child.in_flight = InFlightCall(call_id=call_id, model_attempt=attempt, kind="subagent")
        inline = child.inline_next
        child.inline_next = False
        if not inline:
            child.persisted_len += in_place(
                child.origins[child.persisted_len :], child.persisted_len
            )
        self.intents.append(
            CallModel(
                call_id=call_id,
                node_id=node_id,
                model_attempt=attempt,
                request=request,
                delta=TranscriptDelta(
                    base_len=child.persisted_len,
                    items=pack_refs(
                        origin if origin is not None and not inline else item
                        for item, origin in zip(
                            child.transcript[child.persisted_len :],
                            child.origins[child.persisted_len :],
                            strict=True,
                        )
                    ),
                ),
                purpose="subagent",
            )
        )

    def take_child_call(self, call_id: str) -> str | None:
        """The parent whose child made this call (its in-flight mark cleared), or None."""
        for node_id, seen in sorted(self.s.nodes.items()):
            child = seen.child
            if (
                child is not None
                and child.in_flight is not None
                and child.in_flight.call_id == call_id
                and node_id in self.by_id
            ):
                self.child_of(node_id).in_flight = None
                return node_id
        return None

    def settled_child_call(self, node_id: str, persisted_len: int | None) -> ChildRun:
        child = self.child_of(node_id)
        if persisted_len is not None:
            child.persisted_len = persisted_len
        record = self.s.subagents.get(child.subagent_id)
        if record is not None:
            self.s.subagents[record.id] = record.model_copy(
                update={"calls_done": record.calls_done + 1}
            )
        return child

    def on_child_replied(self, node_id: str, fact: ModelReplied) -> None:
        """Apply a child's reply: submit, tool calls, text, or an error."""
        child = self.settled_child_call(node_id, fact.persisted_len)
        reply = fact.reply
        sid = child.subagent_id
        self.report_usage(sid, reply)
        _system, schema, mode, _model = self.child_config(node_id, child)
        outcome = classify_reply(reply, schema).outcome
        stored = stored_reply(fact)
        refs = (
            {
                _compact(item.model_dump(mode="json")): origin
                for item, origin in zip(reply_items(reply), stored, strict=True)
            }
            if stored is not None
            else {}
        )

        def keep(item: TranscriptItem) -> None:
            self.child_append(node_id, item, refs.get(_compact(item.model_dump(mode="json"))))

        for block in reply.reasoning:
            if block.type in ("text", "summary") and block.text.strip():
                self.emit(ChatMessage(node_id=sid, role="thinking", content=block.text))
        if reply.text.strip() and not reply.streamed:
            self.emit(ChatMessage(node_id=sid, role="assistant", content=reply.text.strip()))
        if reply.reasoning and not isinstance(outcome, Completed):
            keep(ReasoningItem(blocks=reply.reasoning))
        if isinstance(outcome, Completed):
            self.finish_child(node_id, outcome.output)
        elif isinstance(outcome, ToolCalls):
            self.on_child_tool_calls(node_id, outcome, mode, keep)
        elif isinstance(outcome, NeedsUserInput | Message):
            self.on_child_text(node_id, outcome.assistant_message, keep)
        elif isinstance(outcome, TurnError):
            self.on_child_error(node_id, outcome)
        else:
            assert_never(outcome)

    def on_child_failed(self, node_id: str, fact: ModelFailed) -> None:
        """A child's model call failed; a lost call (dead worker) is tried again at once."""
        err = classify_failure(fact.failure)
        if fact.refs_missing:
            child = self.child_of(node_id)
            if fact.persisted_len is not None:
                child.persisted_len = fact.persisted_len
            child.inline_next = True
            return
        if not fact.lost:
            self.settled_child_call(node_id, fact.persisted_len)
            self.on_child_error(node_id, err)
            return
        child = self.child_of(node_id)
        if fact.persisted_len is not None:
            child.persisted_len = fact.persisted_len
        display = error_text(err)
        if child.transient_streak >= self.wf.settings.retry_policy.max_attempts:
            self.fail_child(node_id, display)
            return
        child.transient_streak += 1
        child.retries = min(child.retries + 1, MAX_MODEL_ATTEMPT)
        self.emit(
            NodeRetrying(
                node_id=child.subagent_id,
                label=self.child_name(child),
                attempt=child.model_attempt,
                backoff_ms=0,
                error=display,
            )
        )

    def child_append(
        self, node_id: str, item: TranscriptItem, origin: StoredItemRef | None = None
    ) -> None:
        child = self.child_of(node_id)
        child.transcript.append(item)
        child.origins.append(origin)

    def on_child_tool_calls(
        self,
        node_id: str,
        outcome: ToolCalls,
        mode: str,
        keep: Keep,
    ) -> None:
        """Queue the child's calls without approval; refuse what a subagent may not run."""
        child = self.child_of(node_id)
        child.transient_streak = 0
        child.auto_continue = 0
        if outcome.assistant_message.strip():
            keep(AssistantItem(content=outcome.assistant_message.strip()))
        offered = set(self.child_tools(mode)) if self.s.tool_names is not None else None
        queued: list[ToolCall] = []
        nudges: list[str] = []
        sid = child.subagent_id
        label = self.child_name(child)
        for raw in outcome.calls:
            args = self.relativize(raw.arguments)
            call = raw.model_copy(update={"arguments": args})
            if args == raw.arguments:
                keep(ToolCallItem(call=call))
            else:
                self.child_append(node_id, ToolCallItem(call=call))
            self.emit(ToolCallProposed(node_id=sid, label=label, tool_call=shown_call(call)))
            refusal = self.child_refusal(call, raw.id in outcome.invalid_call_ids, mode, offered)
            if refusal is not None:
                if refusal == prompts.MISSING_CONTENT_RESULT:
                    nudges.append(prompts.MISSING_CONTENT_NUDGE)
                self.child_result(node_id, call, refusal, is_error=True)
                continue
            queued.append(call)
        for text in dict.fromkeys(nudges):
            self.child_append(node_id, UserItem(content=text))
        if queued:
            batch = PendingBatch(
                batch_id=self.new_id("batch"),
                node_id=node_id,
                calls=queued,
                requires_approval=False,
                side_effects=batch_has_side_effects(
                    [c.name for c in queued], [c.arguments for c in queued]
                ),
                subagent_id=sid,
            )
            self.s.batches[batch.batch_id] = batch

    def child_refusal(
        self, call: ToolCall, invalid: bool, mode: str, offered: set[str] | None
    ) -> str | None:
        """The error result of a child's call that does not run, or None to run it."""
        if invalid:
            return (
                f"[invalid_args] {call.name}: arguments are not valid JSON — send one JSON "
                "object with the tool's fields"
            )
        if call.name in RUNTIME_TOOLS:
            return prompts.SUBAGENT_BUILTIN_REFUSED
        if call.name == "write" and call.arguments.get("content") is None:
            return prompts.MISSING_CONTENT_RESULT
        verdict, reason = plan_verdict(
            call.name,
            call.arguments,
            plan_mode=self.s.plan_source is not None,
            planning=self.s.planning,
            is_source=False,
            read_only=mode == "read_only",
        )
        if verdict == "deny":
            return prompts.denial_result(reason, by_user=False)
        if approval_decision(mode, self.tier_of(call.name, call.arguments)) == "deny":
            return prompts.denial_result(
                f"this subagent is read-only and {call.name!r} changes things", by_user=False
            )
        if offered is not None and call.name not in offered:
            return f"Tool unavailable: tool {call.name} is not offered to this subagent"
        return None

    def child_result(
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
        self.child_append(node_id, ToolResultItem(result=result), origin)
        self.emit(
            ToolCompleted(
                node_id=self.child_of(node_id).subagent_id,
                tool_call_id=call.id,
                tool_name=call.name,
                content=content,
                is_error=is_error,
                artifact_ids=list(artifact_ids),
                output_meta=output_meta,
            )
        )

    def on_child_text(self, node_id: str, text: str, keep: Keep) -> None:
        """A text-only or input-request turn: the autonomous nudge, failing at the cap."""
        child = self.child_of(node_id)
        child.transient_streak = 0
        if text.strip():
            keep(AssistantItem(content=text.strip()))
        child.auto_continue += 1
        if child.auto_continue >= SUBAGENT_TEXT_CAP:
            self.fail_child(
                node_id, prompts.SUBAGENT_NARRATION_FAILURE.format(cap=SUBAGENT_TEXT_CAP)
            )
            return
        wrote = any(
            isinstance(item, ToolResultItem)
            and item.result.tool_name == "write"
            and not item.result.is_error
            for item in child.transcript[-40:]
        )
        nudge = prompts.text_only_nudge(
            conversational=False,
            narrated_write=prompts.narrates_write(text),
            wrote_before=wrote,
            plan_source=False,
            free_text_only=False,
        )
        self.child_append(node_id, UserItem(content=nudge))

    def on_child_error(self, node_id: str, err: TurnError) -> None:
        """Transient errors back off; an interrupt ends the child; anything else fails it."""
        child = self.child_of(node_id)
        display = error_text(err)
        label = self.child_name(child)
        self.emit(AiInvokeFailed(node_id=child.subagent_id, label=label, error=display))
        if err.error == "interrupted":
            self.interrupt(node_id)
            return
        if err.error == "transient":
            policy = self.wf.settings.retry_policy
            if child.transient_streak < policy.max_attempts:
                child.transient_streak += 1
                child.retries = min(child.retries + 1, MAX_MODEL_ATTEMPT)
                delay = backoff_delay_ms(policy.backoff_ms, child.transient_streak)
                delay += jitter_ms(child.subagent_id)
                if err.retry_after_ms is not None:
                    delay = max(delay, err.retry_after_ms)
                child.backoff_until_ms = self.now + delay
                self.emit(
                    NodeRetrying(
                        node_id=child.subagent_id,
                        label=label,
                        attempt=child.model_attempt,
                        backoff_ms=delay,
                        error=display,
                    )
                )
                self.intents.append(
                    SleepUntil(node_id=child.timer_key, wake_at_ms=child.backoff_until_ms)
                )
                return
        self.fail_child(node_id, display)

    def child_timer_fired(self, key: str) -> bool:
        """Clear the backoff of the child whose timer this is; False when no child has it."""
        for node_id, seen in sorted(self.s.nodes.items()):
            child = seen.child
            if child is not None and child.timer_key == key and node_id in self.by_id:
                self.child_of(node_id).backoff_until_ms = None
                return True
        return False

    # --- the child's tool batches -------------------------------------------------------

    def on_child_tools(self, batch: PendingBatch, fact: ToolsFinished) -> None:
        """Fold a child's tool results into its transcript; the parent keeps the file records."""
        node_id = batch.node_id
        ns = self.node(node_id)
        child = ns.child
        if child is None or child.subagent_id != batch.subagent_id:
            return
        for event in fact.events:
            self.emit_reported(child.subagent_id, event)
        by_id = {r.tool_call_id: (i, r) for i, r in enumerate(fact.results)}
        for call in batch.calls:
            found = by_id.pop(call.id, None)
            if found is None:
                continue
            index, result = found
            self.time_tool(node_id, call.name, fact.ms, index)
            origin = stored_result(fact, index)
            self.child_result(
                node_id,
                call,
                result.content,
                result.is_error,
                origin=origin,
                artifact_ids=result.artifact_ids,
                output_meta=result.output_meta,
            )
        ns.changed_files.extend(dict(r) for r in fact.changed_files)
        ns.reads.extend(dict(r) for r in fact.reads)
        if fact.interrupted:
            self.interrupt(node_id)
        else:
            self.close_child_calls(node_id, batch.calls, prompts.INTERRUPTED_RESULT)

    def on_child_tools_unknown(self, batch: PendingBatch) -> None:
        """A child's side-effecting batch lost with its worker: its calls are settled unknown."""
        child = self.s.nodes[batch.node_id].child
        if child is None or child.subagent_id != batch.subagent_id:
            return
        for call in batch.calls:
            self.emit(
                ToolOutcomeUnknown(
                    node_id=child.subagent_id, tool_call_id=call.id, tool_name=call.name
                )
            )
        self.close_child_calls(batch.node_id, batch.calls, prompts.UNKNOWN_OUTCOME_RESULT)

    def close_child_calls(self, node_id: str, calls: list[ToolCall], content: str) -> None:
        child = self.child_of(node_id)
        answered = {
            item.result.tool_call_id
            for item in child.transcript
            if isinstance(item, ToolResultItem)
        }
        for call in calls:
            if call.id not in answered:
                self.child_result(node_id, call, content, is_error=True)

    # --- the child's end ----------------------------------------------------------------

    def finish_child(self, node_id: str, output: Any) -> None:
        """The child submitted: its output becomes the result of the parent's call."""
        ns = self.node(node_id)
        child = self.child_of(node_id)
        name = self.child_name(child)
        ns.child = None
        self.set_status(child.subagent_id, "completed")
        self.emit(NodeCompleted(node_id=child.subagent_id, label=name, output=output, handoff=None))
        self.emit(SubagentCompleted(node_id=node_id, subagent_id=child.subagent_id))
        self.add_result(
            node_id, child.call, prompts.subagent_completed(name, output), is_error=False
        )

    def fail_child(self, node_id: str, error: str) -> None:
        """The child failed for good: the parent's call gets the error and the parent goes on."""
        ns = self.node(node_id)
        child = self.child_of(node_id)
        name = self.child_name(child)
        for batch in self.node_batches(node_id):
            if batch.subagent_id == child.subagent_id:
                self.s.batches.pop(batch.batch_id)
        ns.child = None
        self.set_status(child.subagent_id, "failed")
        self.emit(SubagentFailed(node_id=node_id, subagent_id=child.subagent_id, error=error))
        self.add_result(node_id, child.call, prompts.subagent_failed(name, error), is_error=True)

    def abort_child(self, node_id: str) -> list[str]:
        """End a running child as interrupted (callable again); the ids of its work to cancel."""
        ns = self.node(node_id)
        child = ns.child
        if child is None:
            return []
        ids = [child.in_flight.call_id] if child.in_flight is not None else []
        for batch in self.node_batches(node_id):
            if batch.subagent_id == child.subagent_id:
                if batch.in_flight:
                    ids.append(batch.batch_id)
                self.s.batches.pop(batch.batch_id)
        ns.child = None
        self.set_status(child.subagent_id, child.prior_status)
        self.emit(
            SubagentFailed(
                node_id=node_id, subagent_id=child.subagent_id, error=prompts.SUBAGENT_INTERRUPTED
            )
        )
        self.add_result(node_id, child.call, prompts.INTERRUPTED_RESULT, is_error=True)
        return ids

    def interrupt(self, node_id: str) -> None:
        ids = self.abort_child(node_id)
        if ids:
            self.intents.append(CancelWork(ids=tuple(sorted(ids))))
        super().interrupt(node_id)


def _declared_pairs(args: dict[str, Any]) -> list[tuple[str, str]] | str:
    """The `(name, purpose)` pairs of a declare call, or what is wrong with its arguments."""
    if set(args) - {"subagents"}:
        return "unexpected keys " + ", ".join(sorted(set(args) - {"subagents"}))
    items = args.get("subagents")
    if not isinstance(items, list) or not items:
        return "`subagents` must be a non-empty list"
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return f"subagents[{i}] must be an object"
        extra = set(item) - {"name", "purpose"}
        if extra:
            return f"subagents[{i}] has unexpected keys " + ", ".join(sorted(extra))
        name, purpose = item.get("name"), item.get("purpose")
        if not isinstance(name, str) or not name.strip():
            return f"subagents[{i}].name must be a non-empty string"
        if not isinstance(purpose, str):
            return f"subagents[{i}].purpose must be a string"
        pairs.append((name.strip(), purpose.strip()))
    return pairs


__all__ = [
    "CALLABLE",
    "SUBAGENT_TEXT_CAP",
    "Subagents",
    "call_tool_spec",
    "declare_tool_spec",
    "snapshot_agents",
]
