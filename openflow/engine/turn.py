"""The per-node turn machine: what one model answer does to its node (spec 3, 4.3, 11, 3.9).

`Turns` extends the run's working copy (`run_base.RunBase`, which builds requests) with the turn
protocol: it classifies replies and applies completions (with Plan Mode's freeze gate), tool calls
(with the approval and Plan Mode policy), questions, text-only turns, errors and their nudges,
and output repair. Subagents and the reducer in `advance` build on top.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, assert_never

from pydantic import ValidationError

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
from openflow.engine.events import (
    AiInvokeFailed,
    ChatMessage,
    NodeAwaitingInput,
    NodeCompleted,
    NodeInterrupted,
    NodeRetrying,
    OutputRepairFailed,
    OutputRepairStarted,
    OutputRepairSucceeded,
    ToolApprovalRequested,
    ToolCallProposed,
    UsageReported,
)
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
)
from openflow.engine.protocol import (
    AUTO_CONTINUE_CAP,
    MAX_MODEL_ATTEMPT,
    PROTOCOL_CAP,
    REPAIR_SUFFIX,
    Keep,
    backoff_delay_ms,
    error_text,
    jitter_ms,
    reply_items,
    shown_call,
    structured_problem,
)
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure
from openflow.engine.run_base import RunBase
from openflow.engine.spec import (
    submission_schema,
    template_headings,
)
from openflow.engine.state import (
    CallModel,
    ChangeEvidencePacket,
    InFlightCall,
    PendingBatch,
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
    ToolResultItem,
    TranscriptItem,
    UserItem,
)


class Turns(RunBase):
    """The turn protocol of every node, on top of the run's bookkeeping."""

    # --- model replies ------------------------------------------------------------------

    def on_reply(
        self, node_id: str, reply: ModelReply, stored: Sequence[StoredItemRef] | None = None
    ) -> None:
        """Apply a node's classified reply (spec 3.4); `stored` says where the run store holds
        each of `reply_items(reply)`, so the items the node keeps are sent by reference."""
        ns = self.node(node_id)
        agent = self.by_id[node_id].agent
        self.report_usage(node_id, reply)
        headings = self.markdown_headings(node_id)
        result = classify_reply(reply, submission_schema(agent), headings)
        refs = (
            {
                json.dumps(item.model_dump(mode="json"), sort_keys=True): origin
                for item, origin in zip(reply_items(reply), stored, strict=True)
            }
            if stored is not None
            else {}
        )

        def keep(item: TranscriptItem) -> None:
            key = json.dumps(item.model_dump(mode="json"), sort_keys=True)
            self.append(node_id, item, refs.get(key))

        for block in reply.reasoning:
            if block.type in ("text", "summary") and block.text.strip():
                self.emit(ChatMessage(node_id=node_id, role="thinking", content=block.text))
        if reply.text.strip() and not reply.streamed:
            self.emit(ChatMessage(node_id=node_id, role="assistant", content=reply.text.strip()))
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

    def count_usage(self, reply: ModelReply) -> None:
        """Add a reply's tokens and cost to the run's totals."""
        if reply.usage is None:
            return
        self.s.tokens_in += reply.usage.prompt_tokens
        self.s.tokens_out += reply.usage.completion_tokens
        if reply.usage.cost_usd is not None:
            self.s.cost_usd = round((self.s.cost_usd or 0.0) + reply.usage.cost_usd, 6)

    def report_usage(self, node_id: str, reply: ModelReply) -> None:
        if reply.usage is None:
            return
        self.count_usage(reply)
        self.emit(
            UsageReported(
                node_id=node_id,
                usage=reply.usage.model_dump(),
                model=reply.model,
                max_context_tokens=reply.max_context_tokens,
            )
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
            NodeCompleted(
                node_id=node_id, label=self.label(node_id), output=output, handoff=handoff
            )
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
        decision = approval_decision(mode, self.tier_of(call.name, args))
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
            self.emit(ToolCallProposed(node_id=node_id, label=label, tool_call=shown_call(call)))
        if requires:
            self.announce_approval(batch_id)

    def announce_approval(self, batch_id: str) -> None:
        """Tell people a batch waits for their decision (one ToolApprovalRequested a batch)."""
        batch = self.s.batches[batch_id]
        calls = batch.calls
        first = calls[0]
        self.emit(
            ToolApprovalRequested(
                request={
                    "approvalId": batch_id,
                    "nodeId": batch.node_id,
                    "nodeLabel": self.label(batch.node_id),
                    "toolCall": shown_call(first),
                    "tier": self.tier_of(first.name, first.arguments),
                    "toolCalls": [shown_call(c) for c in calls],
                }
            )
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
                    ChatMessage(
                        node_id=node_id, role="assistant", content=prompts.NARRATION_HANDOFF
                    )
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
                ChatMessage(node_id=node_id, role="assistant", content=outcome.assistant_message)
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
            NodeAwaitingInput(
                node_id=node_id,
                label=self.label(node_id),
                context=context,
                is_initial=False,
                structured_input=structured,
            )
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
        self.emit(AiInvokeFailed(node_id=node_id, label=label, error=display))
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
            ChatMessage(node_id=node_id, role="assistant", content=prompts.EMPTY_TURNS_HANDOFF)
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
            NodeRetrying(
                node_id=node_id,
                label=self.label(node_id),
                attempt=ns.model_attempt,
                backoff_ms=delay,
                error=display,
            )
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
        self.emit(NodeInterrupted(node_id=node_id, label=self.label(node_id)))

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
        self.emit(OutputRepairStarted(node_id=node_id, model=request.model))
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
                    self.emit(OutputRepairSucceeded(node_id=node_id, model=reply.model or "repair"))
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
        self.emit(OutputRepairFailed(node_id=node_id, reason=reason))
        self.on_error(node_id, original, allow_repair=False)

    def on_repair_failure(self, node_id: str, failure: ProviderFailure) -> None:
        original = self.take_repair(node_id)
        if original is None:
            return
        self.emit(OutputRepairFailed(node_id=node_id, reason=error_text(classify_failure(failure))))
        if failure.kind == "interrupted":
            self.interrupt(node_id)
            return
        self.on_error(node_id, original, allow_repair=False)


__all__ = [
    "AUTO_CONTINUE_CAP",
    "MAX_MODEL_ATTEMPT",
    "PROTOCOL_CAP",
    "REPAIR_SUFFIX",
    "Keep",
    "Turns",
    "backoff_delay_ms",
    "error_text",
    "jitter_ms",
    "reply_items",
    "shown_call",
    "structured_problem",
]
